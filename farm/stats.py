"""Statistics of one job: speedup with its interval, the two-stage rule, drift, acceptance,
output agreement and latency percentiles. Pure functions on the tidy runs frame (one row per
run, as ``farm.report.frames.runs_frame`` returns), no I/O.

A job runs its two arms in blocks, one server start each, counterbalanced in pairs (AB, BA,
AB, ... or BA, AB, ...: the job key picks which arm opens). Repetitions inside one server
session share that session's state (placement, clocks, caches), so they are not independent
evidence: the unit of evidence is the block PAIR. Each pair gives one log speedup (the mean
over prompts of the log ratio of the arms' medians); the interval comes from a crossover
model on those pair values (``estimate``), and a two-stage rule fixes how many pairs a job
runs (``planned_pairs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.matrix.schema import MIN_SECOND_STAGE
from farm.studentt import f_cdf, student_t_quantile

NAN = float("nan")
ARMS = ("baseline", "variant")
# A divergence this early is unlikely to be benign floating-point drift between two greedy
# decodes with the same seed: it points at the speculative path changing the output.
EARLY_DIVERGENCE_TOKENS = 16
# Rough characters per token for English BPE text, used only when token ids are missing.
CHARS_PER_TOKEN = 4
LATENCY_PERCENTILES = (50, 90, 99)
# Pair log ratios as pair_log_ratios returns them, or any sequence of floats.
LogRatios = Sequence[float] | pd.Series | npt.NDArray[np.float64]
# Which arm opened each pair: +1 the baseline (AB), -1 the variant (BA); as pair_orders.
Orders = Sequence[int] | npt.NDArray[np.int64] | pd.Series


@dataclass(frozen=True)
class Interval:
    """A speedup (variant / baseline, ratio scale) with its interval over ``pairs`` pairs.

    ``low`` and ``high`` are NaN below two pairs: one pair says nothing about the spread.
    """

    estimate: float
    low: float
    high: float
    pairs: int

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the estimate (0.03 means about ±3%)."""
        return (self.high - self.low) / 2 / self.estimate


@dataclass(frozen=True)
class StopDecision:
    """Whether a job has enough pairs, and why."""

    stop: bool
    reason: str


@dataclass(frozen=True)
class Drift:
    """The machine's trend over the job's blocks, with its interval and a test.

    ``slope_per_block`` is in log units per block (about the relative change per block),
    ``low``/``high`` its 95% interval, ``change`` the fitted relative change from the first
    block to the last; ``flag`` says the slope differs from zero at the 5% level.
    """

    slope_per_block: float
    low: float
    high: float
    change: float
    flag: bool


@dataclass(frozen=True)
class Acceptance:
    """The variant's draft counters and the rates derived from them; ``rate_low`` and
    ``rate_high`` bound the acceptance rate (95%, runs as clusters)."""

    drafts: int
    drafted: int
    accepted: int
    rate: float
    rate_low: float
    rate_high: float
    mean_accepted_length: float
    per_position: list[float]


@dataclass(frozen=True)
class Agreement:
    """How far the variant's outputs match the baseline's for the same prompt and seed,
    against how far the baseline's own repeated blocks match each other (the control).

    ``early_prompts`` / ``control_early_prompts``: prompts where most comparisons part
    within the early limit, variant-vs-baseline and baseline-vs-baseline. ``applicable`` is
    False when sampling at temperature > 0: outputs are not expected to match.
    """

    identical_share: float
    control_share: float
    first_divergence: dict[str, int | None]
    early_prompts: int
    control_early_prompts: int
    suspect: bool
    applicable: bool
    reason: str


# --- Speedup over pairs -------------------------------------------------------------------


def _check_one_job(runs: pd.DataFrame) -> None:
    # Pairs are numbered per job: two jobs in one frame would silently pool their pairs.
    if "job_key" in runs.columns and runs["job_key"].nunique() > 1:
        raise ValueError("runs hold more than one job; select one job_key first")


def _valid(runs: pd.DataFrame) -> pd.DataFrame:
    # Failed runs carry NaN, zero or infinite throughput: missing data, not slow or fast runs.
    speed = runs["decode_tok_s"].astype(float)
    return runs[np.isfinite(speed) & (speed > 0)]


def pair_log_ratios(runs: pd.DataFrame) -> pd.Series:
    """Per pair, the mean over prompts of log(variant median / baseline median) of decode tok/s.

    Medians are over the pair's repetitions of each prompt, so one outlier repetition does not
    move its pair. A pair is skipped unless every prompt of the job has both arms in it (a
    pair with one arm only, e.g. still running, or without a prompt's valid runs): averaging
    over a different prompt mix would mix prompts' different speedups into the pair-to-pair
    spread. Indexed by pair, ascending.
    """
    _check_one_job(runs)
    valid = _valid(runs)
    if valid.empty:
        return pd.Series(dtype=float, name="log_ratio", index=pd.Index([], name="pair"))
    medians = (valid.groupby(["pair", "prompt_id", "arm"])["decode_tok_s"].median()
               .unstack("arm").reindex(columns=list(ARMS)))
    every = pd.MultiIndex.from_product([sorted(valid["pair"].unique()),
                                        sorted(runs["prompt_id"].unique())],
                                       names=["pair", "prompt_id"])
    medians = medians.reindex(every)
    ratio = medians["variant"] / medians["baseline"]
    log_ratio = pd.Series(np.log(ratio.to_numpy(dtype=float)), index=ratio.index)
    complete = log_ratio.notna().groupby(level="pair").all()
    by_pair = log_ratio.groupby(level="pair").mean()
    return by_pair[complete].astype(float).rename("log_ratio")


def pair_orders(runs: pd.DataFrame) -> pd.Series:
    """Per pair, +1 when the baseline ran its first block (AB) and -1 when the variant did."""
    _check_one_job(runs)
    first = runs[runs["position"] == 0].groupby("pair")["arm"].first()
    return pd.Series(np.where(first == "baseline", 1, -1), index=first.index, name="order")


def speedup_interval(log_ratios: LogRatios, level: float = 0.95) -> Interval:
    """exp(mean log ratio) with a paired-t interval over pairs (df = pairs - 1), exponentiated.

    The t (not normal) quantile matters here: jobs stop at a handful of pairs.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    values = np.asarray(log_ratios, dtype=float)
    pairs = int(values.size)
    if pairs == 0:
        return Interval(NAN, NAN, NAN, 0)
    mean = float(values.mean())
    if pairs < 2:
        return Interval(math.exp(mean), NAN, NAN, pairs)
    margin = (student_t_quantile(0.5 + level / 2.0, pairs - 1)
              * float(values.std(ddof=1)) / math.sqrt(pairs))
    return Interval(math.exp(mean), math.exp(mean - margin), math.exp(mean + margin), pairs)


@dataclass(frozen=True)
class Pooled:
    """The typical speedup of a group of jobs (ratio scale) with its interval, the number
    of jobs combined and ``tau``, the between-job standard deviation of log speedups."""

    estimate: float
    low: float
    high: float
    jobs: int
    tau: float


def log_standard_error(low: float, high: float, pairs: int, level: float = 0.95) -> float:
    """The standard error of a job's log speedup, read back from its paired-t interval."""
    if pairs < 2 or not (low > 0 and high > 0):
        return NAN
    quantile = student_t_quantile(0.5 + level / 2.0, pairs - 1)
    return (math.log(high) - math.log(low)) / (2.0 * quantile)


def pool_jobs(log_speedups: LogRatios, standard_errors: LogRatios, dfs: Sequence[int],
              level: float = 0.95) -> Pooled:
    """Random-effects combination of jobs' log speedups: DerSimonian-Laird between-job
    variance, Hartung-Knapp-Sidik-Jonkman t interval (df = jobs - 1, untruncated).

    It answers "what speedup does a typical configuration of this group get", so its width
    shrinks with more jobs and grows when jobs truly differ. Jobs without a standard error
    (fewer than two pairs) are left out; one job gives its own paired-t interval.

    Each job's variance comes from a handful of pairs, so before weighting it is shrunk
    toward the jobs' pooled variance (its own df against a prior of the mean df): weights
    that chase noisy variances undercover (0.915 for 16 alike jobs in simulation; 0.946 with
    the shrinkage, and 0.94-0.972 when jobs' noise differs eightfold).
    """
    y = np.asarray(log_speedups, dtype=float)
    se = np.asarray(standard_errors, dtype=float)
    df = np.asarray(dfs, dtype=float)
    usable = np.isfinite(y) & np.isfinite(se) & (df >= 1)
    y, se, df = y[usable], np.maximum(se[usable], 1e-12), df[usable]
    jobs = int(y.size)
    variance = se**2
    pooled = float(np.sum(df * variance) / np.sum(df)) if jobs else NAN
    variance = (df * variance + df.mean() * pooled) / (df + df.mean()) if jobs > 1 else variance
    if jobs == 0:
        return Pooled(NAN, NAN, NAN, 0, NAN)
    if jobs == 1:
        margin = student_t_quantile(0.5 + level / 2.0, float(df[0])) * float(se[0])
        return Pooled(math.exp(y[0]), math.exp(y[0] - margin), math.exp(y[0] + margin), 1, NAN)
    weights = 1.0 / variance
    fixed = float(np.sum(weights * y) / np.sum(weights))
    q = float(np.sum(weights * (y - fixed) ** 2))
    scale = float(np.sum(weights) - np.sum(weights**2) / np.sum(weights))
    tau2 = max(0.0, (q - (jobs - 1)) / scale)
    random_weights = 1.0 / (variance + tau2)
    mean = float(np.sum(random_weights * y) / np.sum(random_weights))
    hksj = float(np.sum(random_weights * (y - mean) ** 2)
                 / ((jobs - 1) * np.sum(random_weights)))
    margin = student_t_quantile(0.5 + level / 2.0, jobs - 1) * math.sqrt(hksj)
    return Pooled(math.exp(mean), math.exp(mean - margin), math.exp(mean + margin), jobs,
                  math.sqrt(tau2))


def job_speedup(runs: pd.DataFrame) -> Interval:
    """The job's speedup (variant over baseline decode tok/s) with its 95% interval, as a
    fixed design (``estimate`` without one): crossover from 4 pairs on, else paired t."""
    return estimate(pair_log_ratios(runs), pair_orders(runs)).speedup


def speedup_by(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The job's speedup per prompt or prompt category, each from its own prompts' pairs.

    ``column`` is "prompt_id" or "prompt_category"; one row per group value with columns
    ``column``, estimate, low, high, pairs, and the log standard error and df that
    ``pool_jobs`` combines.
    """
    if column not in ("prompt_id", "prompt_category"):
        raise ValueError(f"speedup_by groups by prompt_id or prompt_category, not {column!r}")
    rows = []
    for value, group in runs.groupby(column, sort=True):
        found = estimate(pair_log_ratios(group), pair_orders(group))
        rows.append({column: value, "estimate": found.speedup.estimate,
                     "low": found.speedup.low, "high": found.speedup.high,
                     "pairs": found.speedup.pairs, "log_se": found.log_se, "df": found.df})
    return pd.DataFrame(rows, columns=[column, "estimate", "low", "high", "pairs", "log_se",
                                       "df"])


# --- Design: crossover model and the two-stage rule -----------------------------------------

@dataclass(frozen=True)
class Design:
    """How many block pairs a job runs: ``first_stage`` pairs always; then, when
    ``max_pairs`` leaves room for a second stage, as many as the first stage's spread says
    the ``target`` half-width needs (at most ``max_pairs``). ``max_pairs == first_stage``
    is a fixed design.

    ``assurance`` (None, or a probability): None plans as if the first stage's spread were
    the true one, which meets the target about six times in ten; a probability plans the
    fewest pairs that meet it with that probability (``planned_pairs``)."""

    first_stage: int
    max_pairs: int
    target: float = 0.03
    assurance: float | None = None

    def __post_init__(self) -> None:
        if self.two_stage and self.max_pairs < self.first_stage + MIN_SECOND_STAGE:
            raise ValueError(f"max_pairs ({self.max_pairs}) must equal first_stage "
                             f"({self.first_stage}) or exceed it by {MIN_SECOND_STAGE} or more")
        if self.two_stage and self.first_stage < 3:
            raise ValueError(f"a two-stage design needs a first stage of 3 or more pairs, "
                             f"got {self.first_stage}")

    @property
    def least_pairs(self) -> int:
        """The fewest pairs a job of this design runs."""
        return self.first_stage + MIN_SECOND_STAGE if self.two_stage else self.first_stage

    @property
    def two_stage(self) -> bool:
        """Whether the first stage plans a second one (else the pair count is fixed)."""
        return self.max_pairs > self.first_stage


@dataclass(frozen=True)
class Crossover:
    """The crossover model on pair values: value = speedup + order effect x order + noise,
    order +1 when the baseline opened the pair (AB) and -1 when the variant did (BA).

    ``log_speedup`` and ``order_effect`` are in log units; ``variance`` is the residual
    variance with ``df`` degrees of freedom; ``factor`` times the noise variance is the
    variance of the speedup's (and of the order effect's) estimate.
    """

    log_speedup: float
    order_effect: float
    variance: float
    factor: float
    df: int


def crossover(values: LogRatios, orders: Orders) -> Crossover:
    """Fit the crossover model: the speedup is the mean of the AB and BA pairs' means, so a
    carry-over or first-block effect, and a linear drift (which looks the same: the second
    block of an AB pair is the variant), cancel instead of widening the interval."""
    y = np.asarray(values, dtype=float)
    o = np.asarray(orders)
    ab, ba = y[o > 0], y[o < 0]
    if ab.size == 0 or ba.size == 0 or y.size < 3:
        return Crossover(NAN, NAN, NAN, NAN, 0)
    residual = np.concatenate([ab - ab.mean(), ba - ba.mean()])
    df = int(y.size - 2)
    return Crossover((ab.mean() + ba.mean()) / 2, (ab.mean() - ba.mean()) / 2,
                     float(residual @ residual) / df, _factor(o), df)


def _aligned(values: LogRatios, orders: Orders) -> tuple[npt.NDArray[np.float64],
                                                         npt.NDArray[np.int64],
                                                         npt.NDArray[np.int64]]:
    """Values, orders and pair numbers of the complete pairs. A Series (as pair_log_ratios
    and pair_orders return) is matched by its pair index; arrays by position, from pair 0."""
    if isinstance(values, pd.Series):
        index = values.index.to_numpy(dtype=np.int64)
        o = (orders.reindex(values.index) if isinstance(orders, pd.Series)
             else pd.Series(np.asarray(orders)[index]))
        order_values = o.fillna(0).to_numpy(dtype=np.int64)
    else:
        index = np.arange(len(values), dtype=np.int64)
        order_values = np.asarray(orders, dtype=np.int64)[:len(values)]
    y = np.asarray(values, dtype=float)
    keep = np.isfinite(y) & (order_values != 0)
    return y[keep], order_values[keep], index[keep]


def _margin(variance: float, factor: float, df: int, level: float) -> float:
    return student_t_quantile(0.5 + level / 2.0, df) * math.sqrt(variance * factor)


def _factor(orders: npt.NDArray[np.int64]) -> float:
    opened = int((orders > 0).sum())
    return 0.25 * (1 / opened + 1 / (orders.size - opened)) if 0 < opened < orders.size else NAN


def planned_pairs(values: LogRatios, orders: Orders,
                  design: Design, level: float = 0.95) -> int:
    """How many pairs the job runs in all, fixed by its first stage alone.

    The first stage's crossover spread (df first_stage - 2) predicts the half-width at each
    total; the plan is the smallest total whose predicted half-width, with the second
    stage's own t quantile, is within the target. With an ``assurance`` p, the half-width
    is the second stage's, whose spread is not known yet: the ratio of its variance to the
    first stage's follows F(second df, first df) (normal pairs, one noise level), so the
    plan is the smallest total that meets the target with probability p or more. A first
    stage that is incomplete, or whose pairs are identical (a fault, not certainty), plans
    the maximum.
    """
    if not design.two_stage:
        return design.max_pairs
    y, o, index = _aligned(values, orders)
    first_stage = index < design.first_stage
    first = crossover(y[first_stage], o[first_stage])
    if int(first_stage.sum()) < design.first_stage or not first.variance > 0:
        return design.max_pairs
    # The orders of later pairs keep alternating as the first stage's did.
    pattern = np.resize(o[:2], design.max_pairs)
    limit = math.asinh(design.target)
    for total in range(design.first_stage + MIN_SECOND_STAGE, design.max_pairs + 1):
        second = total - design.first_stage - 2
        margin = _margin(first.variance, _factor(pattern[:total]), second, level)
        # With an assurance: the probability that the second stage's variance over the
        # first's stays below (limit / margin)^2, the ratio at which it meets the target.
        if (margin <= limit if design.assurance is None
                else f_cdf((limit / margin) ** 2, second, first.df) >= design.assurance):
            return total
    return design.max_pairs


@dataclass(frozen=True)
class Estimate:
    """A job's speedup with its interval, the order effect (ratio scale: how much faster the
    variant looks when it runs second) with its own interval, and how both were computed."""

    speedup: Interval
    log_se: float
    df: int
    order_effect: float
    order_low: float
    order_high: float
    method: str


def estimate(values: LogRatios, orders: Orders,
             design: Design | None = None, level: float = 0.95) -> Estimate:
    """The job's speedup interval, as its design allows.

    * Two-stage job past its first stage: the crossover estimate over every pair, with the
      noise variance of the second stage's pairs only (df = their number - 2). The number of
      pairs depends on the first stage alone, and the second stage's spread is independent
      of it, so the interval covers at its level whatever the number of pairs, including for
      the jobs that stop earliest (for normal pair values exactly).
    * Fixed design, or a two-stage job cut short: the crossover interval over all pairs when
      there are 4 or more with both orders, else the paired t (``speedup_interval``).
    """
    y, o, index = _aligned(values, orders)
    fit = crossover(y, o)
    second = index >= design.first_stage if design is not None else index < 0
    if design is not None and design.two_stage and int(second.sum()) >= MIN_SECOND_STAGE:
        noise = crossover(y[second], o[second])
        variance, df, method = noise.variance, noise.df, "two-stage crossover"
    elif fit.df >= 2:
        variance, df, method = fit.variance, fit.df, "crossover"
    else:
        variance, df, method = NAN, 0, "paired t"
    # Too few pairs for the model (or a second stage without both orders): the paired t.
    if not (df >= 1 and math.isfinite(variance)):
        paired = speedup_interval(y, level)
        se = float(y.std(ddof=1)) / math.sqrt(y.size) if y.size >= 2 else NAN
        return Estimate(paired, se, max(y.size - 1, 0), NAN, NAN, NAN, "paired t")
    margin = _margin(variance, fit.factor, df, level)
    interval = Interval(math.exp(fit.log_speedup), math.exp(fit.log_speedup - margin),
                        math.exp(fit.log_speedup + margin), int(y.size))
    # The variant runs second in AB pairs: the order effect is how much better the second
    # block of a pair does than the first (1.0: none).
    order = fit.order_effect
    return Estimate(interval, math.sqrt(variance * fit.factor), df, math.exp(order),
                    math.exp(order - margin), math.exp(order + margin), method)


def stop_decision(values: LogRatios, orders: Orders,
                  design: Design, pairs_done: int) -> StopDecision:
    """After each complete pair: go on until the first stage is done, then until the number
    of pairs it planned (``planned_pairs``)."""
    if pairs_done >= design.max_pairs:
        return StopDecision(True, f"max pairs ({design.max_pairs}) reached")
    if pairs_done < design.first_stage:
        return StopDecision(False, f"first stage: {pairs_done} of {design.first_stage} pairs")
    plan = planned_pairs(values, orders, design)
    if pairs_done >= plan:
        return StopDecision(True, f"planned pairs ({plan}) reached")
    return StopDecision(False, f"planned {plan} pairs from the first stage")


# --- Drift, acceptance, agreement, latency ------------------------------------------------


def drift(runs: pd.DataFrame, level: float = 0.95) -> Drift:
    """A least-squares trend over every block of the job, both arms, tested against zero.

    Each block gives one value, the mean over the job's prompts of the log median decode
    tok/s; the fit has an arm term and a term for a pair's first block (so a speedup or a
    carry-over is not read as drift) and a slope on the block index, whose t interval has
    blocks - 4 df. Counterbalancing and the crossover model keep a linear drift out of the
    speedup; the flag says the machine was not steady, with an error rate of 1 - level.
    """
    valid = _valid(runs)
    medians = valid.groupby(["block", "prompt_id"])["decode_tok_s"].median().unstack()
    medians = medians.dropna(axis="columns")
    if medians.shape[1] == 0 or len(medians) < 5:
        return Drift(0.0, NAN, NAN, 0.0, False)
    block = medians.index.to_numpy(dtype=float)
    value = np.log(medians.to_numpy(dtype=float)).mean(axis=1)
    facts = runs.drop_duplicates("block").set_index("block").reindex(medians.index)
    design = np.column_stack([np.ones_like(block),
                              (facts["arm"] == "variant").to_numpy(dtype=float),
                              (facts["position"] == 0).to_numpy(dtype=float), block])
    coefficients, _, rank, _ = np.linalg.lstsq(design, value, rcond=None)
    df = len(value) - int(rank)
    if rank < design.shape[1] or df < 1:
        return Drift(0.0, NAN, NAN, 0.0, False)
    residual = value - design @ coefficients
    covariance = float(residual @ residual) / df * np.linalg.inv(design.T @ design)
    slope = float(coefficients[3])
    margin = student_t_quantile(0.5 + level / 2.0, df) * math.sqrt(float(covariance[3, 3]))
    change = math.expm1(slope * float(block.max() - block.min()))
    return Drift(slope, slope - margin, slope + margin, change,
                 bool(slope - margin > 0 or slope + margin < 0))


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else NAN


def _summed_positions(values: pd.Series) -> list[int]:
    totals: list[int] = []
    for counts in values:
        # None / NaN: a run without per-position counters adds nothing.
        if not isinstance(counts, list | tuple | np.ndarray):
            continue
        totals.extend([0] * (len(counts) - len(totals)))
        for position, count in enumerate(counts):
            totals[position] += int(count)
    return totals


def rate_interval(accepted: LogRatios, drafted: LogRatios,
                  level: float = 0.95) -> tuple[float, float]:
    """An interval for sum(accepted) / sum(drafted) that treats each run as a cluster.

    Drafts within one run share its text, so they are not independent trials: a binomial
    interval over drafts is far too narrow. This is the ratio estimator's cluster-robust
    (linearisation) standard error over runs, with a t quantile on runs - 1 df, clipped to
    [0, 1]. Fewer than two runs with drafts: NaN.
    """
    a = np.asarray(accepted, dtype=float)
    d = np.asarray(drafted, dtype=float)
    used = np.isfinite(a) & np.isfinite(d) & (d > 0)
    a, d = a[used], d[used]
    runs = int(a.size)
    if runs < 2:
        return NAN, NAN
    rate = float(a.sum() / d.sum())
    se = math.sqrt(runs / (runs - 1) * float(np.sum((a - rate * d) ** 2))) / float(d.sum())
    margin = student_t_quantile(0.5 + level / 2.0, runs - 1) * se
    return max(0.0, rate - margin), min(1.0, rate + margin)


def acceptance(runs: pd.DataFrame) -> Acceptance:
    """The variant's acceptance from its raw counters.

    ``rate`` is accepted / drafted (llama.cpp's), with ``rate_interval`` over the variant's
    runs; ``mean_accepted_length`` is (accepted + drafts) / drafts, vLLM's acceptance
    length, which counts the bonus token each verify step yields; ``per_position[i]`` is
    accepted at draft position i per draft. No drafts gives NaN, not zero: nothing was
    measured.
    """
    variant = runs[runs["arm"] == "variant"]
    drafts, drafted, accepted = (int(variant[column].fillna(0).sum())
                                 for column in ("spec_drafts", "spec_drafted", "spec_accepted"))
    low, high = rate_interval(variant["spec_accepted"].astype(float),
                              variant["spec_drafted"].astype(float))
    # Per position: over the drafts of runs that have the counters (older builds lack them).
    counted = variant["spec_accepted_per_pos"].map(
        lambda counts: isinstance(counts, list | tuple | np.ndarray) and len(counts) > 0)
    counted_drafts = int(variant.loc[counted, "spec_drafts"].fillna(0).sum())
    per_position = [_ratio(count, counted_drafts)
                    for count in _summed_positions(variant["spec_accepted_per_pos"])]
    return Acceptance(drafts, drafted, accepted, _ratio(accepted, drafted), low, high,
                      _ratio(accepted + drafts, drafts), per_position)


# A slot is flagged when its acceptance is below the other slots' by more than this (in
# acceptance rate, 0.05 = 5 points) at the family-wise level SLOT_TEST_LEVEL: a real fault
# (one user saw ~3% on every slot but 0), not the last bit of batched arithmetic.
SLOT_MARGIN = 0.05
SLOT_TEST_LEVEL = 0.05


@dataclass(frozen=True)
class SlotCheck:
    """The variant's acceptance on each server slot of a run of simultaneous streams, and
    the slots whose acceptance is below the others' (``slot_acceptance``)."""

    rates: dict[int, float]  # slot -> accepted / drafted over its streams (slots that drafted)
    low: list[int]  # slots flagged
    runs: int  # runs in which every slot drafted: the test's sample


def slot_acceptance(streams: pd.DataFrame, margin: float = SLOT_MARGIN,
                    level: float = SLOT_TEST_LEVEL) -> SlotCheck:
    """Per slot, the variant's acceptance, and a test of each slot against the others.

    ``streams`` holds one row per stream (``arm``, ``block``, ``prompt_id``, ``repetition``,
    ``slot``, ``draft_n``, ``draft_accepted``). Every stream of a run reads the same prompt,
    so within a run the slots are compared on equal terms: per run, slot s's rate less the
    mean of the other slots' rates. A slot is flagged when a one-sided t test over the runs
    rejects "that difference is at least -``margin``" at ``level`` / slots (Bonferroni:
    ``level`` bounds the chance of flagging any slot of a sound server; the simulation
    measures it). Runs where a slot drafted nothing are left out; fewer than three runs
    test nothing.
    """
    variant = streams[(streams["arm"] == "variant") & streams["slot"].notna()]
    totals = variant.groupby("slot")[["draft_n", "draft_accepted"]].sum()
    rates = {int(slot): _ratio(float(accepted), float(drafted))
             for slot, drafted, accepted in zip(totals.index, totals["draft_n"],
                                                totals["draft_accepted"], strict=True)
             if drafted > 0}
    rate = variant["draft_accepted"] / variant["draft_n"].where(variant["draft_n"] > 0)
    per_run = (rate.groupby([variant["block"], variant["prompt_id"], variant["repetition"],
                             variant["slot"]]).mean().unstack("slot").dropna())
    slots = [int(slot) for slot in per_run.columns]
    if len(slots) < 2 or len(per_run) < 3:
        return SlotCheck(rates, [], len(per_run))
    table = per_run.to_numpy(dtype=float)
    flagged = []
    for column, slot in enumerate(slots):
        others = np.delete(table, column, axis=1).mean(axis=1)
        gap = table[:, column] - others + margin  # >= 0 under the null
        spread = float(np.std(gap, ddof=1))
        mean = float(np.mean(gap))
        if spread == 0.0:
            low = mean < 0.0
        else:
            critical = student_t_quantile(1.0 - level / len(slots), len(gap) - 1)
            low = mean / (spread / math.sqrt(len(gap))) < -critical
        if low:
            flagged.append(slot)
    return SlotCheck(rates, flagged, len(per_run))


def _has_tokens(value: object) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def _as_sequence(value: object, use_tokens: bool) -> Sequence[object]:
    if use_tokens:
        return list(value) if isinstance(value, list | tuple | np.ndarray) else []
    return value if isinstance(value, str) else ""


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    if a == b:  # the common case, compared in C
        return None
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    # One output a strict prefix of the other: they part where the shorter one ends.
    return None if len(a) == len(b) else min(len(a), len(b))


def _compared(runs: pd.DataFrame, measures: Sequence[str] = ("text", "tokens"),
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Variant runs, and the baseline's runs of its later blocks, each joined to the run of
    the baseline's first block with the same prompt and repetition (``measures`` of each,
    the reference's suffixed ``_base``)."""
    keys = ["prompt_id", "repetition"]
    baseline = runs[runs["arm"] == "baseline"].sort_values("block", kind="stable")
    reference = baseline.drop_duplicates(keys)
    columns = [*keys, *measures]
    control = baseline.drop(reference.index)[columns]
    variant = runs[runs["arm"] == "variant"][columns]
    return (variant.merge(reference[columns], on=keys, suffixes=("", "_base")),
            control.merge(reference[columns], on=keys, suffixes=("", "_base")))


def _divergences(compared: pd.DataFrame, use_tokens: bool) -> list[int | None]:
    column = "tokens" if use_tokens else "text"
    return [_first_difference(_as_sequence(v, use_tokens), _as_sequence(b, use_tokens))
            for v, b in zip(compared[column], compared[f"{column}_base"], strict=True)]


def _early_prompts(compared: pd.DataFrame, positions: list[int | None], early: int) -> int:
    # A prompt counts when most of its comparisons part early: one benign flip in one run
    # (floating-point order) does not make it, a change in the decoding path does.
    parted = pd.Series([p is not None and p < early for p in positions], dtype=bool)
    share = parted.groupby(compared["prompt_id"].to_numpy()).mean()
    return int((share > 0.5).sum())


def _agreement_reason(divergence: dict[str, int | None], share: float, control_share: float,
                      use_tokens: bool, early: int, early_prompts: tuple[int, int]) -> str:
    unit = "token" if use_tokens else "character"
    parts = [] if use_tokens else [f"no token ids on every run: compared characters "
                                   f"(early = first {early} characters)"]
    control = ("no repeated baseline block to compare" if math.isnan(control_share) else
               f"baseline vs itself: {1 - control_share:.0%} differ")
    differing = {p: d for p, d in divergence.items() if d is not None}
    if not differing:
        return "; ".join([*parts, "every variant output matches the baseline", control])
    first = min(differing, key=lambda p: (differing[p], p))
    parts.append(f"{1 - share:.0%} of outputs differ, {len(differing)} of {len(divergence)} "
                 f"prompts; earliest at {unit} {differing[first]} ({first})")
    parts.append(control)
    variant_early, control_early = early_prompts
    parts.append(f"prompts parting within the first {early} {unit}s: {variant_early} "
                 f"(variant) vs {control_early} (baseline control)")
    return "; ".join(parts)


def agreement(runs: pd.DataFrame, *, not_applicable: str | None = None) -> Agreement:
    """Compare each variant output with the baseline's for the same prompt and repetition,
    and the baseline's later blocks with its first (the control).

    Seeds are fixed, so speculative decoding should reproduce the baseline's output; it may
    part late through floating-point order, as the baseline may from itself. The job is
    suspect only when more prompts part early (most of their comparisons within the first
    16 tokens) variant-vs-baseline than baseline-vs-baseline. Token ids are compared when
    every compared run has them; otherwise characters (the reason says so), the early limit
    scaled to characters. ``not_applicable`` says why outputs need not match (sampling
    at temperature > 0, synthetic acceptance): nothing compared, never suspect.
    """
    if not_applicable:
        return Agreement(NAN, NAN, {}, 0, 0, False, False, f"not applicable: {not_applicable}")
    compared, control = _compared(runs)
    if compared.empty:
        return Agreement(NAN, NAN, {}, 0, 0, False, True,
                         "no variant run has a baseline run to compare with")
    both = pd.concat([compared, control])
    use_tokens = bool(both["tokens"].map(_has_tokens).all()
                      and both["tokens_base"].map(_has_tokens).all())
    early = EARLY_DIVERGENCE_TOKENS * (1 if use_tokens else CHARS_PER_TOKEN)
    positions = _divergences(compared, use_tokens)
    control_positions = _divergences(control, use_tokens)
    divergence: dict[str, int | None] = {}
    for prompt, position in zip(compared["prompt_id"].astype(str), positions, strict=True):
        # A prompt's divergence is its earliest over repetitions; None only if all match.
        found = [d for d in (divergence.get(prompt), position) if d is not None]
        divergence[prompt] = min(found) if found else None
    share = sum(p is None for p in positions) / len(positions)
    control_share = (sum(p is None for p in control_positions) / len(control_positions)
                     if control_positions else NAN)
    early_prompts = _early_prompts(compared, positions, early)
    control_early = _early_prompts(control, control_positions, early) if len(control) else 0
    return Agreement(share, control_share, divergence, early_prompts, control_early,
                     early_prompts > control_early, True,
                     _agreement_reason(divergence, share, control_share, use_tokens, early,
                                       (early_prompts, control_early)))


def stop_mismatches(runs: pd.DataFrame) -> int:
    """How many variant runs generated another number of tokens than the baseline's run of
    the same prompt and repetition (in its first block).

    None can under ``stop: fixed`` (every run generates n-predict tokens). Under ``natural``
    at temperature 0 both arms should stop at the same end of the same output: a mismatch
    means the arms did different work, so their decode tok/s compare unlike runs. At
    temperature > 0 lengths differ by chance. Runs without a count are not compared.
    """
    compared, _ = _compared(runs, ("generated_tokens",))
    counted = compared.dropna(subset=["generated_tokens", "generated_tokens_base"])
    return int((counted["generated_tokens"] != counted["generated_tokens_base"]).sum())


def latency(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm (index), p50/p90/p99 of time per output token and end-to-end latency, in ms.

    Failed runs (NaN) are left out rather than counted as fast or slow.
    """
    columns = [f"{metric}_p{q}_ms" for metric in ("tpot", "e2e") for q in LATENCY_PERCENTILES]
    rows: dict[str, list[float]] = {}
    for arm, group in runs.groupby("arm", sort=True):
        rows[str(arm)] = [float(pd.to_numeric(group[f"{metric}_ms"]).quantile(q / 100))
                          for metric in ("tpot", "e2e") for q in LATENCY_PERCENTILES]
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    return frame.rename_axis("arm")


def prompt_summary(runs: pd.DataFrame) -> dict[str, object]:
    """The prompts' length as the server counted it (median tokens per run) and each arm's
    prompt processing speed (median tok/s): what long prompts change. Empty for a frame
    without them."""
    if "prompt_tokens" not in runs.columns:
        return {}
    # Older builds' runs may lack the speed: None, so the column may hold objects.
    speeds = pd.to_numeric(runs["prompt_tok_s"], errors="coerce").groupby(runs["arm"]).median()
    tokens = pd.to_numeric(runs["prompt_tokens"], errors="coerce")
    return {"prompt_tokens": float(tokens.median()) if tokens.notna().any() else NAN,
            **{f"prompt_tok_s_{arm}": float(speeds.get(arm, NAN)) for arm in ARMS}}


def concurrency_summary(runs: pd.DataFrame, streams: pd.DataFrame | None,
                        design: Design | None = None) -> dict[str, object]:
    """What a job of simultaneous streams adds to its summary (nothing for one stream): the
    speedup of the aggregate tok/s over the decode window, estimated like the per-request
    one (pairs, crossover, the job's design); how much the streams overlapped; the
    variant's acceptance per slot and the slots ``slot_acceptance`` flags."""
    if "concurrency" not in runs.columns or not (runs["concurrency"].fillna(1) > 1).any():
        return {"concurrency": 1} if "concurrency" in runs.columns else {}
    aggregate = runs.assign(decode_tok_s=runs["aggregate_tok_s"].astype(float))
    found = estimate(pair_log_ratios(aggregate), pair_orders(aggregate), design).speedup
    overlap = runs["overlap"].astype(float)
    summary: dict[str, object] = {
        "concurrency": int(runs["concurrency"].max()),
        "aggregate_speedup": found.estimate, "aggregate_ci_low": found.low,
        "aggregate_ci_high": found.high,
        "overlap_min": float(overlap.min()), "overlap_mean": float(overlap.mean())}
    if streams is not None and not streams.empty:
        slots = slot_acceptance(streams)
        summary |= {"slot_acceptance": {str(slot): rate for slot, rate in slots.rates.items()},
                    "low_slots": slots.low}
    return summary


def summarize_job(runs: pd.DataFrame, design: Design | None = None,
                  no_agreement: str | None = None,
                  streams: pd.DataFrame | None = None) -> dict[str, object]:
    """The job's headline numbers, JSON-friendly (plain floats, ints and bools; NaN allowed).

    ``design`` is the job's (its interval is the two-stage one when it has a second stage);
    ``no_agreement`` says why output agreement does not apply to it (see ``agreement``);
    ``streams`` are its runs' simultaneous streams, if any (``concurrency_summary``).
    """
    ratios = pair_log_ratios(runs)
    found = estimate(ratios, pair_orders(runs), design)
    speedup = found.speedup
    agreed = agreement(runs, not_applicable=no_agreement)
    accepted = acceptance(runs)
    moved = drift(runs)
    return {
        "speedup": speedup.estimate,
        "ci_low": speedup.low,
        "ci_high": speedup.high,
        "pairs": speedup.pairs,
        # What a group interval needs to combine this job with others (see pool_jobs).
        "log_se": found.log_se,
        "df": found.df,
        "interval_method": found.method,
        # How much faster a pair's second block runs than its first, with its interval.
        "order_effect": found.order_effect,
        "order_low": found.order_low,
        "order_high": found.order_high,
        # Flags: pairs left out for a missing prompt or arm, runs with unusable tok/s, and
        # a zero spread (identical pairs), which is a fault, not certainty.
        "incomplete_pairs": int(runs["pair"].nunique()) - speedup.pairs,
        "invalid_runs": len(runs) - len(_valid(runs)),
        "degenerate": bool(speedup.pairs >= 2 and float(np.std(ratios)) == 0.0),
        "agreement": agreed.identical_share,
        "agreement_control": agreed.control_share,
        "agreement_applicable": agreed.applicable,
        "agreement_suspect": agreed.suspect,
        # Variant runs that stopped at another length than the baseline's (stop: natural).
        "stop_mismatch": stop_mismatches(runs),
        "drift_flag": moved.flag,
        "drift_per_block": moved.slope_per_block,
        "drift_low": moved.low,
        "drift_high": moved.high,
        "acceptance_rate": accepted.rate,
        "acceptance_low": accepted.rate_low,
        "acceptance_high": accepted.rate_high,
        "mean_accepted_length": accepted.mean_accepted_length,
        **concurrency_summary(runs, streams, design),
        **prompt_summary(runs),
    }


# --- Engine cost curve: speedup as a function of acceptance length ---------------------------

@dataclass(frozen=True)
class CostCurve:
    """What one engine (build x model x GPU class x spec type) delivers at one draft length:
    the speedup as a straight line in the mean acceptance length L (tokens per speculative
    step, the target's included), fitted to synthetic-acceptance jobs.

    A step that drafts k tokens costs the same whatever is accepted, give or take a rollback,
    so the time per token is step cost / L and the speedup L / step cost: a line through the
    origin. Rollbacks (a recurrent model replays a partly accepted draft) and drafts that
    stop early bend it; the line's intercept absorbs that, ``tau`` measures what it leaves.

    ``intercept`` + ``slope`` * L with ``covariance`` (Knapp-Hartung, ``df`` = points - 2),
    fitted over measured lengths ``lengths`` (min, max): outside them a prediction is an
    extrapolation.
    """

    draft_n_max: int
    intercept: float
    slope: float
    covariance: tuple[tuple[float, float], tuple[float, float]]
    df: int
    tau: float
    points: int
    lengths: tuple[float, float]

    def standard_error(self, length: float) -> float:
        """The standard error of the line at ``length`` (speedup units); NaN below 3 points."""
        (v00, v01), (_, v11) = self.covariance
        if self.df < 1:
            return NAN
        return math.sqrt(max(v00 + 2.0 * length * v01 + length * length * v11, 0.0))

    def _margin(self, length: float, level: float) -> float:
        if self.df < 1:
            return NAN
        return student_t_quantile(0.5 + level / 2.0, self.df) * self.standard_error(length)

    def speedup(self, length: float, level: float = 0.95) -> tuple[float, float, float]:
        """The speedup the engine gives at acceptance length ``length``, with its interval
        (the line's, not a new job's: it holds the engine's cost, not one job's noise)."""
        value = self.intercept + self.slope * length
        margin = self._margin(length, level)
        return value, max(value - margin, 0.0), value + margin

    def step_cost(self, level: float = 0.95) -> tuple[float, float, float]:
        """The cost of one speculative step with ``draft_n_max`` drafted tokens, all of them
        accepted (k + 1 tokens, nothing rolled back), relative to one plain decode step:
        (k + 1) / speedup(k + 1), with its interval."""
        full = self.draft_n_max + 1.0
        value, low, high = self.speedup(full, level)
        return (full / value if value > 0 else NAN, full / high if high > 0 else NAN,
                full / low if low > 0 else math.inf)

    def break_even(self, level: float = 0.95) -> tuple[float, float, float]:
        """The acceptance length at which the speedup is 1, with its Fieller interval: every
        L whose speedup interval contains 1. An infinite end means the data cannot rule
        that side out (the slope is not clearly positive)."""
        if not self.slope > 0:
            return NAN, NAN, NAN
        estimate = (1.0 - self.intercept) / self.slope
        if self.df < 1:
            return estimate, NAN, NAN
        (v00, v01), (_, v11) = self.covariance
        t2 = student_t_quantile(0.5 + level / 2.0, self.df) ** 2
        # (a + bL - 1)^2 <= t^2 (v00 + 2 L v01 + L^2 v11): a quadratic in L.
        a0 = self.intercept - 1.0
        qa = self.slope**2 - t2 * v11
        qb = 2.0 * (a0 * self.slope - t2 * v01)
        qc = a0 * a0 - t2 * v00
        if qa <= 0:
            return estimate, -math.inf, math.inf
        # The estimate itself meets the inequality, so the roots are real (up to rounding).
        root = math.sqrt(max(qb * qb - 4.0 * qa * qc, 0.0))
        return estimate, (-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)


def cost_curve(draft_n_max: int, lengths: LogRatios, speedups: LogRatios,
               log_ses: LogRatios, dfs: Sequence[int]) -> CostCurve:
    """The ``CostCurve`` of one draft length from its synthetic-acceptance jobs: each job's
    measured acceptance length, speedup and log standard error.

    A random-effects meta-regression of speedup on length: each job weighs by its own
    variance plus the between-job variance tau^2 (method of moments, DerSimonian-Laird's
    estimator for a regression), and the coefficients' covariance is Knapp-Hartung's (scaled
    by the weighted residual mean square, untruncated) with a t on points - 2 df, as
    ``pool_jobs`` does for one mean. A job's variance is its log_se, shrunk toward the
    jobs' pooled one by its ``df`` as there, times the fitted (not its own) speedup,
    squared: weights that follow a job's own noise undercover. Jobs without a standard
    error are left out; fewer than three jobs give no interval (NaN margins).
    """
    x = np.asarray(lengths, dtype=float)
    y = np.asarray(speedups, dtype=float)
    log_se = np.asarray(log_ses, dtype=float)
    df_job = np.asarray(dfs, dtype=float)
    usable = (np.isfinite(x) & np.isfinite(y) & np.isfinite(log_se) & (y > 0)
              & (df_job >= 1))
    x, y, log_se, df_job = x[usable], y[usable], log_se[usable], df_job[usable]
    points = int(x.size)
    if points < 2 or float(np.ptp(x)) == 0.0:
        return CostCurve(draft_n_max, NAN, NAN, ((NAN, NAN), (NAN, NAN)), 0, NAN, points,
                         (float(x.min()), float(x.max())) if points else (NAN, NAN))
    design = np.column_stack([np.ones(points), x])
    log_variance = np.maximum(log_se, 1e-9) ** 2
    pooled = float(np.sum(df_job * log_variance) / np.sum(df_job))
    log_variance = (df_job * log_variance + df_job.mean() * pooled) / (df_job + df_job.mean())

    def fit(weights: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64],
                                                       npt.NDArray[np.float64]]:
        inverse = np.linalg.inv(design.T @ (weights[:, None] * design))
        return inverse @ design.T @ (weights * y), inverse

    beta, _ = fit(1.0 / (log_variance * y**2))
    variance = log_variance * np.maximum(design @ beta, 1e-3) ** 2
    weights = 1.0 / variance
    beta, inverse = fit(weights)
    q = float(np.sum(weights * (y - design @ beta) ** 2))
    df = points - 2
    # tr(P) for the weighted regression: sum(w) - tr((X'WX)^-1 X'W^2X).
    trace = float(np.sum(weights) - np.trace(inverse @ design.T @ ((weights**2)[:, None]
                                                                  * design)))
    tau2 = max(0.0, (q - df) / trace) if df > 0 and trace > 0 else 0.0
    weights = 1.0 / (variance + tau2)
    beta, inverse = fit(weights)
    if df > 0:
        scale = float(np.sum(weights * (y - design @ beta) ** 2)) / df
        covariance = scale * inverse
    else:
        covariance = np.full((2, 2), NAN)
    return CostCurve(draft_n_max, float(beta[0]), float(beta[1]),
                     ((float(covariance[0, 0]), float(covariance[0, 1])),
                      (float(covariance[1, 0]), float(covariance[1, 1]))),
                     df, math.sqrt(tau2), points, (float(x.min()), float(x.max())))


# --- Predicting a drafter's speedup from its acceptance and the engine's cost curve ---------

@dataclass(frozen=True)
class Profile:
    """What a drafter's runs say about its acceptance, runs as clusters: per run, its
    drafts, its accepted drafts per position (``accepted[r][i]``: run r, draft position i)
    and its plain steps (tokens generated without a draft).

    ``positions`` is how many positions were measured (the arm's draft length); beyond
    them a profile is extrapolated.
    """

    drafts: npt.NDArray[np.float64]
    accepted: npt.NDArray[np.float64]  # runs x positions
    plain_steps: npt.NDArray[np.float64]

    @property
    def positions(self) -> int:
        """How many draft positions were measured."""
        return int(self.accepted.shape[1])

    @property
    def rates(self) -> list[float]:
        """Accepted per draft at each measured position (unconditional)."""
        total = float(self.drafts.sum())
        return [float(x) / total if total > 0 else NAN for x in self.accepted.sum(axis=0)]

    @property
    def draft_share(self) -> float:
        """The share of decode steps that drafted (1 for MTP; less for n-gram lookups)."""
        steps = float(self.drafts.sum() + self.plain_steps.sum())
        return float(self.drafts.sum()) / steps if steps > 0 else NAN

    def accepted_within(self, draft_n_max: int) -> npt.NDArray[np.float64]:
        """Per run: accepted drafts within the first ``draft_n_max`` positions, positions
        beyond the measured ones extrapolated geometrically from the last two rates."""
        within: npt.NDArray[np.float64] = self.accepted[:, :draft_n_max].sum(axis=1)
        if draft_n_max <= self.positions:
            return within
        rates = self.rates
        ratio = (rates[-1] / rates[-2] if self.positions >= 2 and rates[-2] > 0
                 else rates[-1] if rates else 0.0)
        ratio = min(max(ratio, 0.0), 1.0)
        last: npt.NDArray[np.float64] = self.accepted[:, -1]
        extra = sum(ratio**step for step in range(1, draft_n_max - self.positions + 1))
        return within + last * extra


def acceptance_length(profile: Profile, draft_n_max: int) -> tuple[float, float, int]:
    """The mean acceptance length at ``draft_n_max`` (1 + accepted per draft within the
    first positions), its standard error with runs as clusters (the ratio estimator's
    linearisation, as ``rate_interval``) and its df (runs - 1)."""
    accepted = profile.accepted_within(draft_n_max)
    drafts = profile.drafts
    used = drafts > 0
    a, d = accepted[used], drafts[used]
    runs = int(a.size)
    if runs == 0:
        return NAN, NAN, 0
    rate = float(a.sum() / d.sum())
    if runs < 2:
        return 1.0 + rate, NAN, 0
    se = math.sqrt(runs / (runs - 1) * float(np.sum((a - rate * d) ** 2))) / float(d.sum())
    return 1.0 + rate, se, runs - 1


@dataclass(frozen=True)
class Prediction:
    """A drafter's predicted speedup at one draft length, with its interval; ``length`` is
    the acceptance length it used, ``extrapolated`` says what was outside the measurements
    ("" when nothing was)."""

    draft_n_max: int
    length: float
    speedup: float
    low: float
    high: float
    df: float
    extrapolated: str


def predict_speedup(profile: Profile, curve: CostCurve, level: float = 0.95) -> Prediction:
    """The speedup a drafter with ``profile`` would get from the engine of ``curve`` at the
    curve's draft length k.

    A drafting step yields L(k) tokens (``acceptance_length``) in the time the curve gives
    for it, L / s_k(L) plain steps; a step without a draft (an n-gram lookup that found
    nothing) yields one token in one plain step. With a share f of drafting steps:

        speedup = (f L + 1 - f) / (f L / s_k(L) + 1 - f).

    Its interval carries both sources: the curve's line at L (its covariance, df points - 2,
    plus the spread tau the line leaves, as for a new point) and L's own error (runs as
    clusters, df runs - 1), combined on the log scale by the delta method with
    Welch-Satterthwaite df. The draft share is taken as known (thousands
    of steps).
    """
    k = curve.draft_n_max
    length, length_se, length_df = acceptance_length(profile, k)
    share = profile.draft_share
    line = curve.speedup(length, level)[0]
    notes = []
    if k > profile.positions:
        notes.append(f"acceptance beyond position {profile.positions} extrapolated")
    low_len, high_len = curve.lengths
    if not low_len - 1e-9 <= length <= high_len + 1e-9:
        notes.append(f"length {length:.2f} outside the curve's {low_len:.2f}-{high_len:.2f}")
    if not (math.isfinite(line) and line > 0 and math.isfinite(share)):
        return Prediction(k, length, NAN, NAN, NAN, NAN, "; ".join(notes))
    steps = share * length / line + (1.0 - share)
    tokens = share * length + (1.0 - share)
    value = tokens / steps
    # d log(value) / d log(line) and / d length, for the delta method.
    by_line = (share * length / line) / steps
    by_length = share / tokens - (share / line) / steps + (by_line * curve.slope / line)
    line_se = curve.standard_error(length) / line
    # A drafter's profile is not the geometric one synthetic acceptance forced, so its
    # point may sit off the line by the spread the line leaves (tau), like a new point.
    var_line = by_line**2 * (line_se**2 + (curve.tau / line) ** 2)
    var_length = (by_length * length_se) ** 2 if math.isfinite(length_se) else 0.0
    variance = var_line + var_length
    if not math.isfinite(variance) or curve.df < 1:
        return Prediction(k, length, value, NAN, NAN, NAN, "; ".join(notes))
    if variance == 0.0:
        return Prediction(k, length, value, value, value, math.inf, "; ".join(notes))
    df_parts = [(var_line, curve.df), (var_length, length_df)]
    spread = sum(v**2 / d for v, d in df_parts if v > 0 and d >= 1)
    df = variance**2 / spread if spread > 0 else float(curve.df)
    margin = student_t_quantile(0.5 + level / 2.0, df) * math.sqrt(variance)
    return Prediction(k, length, value, value * math.exp(-margin), value * math.exp(margin),
                      df, "; ".join(notes))
