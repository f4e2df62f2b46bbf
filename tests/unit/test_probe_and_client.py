"""Parsing what llama-server prints: --version, --help and /metrics."""

from __future__ import annotations

import pytest

from farm.versions import parse_version
from workers.job.runtime.client import Generation, SpecCounters, parse_metrics
from workers.job.runtime.probe import parse_help

HELP_SAMPLE = """----- common params -----

-h,    --help, --usage                  print usage and exit
-c,    --ctx-size N                     size of the prompt context (default: 0)
                                        (env: LLAMA_ARG_CTX_SIZE)
-fa,   --flash-attn [on|off|auto]       set Flash Attention use
-ctk,  --cache-type-k TYPE              KV cache data type for K
                                        allowed values: f32, f16, q8_0
                                        (default: f16)
--warmup, --no-warmup                   whether to perform warmup
--spec-draft-model, -md, --model-draft FNAME
                                        draft model for speculative decoding
--spec-type none,draft-mtp,ngram-simple
                                        comma-separated list of types
-sm,   --split-mode {none,layer,row}    how to split the model
-ts,   --tensor-split N0,N1,N2,...      fraction of the model to offload to each GPU
--spec-synth-rates P0,P1,...            comma-separated per-position acceptance rates
-dev,  --device <dev1,dev2,..>          comma-separated list of devices
--draft, --draft-n, --draft-max N       the argument has been removed. use --spec-draft-n-max
"""


@pytest.mark.parametrize(("text", "build", "commit"), [
    ("version: 0.2.0-dev (build 10587, commit 3f545becc)\nbuilt with gcc", 10587, "3f545becc"),
    ("version: 10360 (08c69e381)\nbuilt with clang for arm64", 10360, "08c69e381"),
    ("something else", None, None),
])
def test_version_formats_old_and_new(text: str, build: int | None, commit: str | None) -> None:
    assert parse_version(text) == (build, commit)


def test_help_options_by_every_name_with_hints_and_choices() -> None:
    options = parse_help(HELP_SAMPLE)
    assert options["c"] is options["ctx-size"] and options["c"].hint == "N"
    assert options["fa"].choices == ("on", "off", "auto")
    assert options["cache-type-k"].choices == ("f32", "f16", "q8_0")
    assert not options["no-warmup"].takes_value
    assert options["md"].names == ("spec-draft-model", "md", "model-draft")
    assert options["spec-type"].choices == ("none", "draft-mtp", "ngram-simple")
    assert options["split-mode"].choices == ("none", "layer", "row")
    for pattern in ("tensor-split", "spec-synth-rates", "device"):  # a shape, not choices
        assert options[pattern].takes_value and options[pattern].choices == ()
    assert options["draft-max"].removed and not options["ctx-size"].removed
    assert "" not in options


METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
llamacpp:prompt_tokens_total 120
llamacpp:spec_decode_num_drafts_total 7
llamacpp:spec_decode_num_draft_tokens_total 40
llamacpp:spec_decode_num_accepted_tokens_total 31
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 7
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 5
"""


def test_metrics_counters_and_their_deltas() -> None:
    after = parse_metrics(METRICS)
    assert after == SpecCounters(7, 40, 31, (7, 0, 5))
    assert after - SpecCounters(2, 10, 8, (2,)) == SpecCounters(5, 30, 23, (5, 0, 5))
    assert parse_metrics("llamacpp:n_decode_total 3\n") == SpecCounters()


def test_time_per_output_token_excludes_the_first_token() -> None:
    generation = Generation(text="x", prompt_tokens=5, generated_tokens=11, prompt_tok_s=None,
                            decode_tok_s=100.0, ttft_ms=50.0, e2e_ms=150.0, draft_n=0,
                            draft_accepted=0)
    assert generation.tpot_ms == pytest.approx(10.0)
    assert generation.client_decode_tok_s == pytest.approx(100.0)
