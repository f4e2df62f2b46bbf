"""Today's design read as an answer (tests/unit/simulate_design.py): the answer an interval
gives, which answers are wrong, and two seeded cells' figures against their bands
(tests/bench/bench_design.py prints every cell at 2,000 jobs)."""

from __future__ import annotations

import pytest

from farm.stats.design import Answer, answer
from tests.unit.simulate import binomial_sd
from tests.unit.simulate_design import VERDICTS, design_cell, wrong

JOBS = 200


@pytest.mark.parametrize(("low", "high", "said"), [
    (1.01, 1.20, "faster"), (0.80, 0.99, "slower"), (0.98, 1.02, "within"),
    (0.97, 1.03, "within"), (0.95, 1.02, "undecided"), (0.90, 1.40, "undecided")])
def test_an_interval_answers_as_farm_ab_reads_it(low: float, high: float, said: Answer
                                                 ) -> None:
    assert answer(low, high, 0.03) == said


@pytest.mark.parametrize(("said", "truth", "is_wrong"), [
    ("faster", 1.05, False), ("faster", 1.01, True), ("faster", 0.95, True),
    ("slower", 0.95, False), ("slower", 1.00, True), ("within", 1.02, False),
    ("within", 1.05, True), ("undecided", 1.90, False)])
def test_a_wrong_answer_is_a_direction_against_or_without_the_truth(
        said: Answer, truth: float, is_wrong: bool) -> None:
    assert wrong(said, truth) == is_wrong


def test_a_large_speedup_is_found_faster_at_the_plan() -> None:
    found = design_cell("normal", 1.90, JOBS, 56)
    assert found.answers["faster"] == 1.0 and found.wrong == 0.0
    assert sum(found.answers[name] for name in VERDICTS) == pytest.approx(1.0)
    # The first stage plans from its spread: a steady job at ±3% runs 8 to 12 pairs.
    assert 8 <= found.mean_pairs <= 12
    assert abs(found.coverage - 0.95) <= 3 * binomial_sd(0.95, JOBS)


def test_no_speedup_is_seldom_called_either_way() -> None:
    found = design_cell("normal", 1.00, JOBS, 57)
    assert found.wrong <= 0.05 + 2 * binomial_sd(0.05, JOBS)
    assert abs(found.coverage - 0.95) <= 3 * binomial_sd(0.95, JOBS)
