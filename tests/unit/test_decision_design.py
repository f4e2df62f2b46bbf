"""The decision design (farm.stats.sequential): what each look answers, when a job stops,
the reason it gives, and seeded cells of the audit's against their bands
(tests/bench/bench_design.py prints every cell at 2,000 jobs)."""

from __future__ import annotations

import numpy as np
import pytest

from farm.stats.design import Design
from farm.stats.sequential import decided, decision_stop, look
from farm.stats.speedup import DECISION as DECISION_METHOD
from farm.stats.speedup import estimate
from tests.unit.simulate import DEFAULT, binomial_sd
from tests.unit.simulate_design import DECISION, design_cell

JOBS = 200
ORDERS = np.resize([1, -1], 12)


def _pairs(log_speedup: float, sd: float, seed: int) -> np.ndarray:
    return log_speedup + np.random.default_rng(seed).normal(0, sd, 12)


def test_a_clear_speedup_is_decided_at_the_first_look() -> None:
    found = decided(_pairs(0.3, 0.02, 1), ORDERS, DECISION)
    assert (found.said, found.pairs, found.final) == ("faster", 4, True)
    assert found.reason(DECISION) == "faster (decided after 4 of at most 12 pairs)"


def test_a_slowdown_and_no_difference_are_decided_too() -> None:
    assert decided(_pairs(-0.3, 0.02, 2), ORDERS, DECISION).said == "slower"
    within = decided(_pairs(0.0, 0.003, 3), ORDERS, DECISION)
    assert within.said == "within"
    assert within.reason(DECISION).startswith("within ±3% (decided after ")


def test_a_job_that_more_pairs_would_not_decide_stops_undecided_early() -> None:
    found = decided(_pairs(0.0, 0.08, 4), ORDERS, DECISION)
    assert (found.said, found.final) == ("undecided", True) and found.pairs < 12
    assert found.reason(DECISION).endswith("more pairs would not decide it")


def test_at_max_pairs_an_open_question_is_said_undecided() -> None:
    design = Design(4, 6, 0.03, rule="decision")
    values = np.array([0.04, -0.03, 0.01, 0.05, -0.02, 0.03])
    found = look(values, ORDERS[:6], design, 6)
    assert found.final and found.reason(design) == "undecided at max pairs (6)"


def test_the_executor_looks_after_each_pair_from_the_first_stage() -> None:
    values = _pairs(0.3, 0.02, 5)
    early = decision_stop(values[:2], ORDERS[:2], DECISION, 2)
    assert not early.stop and early.pairs == (4, 12)
    assert decision_stop(values[:4], ORDERS[:4], DECISION, 4).stop


def test_a_decision_job_reports_the_crossover_over_every_pair() -> None:
    values = _pairs(0.1, 0.02, 6)
    found = estimate(values[:7], ORDERS[:7], DECISION)
    assert found.method == DECISION_METHOD and found.speedup.pairs == 7
    # The two-stage design would have used the pairs after its first stage only.
    assert estimate(values[:8], ORDERS[:8], DEFAULT).df == 2


@pytest.mark.parametrize(("first", "most"), [(3, 12), (5, 4)])
def test_a_decision_design_needs_four_pairs_before_its_first_look(first: int, most: int
                                                                  ) -> None:
    with pytest.raises(ValueError, match="decision design looks from 4"):
        Design(first, most, rule="decision")


def test_a_large_speedup_is_decided_in_a_third_of_the_two_stage_pairs() -> None:
    found = design_cell("normal", 1.90, JOBS, 56, DECISION)
    today = design_cell("normal", 1.90, JOBS, 56, DEFAULT)
    assert found.answers["faster"] == 1.0 and found.wrong == 0.0
    assert found.mean_pairs <= 0.4 * today.mean_pairs
    assert 0.93 - 2 * binomial_sd(0.95, JOBS) <= found.coverage


def test_no_speedup_is_seldom_called_and_costs_fewer_pairs() -> None:
    found = design_cell("normal", 1.00, JOBS, 57, DECISION)
    today = design_cell("normal", 1.00, JOBS, 57, DEFAULT)
    assert found.wrong <= 0.05 + 2 * binomial_sd(0.05, JOBS)
    assert 0.93 - 2 * binomial_sd(0.95, JOBS) <= found.coverage
    assert found.mean_pairs <= 0.8 * today.mean_pairs
