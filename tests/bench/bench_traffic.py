"""Traffic benchmark (a script, not a test): the full campaign beyond one greedy stream on
this CPU, for SmolLM2 with n-gram drafting and the MTP oracle fixture with draft-mtp.

Per model, on a private data dir, four campaigns of three block pairs each:

- ``concurrency: [1, 2, 4]`` (simultaneous streams, one server slot each);
- ``stop: natural`` (the model stops at EOS, n-predict a cap);
- ``temperature: 0.7`` (a seed per run and stream; the oracle's drafts sampled and
  verified by rejection sampling, ``--spec-draft-sampling probabilistic``);
- ``prompt-length``: the prompts as written and two tiers of the bundled document before
  each, 1000 and 4000 tokens for SmolLM2 (8192 of training context), 1000 and 3000 for
  the oracle (4096).

It prints the report of every job (per-request and aggregate speedup with intervals,
overlap, acceptance per slot, prompt tokens and prompt tok/s, memory), writes the HTML
page (speedup vs concurrency and vs prompt length) and exits 0 unless a command fails.
About 20-30 minutes on 2 idle cores; never run it beside another llama-server.

    .venv/bin/python -m tests.bench.bench_traffic [--keep DIR]    (from the checkout)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from farm.settings import load_settings
from tests.bench.farm_cli import ORACLE_PROMPTS, farm, private_store, smollm2_prompts
from workers.paths import NodePaths
from workers.setup.provision import provision

# What each campaign adds to a model's matrix.
AXES: dict[str, dict[str, Any]] = {
    # Longer runs: the server takes late streams in after the first one's prompt, which is
    # a smaller part of a longer run.
    "concurrency": {"concurrency": [1, 2, 4], "n-predict": 160},
    "natural": {"stop": "natural"},
    "sampled": {"sampling": {"temperature": 0.7, "seed": 42}},
    "long": {},  # each model's tiers: TIERS
}
TIERS = {"smollm2": [0, 1000, 4000], "oracle": [0, 1000, 3000]}


def models(paths: dict[str, Path]) -> list[dict[str, Any]]:
    """Per model: its matrix without the axes."""
    design = {"n-predict": 64, "repetitions": 1, "pairs": 3, "max-pairs": 3,
              "flags": {"ctx-size": 16384, "threads": 2}}
    return [
        {"key": "smollm2", "models": [{"name": "smollm2-135m", "path": str(paths["smollm2"])}],
         "prompt-mode": "chat", "prompts": smollm2_prompts(), **design,
         "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]},
        {"key": "oracle", "models": [{"name": "oracle-cpu",
                                      "path": str(paths["qwen35-mtp-oracle-cpu"])}],
         "prompt-mode": "completion", "prompts": ORACLE_PROMPTS, **design,
         "variants": [{"name": "mtp", "flags": {
             "spec-type": "draft-mtp", "spec-draft-n-max": 3,
             "spec-draft-sampling": "probabilistic"}}]},
    ]


def _cell(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def show(rows: list[dict[str, Any]]) -> None:
    print(f"{'campaign':<22}{'varying':<44}{'speedup [95% CI]':<22}{'aggregate':<22}"
          f"{'overlap':>8}{'accept':>8}{'slots':>24}{'prompt tok':>11}{'pp tok/s b/v':>16}"
          f"{'mem MiB':>9}")
    for row in rows:
        interval = (f"{_cell(row['speedup'])} [{_cell(row['ci_low'])}, "
                    f"{_cell(row['ci_high'])}]")
        aggregate = ("" if row["aggregate_speedup"] is None else
                     f"{_cell(row['aggregate_speedup'])} [{_cell(row['aggregate_ci_low'])}, "
                     f"{_cell(row['aggregate_ci_high'])}]")
        slots = " ".join(f"{slot}:{100 * rate:.0f}%"
                         for slot, rate in (row["slot_acceptance"] or {}).items())
        print(f"{row['campaign']:<22}{row['varying_flags']:<44}{interval:<22}{aggregate:<22}"
              f"{_cell(row['overlap_min']):>8}{_cell(row['acceptance_rate']):>8}{slots:>24}"
              f"{_cell(row['prompt_tokens'], 0):>11}"
              f"{_cell(row['prompt_tok_s_baseline'], 0) + '/' + _cell(row['prompt_tok_s_variant'], 0):>16}"  # noqa: E501
              f"{_cell(row['memory_cost_mb'], 0):>9}")
        if row["low_slots"] or row["stop_mismatch"] or row["state"] != "done":
            print(f"    state {row['state']}, low slots {row['low_slots']}, stop mismatch "
                  f"{row['stop_mismatch']}, error {row['error']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keep", type=Path, help="use and keep this data dir")
    args = parser.parse_args(argv)
    paths = provision(NodePaths.of(load_settings())).models
    with private_store("specfarm-bench-traffic-", args.keep) as (workdir, env):
        started = time.perf_counter()
        for model in models(paths):
            key = model.pop("key")
            for axis, extra in AXES.items():
                campaign = f"{key}-{axis}"
                path = workdir / f"{campaign}.yaml"
                tiers = {"prompt-length": TIERS[key]} if axis == "long" else {}
                path.write_text(yaml.safe_dump(
                    {"campaign": campaign, **model, **extra, **tiers}, sort_keys=False))
                farm(env, "run", str(path), jobs_may_fail=True)
        rows = json.loads(farm(env, "report", "--all", "--format", "json"))["jobs"]
        show(rows)
        for campaign in dict.fromkeys(row["campaign"] for row in rows):
            farm(env, "report", campaign, "--format", "html", "-o",
                 str(workdir / f"{campaign}.html"))
        print(f"one HTML page per campaign in {workdir}"
              + ("" if args.keep else " (removed at exit: pass --keep DIR)"))
        print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
