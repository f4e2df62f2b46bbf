"""The block design and the per-job numbers, on hand-built data."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from farm.analysis import job_numbers
from workers.executor import schedule


def test_blocks_are_counterbalanced_ab_ba() -> None:
    slots = schedule(3)
    assert [s.role[0] for s in slots] == list("bvvbbv")
    assert [s.block for s in slots] == [0, 1, 2, 3, 4, 5]
    assert [s.pair for s in slots] == [0, 0, 1, 1, 2, 2]
    assert [s.position for s in slots] == [0, 1, 0, 1, 0, 1]


def _run(arm: str, prompt: str, tok_s: float, drafted: int = 0, accepted: int = 0) -> dict:
    return {"arm": arm, "prompt_id": prompt, "decode_tok_s": tok_s,
            "spec_drafted": drafted, "spec_accepted": accepted}


def test_speedup_is_the_geometric_mean_of_per_prompt_median_ratios() -> None:
    runs = pd.DataFrame([
        _run("baseline", "a", 100), _run("baseline", "a", 110), _run("baseline", "a", 90),
        _run("variant", "a", 200, 10, 8), _run("variant", "a", 210, 10, 8),
        _run("variant", "a", 190, 10, 8),
        _run("baseline", "b", 100), _run("variant", "b", 50, 20, 2),
    ])
    numbers = job_numbers(runs)
    assert numbers["speedup"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert numbers["drafted"] == 50 and numbers["accepted"] == 26
    assert numbers["acceptance_rate"] == pytest.approx(26 / 50)
    assert numbers["runs"] == 8


def test_no_drafts_means_no_acceptance_rate_not_zero() -> None:
    runs = pd.DataFrame([_run("baseline", "a", 100), _run("variant", "a", 100)])
    assert math.isnan(job_numbers(runs)["acceptance_rate"])
