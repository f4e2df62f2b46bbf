"""The client's clock as the witness of the server's timings (issue 55, item 13): the
check on crafted jobs, a job on a commit's build timed by the client, and the seeded
simulation's false positives and power in the audit's noise cells (few jobs here;
``python -m tests.unit.simulate_clock`` prints them with many)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from farm.results.summarize import summarize
from farm.stats.clock import MIN_RUNS, TOLERANCE, clock_check
from farm.summary import RunFacts, speed_clock
from tests.unit.simulate import TWO_STAGE_CELLS
from tests.unit.simulate_clock import LIE, clock_job, flagged
from tests.unit.test_stats import make_runs


def _job(seed: int = 1, **lies: float) -> pd.DataFrame:
    """One job of the simulation's steady cell (``clock_job``)."""
    return clock_job(np.random.default_rng(seed), "normal", **lies)


def test_an_honest_job_agrees_with_the_clients_clock() -> None:
    check = clock_check(_job())
    assert check.flag is False
    for ratio in (check.ratio_baseline, check.ratio_variant, check.disagreement):
        assert abs(math.log(ratio)) < 0.01


def test_a_lie_in_the_variant_is_the_disagreement_and_flagged() -> None:
    check = clock_check(_job(variant_lie=LIE))
    assert check.flag is True
    assert check.disagreement == pytest.approx(LIE, rel=0.01)
    assert check.ratio_baseline == pytest.approx(1.0, abs=0.01)


def test_a_lie_in_both_arms_leaves_the_speedup_but_is_flagged() -> None:
    check = clock_check(_job(both_lie=LIE))
    assert check.flag is True and check.disagreement == pytest.approx(1.0, abs=0.01)
    assert check.ratio_baseline == pytest.approx(LIE, rel=0.01)


def test_without_the_clients_speeds_nothing_is_judged() -> None:
    runs = _job()
    check = clock_check(runs.drop(columns="client_decode_tok_s"))
    assert check.flag is None and math.isnan(check.disagreement)
    # An arm with fewer than MIN_RUNS runs timed by both (under two tokens: no client speed).
    runs.loc[runs.index[MIN_RUNS - 1:], "client_decode_tok_s"] = np.nan
    assert clock_check(runs).flag is None


def test_a_commit_job_takes_its_speedup_from_the_clients_clock() -> None:
    """The same runs of a server that reports its drafting 1.6x faster than it ran: the
    operator's build shows the lie and the flag; a commit's shows the client's speedup."""
    rng = np.random.default_rng(3)
    true = make_runs(lambda arm, block, prompt, rep: (15.0 if arm == "variant" else 10.0)
                     * rng.lognormal(0, 0.02), pairs=4)
    # The client times the same generation, give or take its stream's jitter.
    true["client_decode_tok_s"] = true["decode_tok_s"] * rng.lognormal(0, 0.003, len(true))
    runs = true.assign(decode_tok_s=true["decode_tok_s"]
                       * np.where(true["arm"] == "variant", LIE, 1.0))
    honest = summarize(runs.assign(decode_tok_s=runs["client_decode_tok_s"]), RunFacts(),
                       kind="variant", design=None)
    server = summarize(runs, RunFacts(), kind="variant", design=None)
    client = summarize(runs, RunFacts(), kind="variant", design=None, clock="client")
    assert server.speed_clock == "server" and client.speed_clock == "client"
    assert server.clock_flag is True and client.clock_flag is True
    assert honest.speedup is not None
    assert server.speedup == pytest.approx(LIE * honest.speedup, rel=0.01)
    assert client.speedup == pytest.approx(honest.speedup, rel=1e-9)
    assert client.clock_disagreement == pytest.approx(LIE, rel=0.01)


def test_a_job_is_timed_by_the_client_when_either_arm_is_built_from_a_commit() -> None:
    named = {"name": "cpu", "path": None}
    commit = {**named, "source": {"git": "https://example.org/llama.cpp", "commit": "a" * 40}}
    assert speed_clock({"baseline": {"build": named}, "variant": {"build": named}}) == "server"
    assert speed_clock({"baseline": {"build": named}, "variant": {"build": commit}}) == "client"
    assert speed_clock({"baseline": {"build": commit}, "variant": {"build": commit}}) == "client"
    # A spec of before arms had builds: named builds only.
    assert speed_clock({"build": named}) == "server"


@pytest.mark.parametrize("cell", list(TWO_STAGE_CELLS))
def test_the_flag_spares_honest_noise_and_catches_a_lie_in_every_audit_cell(cell: str) -> None:
    """No honest job of 100 is flagged at the spread measured here, at most one at three
    times it; a 1.6x lie, in the variant or in both arms, is flagged in every job of 30."""
    kind = TWO_STAGE_CELLS[cell]
    assert pytest.approx(math.log(1.05)) == TOLERANCE
    assert flagged(kind, 100, 11) == 0.0
    assert flagged(kind, 100, 12, scale=3.0) <= 0.01
    assert flagged(kind, 30, 13, variant_lie=LIE) == 1.0
    assert flagged(kind, 30, 14, both_lie=LIE) == 1.0
