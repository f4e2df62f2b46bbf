"""``farm bisect``'s decisions (``farm.stats.bisect``): the search, its skips, the candidate
like neither end, the stop when good and bad do not differ, the error-rate budget, and the
share of simulated bisects that name a wrong commit against the stated bound."""

from __future__ import annotations

import math
import time

import pytest

from farm.stats.bisect import (
    PRIOR,
    Contrasts,
    Jobs,
    Measure,
    Plan,
    between_jobs,
    bisect,
    combine,
    next_candidate,
    paired_contrasts,
    pooled,
)
from tests.unit.simulate_bisect import CELLS, cell_rates


class Exact:
    """Evidence with a known value per commit (log scale) and a small spread, which
    shrinks as rounds pool (each round the same value); broken commits cannot be
    measured. Counts the measurements asked for."""

    def __init__(self, levels: list[float], broken: frozenset[int] = frozenset(),
                 se: float = 0.01) -> None:
        self.levels, self.broken, self.se = levels, broken, se
        self.asked: list[tuple[int, int]] = []

    def _measure(self, index: int, rounds: int) -> Measure:
        return Measure(self.levels[index] - self.levels[0], self.se / math.sqrt(rounds),
                       10.0 * rounds)

    def ends(self, jobs: int) -> Measure:
        self.asked.append((0, jobs))
        self.ends_jobs = jobs
        return self._measure(len(self.levels) - 1, jobs)

    def candidate(self, index: int, rounds: int) -> Contrasts | None:
        self.asked.append((index, rounds))
        if index in self.broken:
            return None
        return paired_contrasts(self._measure(index, rounds),
                                self._measure(len(self.levels) - 1, self.ends_jobs))


def _levels(commits: int, first_bad: int, change: float = -0.2) -> list[float]:
    return [change if index >= first_bad else 0.0 for index in range(commits + 1)]


@pytest.mark.parametrize("first_bad", range(1, 9))
def test_every_first_bad_commit_of_eight_is_found_in_three_decisions(first_bad: int) -> None:
    outcome = bisect(Plan(8), Exact(_levels(8, first_bad)))
    assert (outcome.answer, outcome.high) == ("found", first_bad)
    assert outcome.steps[0].verdict == "differ"
    assert len(outcome.steps) == 1 + 3
    assert all(step.rounds == 1 for step in outcome.steps)


def test_a_commit_that_does_not_build_is_skipped_and_its_neighbours_tried() -> None:
    outcome = bisect(Plan(8), Exact(_levels(8, 6), broken=frozenset({4})))
    assert (outcome.answer, outcome.high) == ("found", 6)
    assert [(step.index, step.verdict) for step in outcome.steps][:3] == [
        (0, "differ"), (4, "skipped"), (3, "like good")]
    assert next(step for step in outcome.steps if step.verdict == "skipped").level == 0.0


def test_only_skipped_commits_left_names_the_range_like_git_bisect_skip() -> None:
    outcome = bisect(Plan(8), Exact(_levels(8, 5), broken=frozenset({4, 5})))
    assert outcome.answer == "skipped"
    assert (outcome.low, outcome.high) == (3, 6)  # the first bad is one of 4, 5, 6


def test_a_candidate_like_neither_end_is_reported_not_forced() -> None:
    levels = [0.0, 0.0, 0.0, 0.0, -0.1, -0.1, -0.2, -0.2, -0.2]  # two changes, at 4 and 6
    outcome = bisect(Plan(8), Exact(levels))
    assert outcome.answer == "neither"
    last = outcome.steps[-1]
    assert (last.index, last.verdict) == (4, "neither")
    assert (outcome.low, outcome.high) == (0, 8)


def test_good_and_bad_that_do_not_differ_stop_at_once() -> None:
    evidence = Exact([0.0] * 9)
    outcome = bisect(Plan(8), evidence)
    assert (outcome.answer, len(outcome.steps)) == ("no difference", 1)
    assert evidence.asked == [(0, 2)]  # far from a difference: no second round


def test_good_and_bad_too_noisy_to_rule_out_a_change_look_again_before_no_difference(
        ) -> None:
    evidence = Exact([0.0] * 9, se=0.2)  # no difference, but +-40% not ruled out
    assert bisect(Plan(8), evidence).answer == "no difference"
    assert evidence.asked == [(0, 2), (0, 3), (0, 4)]  # two jobs from the first look
    assert bisect(Plan(8, min_change=2.0), Exact([0.0] * 9, se=0.2)).steps[0].rounds == 1


def test_a_noisy_round_counts_for_little_in_the_pool() -> None:
    stalled, steady = Measure(1.8, 1.1, 3.0), Measure(0.75, 0.08, 3.0)
    found = pooled([stalled, steady])
    assert 0.75 < found.log < 0.76 and found.se < 0.08


def test_a_series_without_spread_differs_exactly_when_its_values_do() -> None:
    assert bisect(Plan(4), Exact([0.0] * 5, se=0.0)).answer == "no difference"
    outcome = bisect(Plan(4), Exact(_levels(4, 3), se=0.0))
    assert (outcome.answer, outcome.high) == ("found", 3)


def test_a_close_step_measures_more_rounds_where_it_is_close_only() -> None:
    evidence = Exact(_levels(8, 5, change=-0.06), se=0.02)  # t 3: p 0.013, over 0.01 / 3
    outcome = bisect(Plan(8), evidence)
    assert (outcome.answer, outcome.high) == ("found", 5)
    # The ends decide at their first look: two jobs there already.
    assert [step.rounds for step in outcome.steps] == [1, 3, 2, 2]
    assert bisect(Plan(8), Exact(_levels(8, 5, change=-0.06), se=0.005)).steps[0].rounds == 1


def test_the_error_rate_spent_never_exceeds_the_bound_with_many_skips() -> None:
    plan = Plan(16)
    assert plan.decisions == 4 and plan.share == pytest.approx(0.05 / 6)
    assert plan.share + sum(plan.level(number) for number in range(1, 60)) <= plan.alpha
    outcome = bisect(plan, Exact(_levels(16, 11), broken=frozenset(range(2, 11))))
    assert (outcome.answer, outcome.low, outcome.high) == ("skipped", 1, 11)
    assert outcome.spent <= plan.alpha


def test_pooled_and_combined_measures_carry_their_error_and_df() -> None:
    one = Measure(0.1, 0.04, 4.0)
    two = pooled([one, Measure(0.2, 0.04, 4.0)])
    assert two.log == pytest.approx(0.15) and two.se == pytest.approx(0.04 / math.sqrt(2))
    assert two.df == pytest.approx(8.0)
    difference = combine((1.0, one), (-1.0, Measure(0.0, 0.03, 9.0)))
    assert difference.se == pytest.approx(0.05)
    assert 4.0 < difference.df < 13.0
    contrasts = paired_contrasts(one, Measure(-0.2, 0.03, 5.0))
    assert contrasts.to_good.log == pytest.approx(0.1)
    assert contrasts.to_bad.log == pytest.approx(0.3)


def test_a_bisect_assumes_the_historys_spread_between_jobs_before_replicates() -> None:
    from farm.stats.online import PRIOR_DF, PRIOR_TAU

    assert PRIOR == (PRIOR_TAU, PRIOR_DF)


def test_replicate_jobs_give_the_spread_between_jobs_and_it_is_never_averaged_away() -> None:
    # Two jobs of one commit 0.2 apart with standard errors 0.05: the spread of two is
    # 0.02, their own 0.0025, so tau^2 0.0175 on 1 df; a group of one says nothing.
    groups = [[Measure(0.0, 0.05, 5.0), Measure(0.2, 0.05, 5.0)], [Measure(0.5, 0.05, 5.0)]]
    assert between_jobs(groups, (0.0, 0.0)) == pytest.approx((0.0175, 1.0))
    assert between_jobs(groups, (0.1, 1.0)) == pytest.approx(((0.0175 + 0.01) / 2, 2.0))
    # Jobs closer than their own errors show none (never a negative variance).
    assert between_jobs([[Measure(0.0, 0.05, 5.0), Measure(0.01, 0.05, 5.0)]],
                        (0.0, 0.0)) == (0.0, 1.0)
    jobs = Jobs((0.0, 0.0))
    for index, measure in ((1, groups[0][0]), (1, groups[0][1]), (2, groups[1][0])):
        jobs.add(index, measure)
    both = jobs.pooled(1, 2)
    assert both.log == pytest.approx(0.1) and both.between == pytest.approx(0.0175 / 2)
    assert both.total_se == pytest.approx(math.sqrt(0.05**2 / 2 + 0.0175 / 2))
    # The candidate against the ends keeps the one estimate's df, not twice it.
    against = combine((1.0, jobs.pooled(2, 1)), (-1.0, both))
    assert against.between == pytest.approx(0.0175 * 1.5) and against.between_df == 1.0
    assert against.total_df < 2.0


def test_the_next_candidate_is_the_middle_one_not_skipped() -> None:
    assert next_candidate(0, 8, frozenset()) == 4
    assert next_candidate(0, 8, frozenset({4})) == 3
    assert next_candidate(0, 8, frozenset({3, 4})) == 5
    assert next_candidate(3, 4, frozenset()) is None


def test_simulated_bisects_name_a_wrong_commit_less_often_than_the_bound() -> None:
    """2,000 bisects a cell, fixed seeds: the share naming a wrong commit (or a range
    without the first bad one) is under the stated 5% whatever the machine's drift between
    jobs; the planted changes are found (issue 38's floor: 0.8 for +30% at tau 0.10)."""
    started = time.monotonic()
    rates = {name: cell_rates(cell, 2000, seed) for seed, (name, cell) in
             enumerate(CELLS.items())}
    for name, found in rates.items():
        print(f"{name}: wrong {found.wrong:.4f}, right {found.right:.3f}, no difference "
              f"{found.no_difference:.3f}, jobs {found.jobs:.1f}")
        assert found.wrong <= found.bound, name
    assert rates["8 commits, -17%, 4% a job (df 4)"].right > 0.85
    assert rates["16 commits, -17%, a quarter broken"].right > 0.85
    assert rates["8 commits, +30% cost, 5% a job (df 5), tau 0.10"].right >= 0.8
    assert rates["16 commits, no change, 4% a job (df 5), tau 0.10"].no_difference > 0.95
    print(f"{time.monotonic() - started:.1f} s")
