"""`farm ab`'s answer, read against the design the job ran: an interval within the design's
target says there is no meaningful difference; more pairs are advised only when the design
stopped short of its target (the run itself: tests/e2e/test_ab.py)."""

from __future__ import annotations

from typing import Any

from farm.cli.start import _answer
from farm.stats.design import Design

DEFAULT = Design(4, 12)  # two-stage: 4 pairs plan the rest, up to 12, ±3%
DECISION = Design(4, 12, rule="decision")  # farm ab's default
PRECISION = Design(4, 12, rule="precision")  # farm ab --stop-rule precision


def _row(speedup: float, low: float, high: float, pairs: int,
         stop_reason: str = "planned pairs (11) reached") -> dict[str, Any]:
    return {"speculation": "ok", "speedup": speedup, "ci_low": low, "ci_high": high,
            "pairs": pairs, "stop_reason": stop_reason}


def _verdict(row: dict[str, Any], design: Design = DEFAULT) -> str:
    return _answer(row, design).split("block pairs): ", 1)[1]


def test_an_interval_within_the_target_says_no_meaningful_difference() -> None:
    assert _answer(_row(1.004, 0.99, 1.02, 11), DEFAULT) == (
        "answer: the variant decodes 1.00x as fast as the baseline [0.99, 1.02] (95% "
        "interval, 11 block pairs): no meaningful difference: within ±3%")


def test_the_target_named_is_the_designs() -> None:
    assert _verdict(_row(1.0, 0.96, 1.04, 12), Design(4, 12, target=0.05)) == (
        "no meaningful difference: within ±5%")
    assert _verdict(_row(1.0, 0.98, 1.02, 12), Design(4, 12, target=0.025)) == (
        "no meaningful difference: within ±2.5%")


def test_a_default_design_that_stopped_short_advises_more_pairs() -> None:
    assert _verdict(_row(1.0, 0.95, 1.05, 12, "max pairs (12) reached")) == (
        "within noise: no difference shown; the interval (±5.0% after 12 pairs) is short "
        "of the design's ±3% target: about 34 pairs would reach it (--pairs 34); a quieter "
        "machine narrows it too")
    assert _verdict(_row(1.0, 0.95, 1.05, 12, "target not reachable: half-width 5.0% at "
                                             "max pairs (12)"),
                    Design(4, 12, assurance=0.9)).startswith(
        "within noise: no difference shown; the interval (±5.0% after 12 pairs) is short")


def test_a_few_fixed_pairs_short_of_the_target_point_to_the_default_design() -> None:
    assert _verdict(_row(0.73, 0.02, 24.30, 2, "max pairs (2) reached"), Design(2, 2)) == (
        "within noise: no difference shown; the interval (±1663.0% after 2 pairs) is short "
        "of the design's ±3% target: more pairs narrow it (the default design, without "
        "--pairs, runs 4 to 12)")


def test_the_pairs_advised_stop_at_the_most_farm_ab_runs() -> None:
    assert _verdict(_row(1.0, 0.7, 1.3, 20, "max pairs (20) reached"), Design(20, 20)).endswith(
        "more pairs narrow it (--pairs 100 at most); a quieter machine narrows it too")


def test_an_interval_as_narrow_as_the_target_but_off_centre_advises_no_more_pairs() -> None:
    said = _verdict(_row(0.995, 0.966, 1.025, 11))
    assert said == ("within noise: no difference shown; the interval (±3.0%) met the design's "
                    "±3% target, yet leaves a difference of up to 3.4% possible")
    assert "more pairs" not in said


def test_faster_and_slower_stay_as_they_were() -> None:
    assert _verdict(_row(1.93, 1.49, 2.50, 4)) == "faster"
    assert _verdict(_row(1.01, 1.005, 1.02, 11)) == "faster"
    assert _verdict(_row(0.81, 0.77, 0.85, 6)) == "slower"


def test_a_decision_designs_answer_is_its_stop_reason_with_the_time_saved() -> None:
    row = _row(1.49, 1.41, 1.57, 4, "faster (decided after 4 of at most 12 pairs)")
    assert _answer(row, DECISION) == (
        "answer: the variant decodes 1.49x as fast as the baseline [1.41, 1.57] (95% "
        "interval): faster (decided after 4 of at most 12 pairs); about 67% of a fixed "
        "12-pair design's GPU time saved")
    # Undecided is the look's answer, whatever the 95% interval alone would say.
    row = _row(1.02, 1.001, 1.04, 12, "undecided at max pairs (12)")
    assert _answer(row, DECISION).endswith(
        "(95% interval): undecided at max pairs (12); about 0% of a fixed 12-pair design's "
        "GPU time saved")


def test_a_precision_designs_answer_reads_its_interval_then_says_when_it_met_its_target(
        ) -> None:
    def said(low: float, high: float, pairs: int, reason: str) -> str:
        row = _row((low + high) / 2, low, high, pairs, reason)
        return _answer(row, PRECISION).split(" (95% interval): ", 1)[1]

    assert said(1.28, 1.34, 7, "target met at 7 of at most 12 pairs (±2.3%)") == (
        "faster (target met at 7 of at most 12 pairs (±2.3%)); about 42% of a fixed 12-pair "
        "design's GPU time saved")
    assert said(0.98, 1.02, 9, "target met at 9 of at most 12 pairs (±2.0%)").startswith(
        "within ±3% (target met at 9 ")
