"""The block design and the per-job numbers, on hand-built data."""

from __future__ import annotations

import pytest

from workers.job.executor import merge_streams, pair_slots, run_sampling, variant_opens
from workers.job.results import stream_window
from workers.job.runtime.client import Generation


def test_blocks_are_counterbalanced_ab_ba() -> None:
    slots = [slot for pair in range(3) for slot in pair_slots(pair)]
    assert [s.role[0] for s in slots] == list("bvvbbv")
    assert [s.block for s in slots] == [0, 1, 2, 3, 4, 5]
    assert [s.pair for s in slots] == [0, 0, 1, 1, 2, 2]
    assert [s.position for s in slots] == [0, 1, 0, 1, 0, 1]


def test_the_job_key_picks_the_arm_that_opens_and_keeps_it() -> None:
    slots = [slot for pair in range(2) for slot in pair_slots(pair, variant_first=True)]
    assert [s.role[0] for s in slots] == list("vbbv")
    keys = [f"{n:064x}" for n in range(2000)]
    opened = [variant_opens(key) for key in keys]
    assert opened == [variant_opens(key) for key in keys]  # a resumed job keeps its order
    assert 0.45 < sum(opened) / len(opened) < 0.55


def test_each_run_gets_its_own_seed_the_same_in_both_arms() -> None:
    base = {"temperature": 0.0, "seed": 42}
    seeds = {run_sampling(base, prompt, rep)["seed"] for prompt in ("a", "b") for rep in range(3)}
    assert len(seeds) == 6 and all(0 <= seed < 0xFFFFFFFF for seed in seeds)
    assert run_sampling(base, "a", 1) == run_sampling(dict(base), "a", 1)  # paired arms
    assert run_sampling(base, "a", 1)["temperature"] == 0.0 and base["seed"] == 42


def test_streams_of_a_run_draw_their_own_seeds_and_the_first_keeps_the_runs() -> None:
    base = {"temperature": 0.7, "seed": 42}
    seeds = [run_sampling(base, "a", 1, stream)["seed"] for stream in range(4)]
    assert seeds[0] == run_sampling(base, "a", 1)["seed"] and len(set(seeds)) == 4


def _stream(sent: float, first: float, last: float, tokens: int, tok_s: float,
            slot: int) -> Generation:
    return Generation(text=f"s{slot}", prompt_tokens=20, generated_tokens=tokens,
                      prompt_tok_s=100.0 + slot, decode_tok_s=tok_s,
                      ttft_ms=(first - sent) * 1000, e2e_ms=(last - sent) * 1000,
                      draft_n=10, draft_accepted=5 + slot, chunk_gaps_ms=[1.0],
                      sent_at=sent, first_at=first, last_at=last, slot=slot)


def test_the_window_of_simultaneous_streams_and_their_overlap() -> None:
    streams = [_stream(0.0, 0.1, 2.1, 101, 50.0, 0), _stream(0.0, 0.2, 2.2, 101, 50.0, 1),
               _stream(0.0, 0.6, 1.6, 51, 50.0, 2)]
    window = stream_window(streams)
    # Window 0.1 .. 2.2 s; all three decode from 0.6 to 1.6 s.
    assert window.aggregate_tok_s == pytest.approx(250 / 2.1)
    assert window.overlap == pytest.approx(1.0 / 2.1)
    alone = stream_window(streams[:1])
    assert alone.overlap is None and alone.aggregate_tok_s == pytest.approx(100 / 2.0)


def test_a_runs_figures_merge_its_streams_totals_and_means() -> None:
    streams = [_stream(0.0, 0.1, 2.1, 101, 40.0, 0), _stream(0.0, 0.3, 2.3, 101, 60.0, 1)]
    run = merge_streams(streams)
    assert (run.text, run.prompt_tokens, run.generated_tokens) == ("s0", 20, 202)
    assert (run.decode_tok_s, run.prompt_tok_s) == (50.0, 100.5)
    assert (run.draft_n, run.draft_accepted, run.streams) == (20, 11, 2)
    assert run.ttft_ms == pytest.approx(200.0) and run.e2e_ms == pytest.approx(2200.0)
    assert run.tpot_ms == pytest.approx(2000.0 / 100)  # per stream, as one stream's
    assert merge_streams(streams[:1]) is streams[0]
