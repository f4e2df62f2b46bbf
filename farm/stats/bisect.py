"""Bisect: which commit between a good and a bad one changed a series, each step decided
sequentially with its error rate stated and the total bounded (docs/bisect.md).

Pure: the caller measures (``Evidence``: a real runner or a simulated one), this module
decides. Every measurement is a log value: a job's own paired estimate of the candidate
over good (both builds in one job, so a drift of the machine between jobs cancels), with
its standard error and df, and the variance between jobs that replicate jobs show
(``Jobs``: the ends run two jobs from their first look).

- **Step 0, the ends**: does bad differ from good (two-sided t at the step's level)? If
  not, the bisect stops at once: "no difference".
- **A candidate**: tested against each end (two-sided t, the step's level): "like bad"
  when it differs from good and not from bad, "like good" the other way round, "neither"
  when it differs from both (the series changed more than once, or by another amount):
  reported, never forced. A candidate truly like good is called anything else only when
  its test against good errs, so each call errs with probability at most the level.
- **Sequential**: a step looks again with one more round of measurement (pooled with the
  earlier ones) only while it is undecided, at most ``rounds`` looks; each look tests at
  the step's level / rounds (Bonferroni), so the step's error rate is at most its level
  whatever the looks saw. The ends stop early with "no difference" only when far from a
  difference (p at least ``CLOSE``) with an interval that excludes a change of
  ``min_change``; else they look again.
- **The total**: ``alpha`` is split over ceil(log2 n) decisions + the ends + one share
  kept for the extra decisions skipped commits cause (halved for each such one), so the
  chance that any decision of the search is wrong is at most ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from farm.stats.distributions import student_t_cdf
from farm.stats.intervals import t_margin

ALPHA = 0.05  # the whole search's error rate bound
ROUNDS = 3  # looks a step takes at most
# The ends stop before their last look with "no difference" only when far from
# significant (p at least this) and their interval excludes any change of ``min_change``.
CLOSE = 0.2
MIN_CHANGE = 0.10
# What a series assumes of the spread between jobs before its replicates say more (tau,
# df): the history's 2% on 4 df (``farm.stats.online.PRIOR_TAU``, ``PRIOR_DF``, which
# loads numpy; this module does not, the CLI imports it), so that the ends' first two jobs
# (one df) do not leave a decision on a t of one df, nor read two close jobs as no spread.
PRIOR = (0.02, 4.0)
NAN = float("nan")

Verdict = Literal["differ", "no difference", "no test", "like good", "like bad", "neither",
                  "undecided", "skipped"]
Answer = Literal["found", "no difference", "no test", "neither", "undecided", "skipped"]


@dataclass(frozen=True)
class Measure:
    """A log value with its jobs' own standard error and df (inf: known exactly), and the
    variance the spread between jobs adds (``between``, estimated on ``between_df`` df:
    one estimate shared by every measure of a series, so it is never averaged away)."""

    log: float
    se: float
    df: float
    between: float = 0.0
    between_df: float = math.inf

    @property
    def total_se(self) -> float:
        """The standard error with the spread between jobs."""
        return math.sqrt(self.se * self.se + self.between)

    @property
    def total_df(self) -> float:
        """Its df: the two parts' by Welch-Satterthwaite."""
        return _satterthwaite([(self.se * self.se, self.df), (self.between, self.between_df)])


def _satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """The df of a sum of independent variance estimates (each with its df)."""
    variance = sum(part for part, _ in parts)
    spread = sum(part * part / df for part, df in parts if part > 0)
    return variance * variance / spread if spread else (math.inf if variance == 0 else NAN)


def combine(*terms: tuple[float, Measure]) -> Measure:
    """sum(coefficient * measure) of measures with independent own errors: its standard
    error and df by Welch-Satterthwaite; the between-job parts summed as one estimate."""
    log = sum(c * m.log for c, m in terms)
    parts = [((c * m.se) ** 2, m.df) for c, m in terms]
    variance = sum(part for part, _ in parts)
    between = sum(c * c * m.between for c, m in terms)
    between_df = min((m.between_df for c, m in terms if c and m.between > 0),
                     default=math.inf)
    if not variance > 0:
        return Measure(log, 0.0 if variance == 0 else NAN, math.inf, between, between_df)
    return Measure(log, math.sqrt(variance), _satterthwaite(parts), between, between_df)


def pooled(rounds: Sequence[Measure]) -> Measure:
    """Rounds' measures weighted by their inverse variance (a round whose blocks met a
    stall of the machine counts for little); the plain mean where a round has no spread."""
    weights = [1.0 / (m.total_se ** 2) if m.total_se > 0 and math.isfinite(m.total_se)
               else math.nan for m in rounds]
    if not all(math.isfinite(weight) for weight in weights):
        return combine(*((1.0 / len(rounds), measure) for measure in rounds))
    total = sum(weights)
    return combine(*((weight / total, measure) for weight, measure in zip(weights, rounds,
                                                                            strict=True)))


def between_jobs(groups: Iterable[Sequence[Measure]], prior: tuple[float, float]
                 ) -> tuple[float, float]:
    """The variance tau^2 a job's measure has beyond its own standard error, and its df,
    from replicate jobs (each group: the jobs of one commit). The k jobs of a group vary by
    their own errors and tau^2: their sample variance less the mean of their own variances
    estimates tau^2 on k - 1 df; the groups pooled by df with ``prior`` (tau, df), at least
    0."""
    weight, total = prior[1], prior[1] * prior[0] ** 2
    for group in groups:
        logs = [m.log for m in group]
        if len(logs) < 2 or not all(math.isfinite(m.log) and math.isfinite(m.se)
                                    for m in group):
            continue
        mean = sum(logs) / len(logs)
        spread = sum((log - mean) ** 2 for log in logs) / (len(logs) - 1)
        own = sum(m.se * m.se for m in group) / len(group)
        weight += len(logs) - 1
        total += (len(logs) - 1) * (spread - own)
    return (max(total / weight, 0.0), weight) if weight else (0.0, 0.0)


@dataclass
class Jobs:
    """One series' measure of each job a bisect ran, by commit (its rounds in order), with
    the spread between jobs their replicates show (``between_jobs``, from ``prior``)."""

    prior: tuple[float, float]
    made: dict[int, list[Measure]] = field(default_factory=dict)

    def count(self, index: int) -> int:
        """The jobs of commit ``index`` so far."""
        return len(self.made.get(index, ()))

    def add(self, index: int, measure: Measure) -> None:
        """Commit ``index``'s next job."""
        self.made.setdefault(index, []).append(measure)

    def pooled(self, index: int, jobs: int) -> Measure:
        """Commit ``index``'s first ``jobs`` jobs pooled, each with the between-job
        variance every replicate so far shows."""
        tau2, tau_df = between_jobs(self.made.values(), self.prior)
        return pooled([replace(measure, between=tau2, between_df=tau_df)
                       for measure in self.made[index][:jobs]])


def p_two(measure: Measure) -> float:
    """Two-sided p value of ``measure`` against 0; a measure without spread differs exactly
    when it is not 0; NaN without a usable standard error."""
    se, df = measure.total_se, measure.total_df
    if se == 0.0:
        return 1.0 if measure.log == 0.0 else 0.0
    if not (math.isfinite(se) and math.isfinite(measure.log) and df >= 1):
        return NAN
    return 2.0 * (1.0 - student_t_cdf(abs(measure.log) / se, df))


@dataclass(frozen=True)
class Contrasts:
    """A candidate against the ends: log(candidate / good) and log(candidate / bad)."""

    to_good: Measure
    to_bad: Measure


def paired_contrasts(candidate: Measure, ends: Measure) -> Contrasts:
    """From jobs across builds: ``candidate`` log(candidate / good) measured in one job,
    ``ends`` log(bad / good) in another."""
    return Contrasts(candidate, combine((1.0, candidate), (-1.0, ends)))


@dataclass(frozen=True)
class Plan:
    """How a search over ``commits`` candidates (the commits after good, bad the last)
    spends its error rate ``alpha``, the looks a step takes at most, and the smallest
    change (a fraction) the ends must rule out to stop before their last look."""

    commits: int
    alpha: float = ALPHA
    rounds: int = ROUNDS
    min_change: float = MIN_CHANGE  # smaller changes need not be found

    @property
    def decisions(self) -> int:
        """Candidate decisions a search without skips makes at most: ceil(log2 n)."""
        return math.ceil(math.log2(self.commits)) if self.commits > 1 else 0

    @property
    def share(self) -> float:
        """Each planned step's level: alpha over the decisions, the ends and one spare."""
        return self.alpha / (self.decisions + 2)

    def level(self, number: int) -> float:
        """The level of the ``number``-th candidate decision (1-based): a share each for
        the planned ones; the spare share, halved each time, for those skips add."""
        extra = number - self.decisions
        return self.share if extra <= 0 else self.share / 2.0**extra


@dataclass(frozen=True)
class Step:
    """One step: ``index`` 0 for the ends, else the candidate's place 1..n; its verdict,
    the level it was decided at (its error rate bound; 0 for a skip), the decision's p
    value (the evidence's own: NaN where there is none), the rounds it measured, and its
    measure against good (log(bad / good) for the ends)."""

    index: int
    verdict: Verdict
    level: float
    p_value: float
    rounds: int
    to_good: Measure | None


@dataclass(frozen=True)
class Outcome:
    """The search's answer: ``found`` (the first bad commit is ``high``), or why it stopped,
    with the range left (the first bad commit is one of ``low`` + 1 .. ``high``), and every
    step."""

    answer: Answer
    low: int
    high: int
    steps: tuple[Step, ...]

    @property
    def spent(self) -> float:
        """The sum of the steps' levels: the bound on any decision of it being wrong."""
        return sum(step.level for step in self.steps)


class Evidence(Protocol):
    """What a bisect measures: the ends and candidates, over their first jobs (a round:
    one more job of the same design, pooled)."""

    def ends(self, jobs: int) -> Measure:
        """log(bad / good) over bad's first ``jobs`` jobs (``end_jobs``)."""

    def candidate(self, index: int, rounds: int) -> Contrasts | None:
        """Candidate ``index`` (1..n) against the ends over ``rounds`` rounds; None when
        it cannot be measured (it does not build: skipped)."""


def ends_verdict(ends: Measure, level: float, last: bool, min_change: float = MIN_CHANGE
                 ) -> tuple[Verdict | None, float]:
    """The ends at one look (``level``: this look's): "differ", "no difference" (at the
    last look, or far from a difference with a 95% interval inside +-``min_change``),
    "no test", or None to look again; and the p value."""
    p = p_two(ends)
    if not math.isfinite(p):
        return "no test", p
    if p < level:
        return "differ", p
    margin = t_margin(ends.total_se, ends.total_df) if ends.total_se > 0 else 0.0
    narrow = abs(ends.log) + margin <= math.log1p(min_change)
    return ("no difference" if last or (p >= CLOSE and narrow) else None), p


def candidate_verdict(found: Contrasts, level: float, last: bool
                      ) -> tuple[Verdict | None, float]:
    """A candidate at one look: "neither" (it differs from both ends by the test), "like
    bad" (it differs from good only), "like good" (from bad only), "undecided" at the last
    look, or None to look again; and the p value of the decision's test."""
    p_good, p_bad = p_two(found.to_good), p_two(found.to_bad)
    if not (math.isfinite(p_good) and math.isfinite(p_bad)):
        return "undecided", NAN
    if p_good < level and p_bad < level:
        return "neither", max(p_good, p_bad)
    if p_good < level:
        return "like bad", p_good
    if p_bad < level:
        return "like good", p_bad
    return ("undecided" if last else None), min(p_good, p_bad)


def next_candidate(low: int, high: int, skipped: frozenset[int]) -> int | None:
    """The candidate between ``low`` and ``high`` nearest their middle (the lower of two),
    skipped ones left out; None when none is left."""
    left = [index for index in range(low + 1, high) if index not in skipped]
    return min(left, key=lambda index: (abs(2 * index - low - high), index)) if left else None


def end_jobs(rounds: int) -> int:
    """The jobs of the ends over ``rounds`` looks: one more than the looks, so that from
    the first look the series has replicate jobs to read its between-job spread from."""
    return rounds + 1


def _ends(plan: Plan, evidence: Evidence) -> Step:
    level = plan.share / plan.rounds
    for rounds in range(1, plan.rounds + 1):
        measure = evidence.ends(end_jobs(rounds))
        verdict, p = ends_verdict(measure, level, rounds == plan.rounds, plan.min_change)
        if verdict is not None:
            return Step(0, verdict, plan.share, p, rounds, measure)
    raise AssertionError("the last look always decides")


def _decide(plan: Plan, evidence: Evidence, index: int, level: float) -> Step:
    for rounds in range(1, plan.rounds + 1):
        found = evidence.candidate(index, rounds)
        if found is None:
            return Step(index, "skipped", 0.0, NAN, rounds - 1, None)
        verdict, p = candidate_verdict(found, level / plan.rounds, rounds == plan.rounds)
        if verdict is not None:
            return Step(index, verdict, level, p, rounds, found.to_good)
    raise AssertionError("the last look always decides")


def bisect(plan: Plan, evidence: Evidence) -> Outcome:
    """Search the ``plan.commits`` candidates for the first bad one."""
    first = _ends(plan, evidence)
    steps = [first]
    low, high = 0, plan.commits
    if first.verdict != "differ":
        return Outcome("no test" if first.verdict == "no test" else "no difference", low,
                       high, tuple(steps))
    skipped: set[int] = set()
    decided = 0
    while high - low > 1:
        index = next_candidate(low, high, frozenset(skipped))
        if index is None:
            return Outcome("skipped", low, high, tuple(steps))
        step = _decide(plan, evidence, index, plan.level(decided + 1))
        steps.append(step)
        if step.verdict == "skipped":
            skipped.add(index)
            continue
        decided += 1
        if step.verdict == "like good":
            low = index
        elif step.verdict == "like bad":
            high = index
        else:
            return Outcome("neither" if step.verdict == "neither" else "undecided", low,
                           high, tuple(steps))
    return Outcome("found", low, high, tuple(steps))
