"""The block design and the per-job numbers, on hand-built data."""

from __future__ import annotations

from workers.executor import pair_slots, run_sampling, variant_opens


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
