"""Statistics of one job: speedup with its interval, adaptive stopping, drift, acceptance,
output agreement and latency percentiles. Pure functions on the tidy runs frame (one row per
run, as ``farm.report.frames.runs_frame`` returns), no I/O.

A job runs its two arms in blocks, one server start each, counterbalanced in pairs (AB, BA,
AB, ...). Repetitions inside one server session share that session's state (placement,
clocks, caches), so they are not independent evidence: the unit of evidence is the block
PAIR. Each pair gives one log speedup (the mean over prompts of the log ratio of the arms'
medians), and the interval is a paired t over those pair values, exponentiated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import pandas as pd

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
    """Trend of the baseline over the job's blocks.

    ``slope_per_block`` is in log units per block (about the relative change per block),
    ``change`` the fitted relative change from the job's first block to its last, ``effect``
    the absolute log speedup the job reports; ``flag`` says the baseline moved more than that.
    """

    slope_per_block: float
    change: float
    effect: float
    flag: bool


@dataclass(frozen=True)
class Acceptance:
    """The variant's draft counters and the rates derived from them."""

    drafts: int
    drafted: int
    accepted: int
    rate: float
    mean_accepted_length: float
    per_position: list[float]


@dataclass(frozen=True)
class Agreement:
    """How far the variant's outputs match the baseline's for the same prompt and seed."""

    identical_share: float
    first_divergence: dict[str, int | None]
    suspect: bool
    reason: str


# --- Student t, without scipy -------------------------------------------------------------

_TINY = 1e-300
_CF_EPS = 1e-15


def _nonzero(value: float) -> float:
    # Lentz's method divides by these terms; a tiny stand-in keeps it finite.
    return _TINY if abs(value) < _TINY else value


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    c, d = 1.0, 1.0 / _nonzero(1.0 - (a + b) * x / (a + 1.0))
    result = d
    for m in range(1, 100_000):
        numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 / _nonzero(1.0 + numerator * d)
        c = _nonzero(1.0 + numerator / c)
        result *= d * c
        numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 / _nonzero(1.0 + numerator * d)
        c = _nonzero(1.0 + numerator / c)
        result *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            return result
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    # The fraction converges fast only below (a + 1) / (a + b + 2); use the symmetry above it.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, df: float) -> float:
    # P(T > t) for t >= 0, computed directly so that far tails keep their precision.
    return 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = _t_upper_tail(abs(t), df)
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on the CDF; cached, as loops ask often)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    tail = 1.0 - p
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if _t_upper_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2.0


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


def best_of_interval(log_speedup: float, log_se: float, df: int, variants: int,
                     level: float = 0.95) -> tuple[float, float]:
    """The interval to quote for the best-looking of ``variants`` jobs: Bonferroni, each of
    the m intervals at level 1 - (1 - level) / m, so all of them, and hence the one picked
    for looking best, cover together at least ``level`` of the time. The plain interval of
    a best-of-20 pick covers about 0.7 (tests/unit/test_stats.py)."""
    if df < 1 or not math.isfinite(log_se):
        return NAN, NAN
    tail = (1.0 - level) / (2.0 * max(variants, 1))
    margin = student_t_quantile(1.0 - tail, df) * log_se
    return math.exp(log_speedup - margin), math.exp(log_speedup + margin)


def job_speedup(runs: pd.DataFrame) -> Interval:
    """The job's speedup (variant over baseline decode tok/s) with its 95% interval."""
    return speedup_interval(pair_log_ratios(runs))


def speedup_by(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The job's speedup per prompt or prompt category, each from its own prompts' pairs.

    ``column`` is "prompt_id" or "prompt_category"; one row per group value with columns
    ``column``, estimate, low, high, pairs.
    """
    if column not in ("prompt_id", "prompt_category"):
        raise ValueError(f"speedup_by groups by prompt_id or prompt_category, not {column!r}")
    rows = []
    for value, group in runs.groupby(column, sort=True):
        interval = job_speedup(group)
        rows.append({column: value, "estimate": interval.estimate, "low": interval.low,
                     "high": interval.high, "pairs": interval.pairs})
    return pd.DataFrame(rows, columns=[column, "estimate", "low", "high", "pairs"])


def adaptive_stop(log_ratios: LogRatios, *, min_pairs: int = 3,
                  max_pairs: int, target: float = 0.03, level: float = 0.95) -> StopDecision:
    """Stop once the speedup's interval half-width (relative) is within ``target``, or at
    ``max_pairs``; never before ``min_pairs``.

    Stopping on a narrow interval favours jobs whose spread happened to look small, which
    costs coverage, badly so with few pairs: in the simulation in tests/unit/test_stats.py
    (max 12 pairs, ±3%) a 95% interval covered the true ratio 91-93% of the time with
    ``min_pairs=3`` (59-71% for the jobs that stopped at 3 pairs) and 94.6-95.3% with
    ``min_pairs=8``. The default of 3 is only the floor; a caller that stops adaptively and
    quotes the interval should ask for about 8.
    """
    if min_pairs < 2 or max_pairs < min_pairs:
        raise ValueError(f"need 2 <= min_pairs <= max_pairs, got {min_pairs}, {max_pairs}")
    pairs = len(log_ratios)
    if pairs < min_pairs:
        return StopDecision(False, f"need {min_pairs} pairs (have {pairs})")
    width = speedup_interval(log_ratios, level).half_width
    shown = f"±{width:.1%}"
    if width == 0.0 and pairs < max_pairs:
        # Identical pair values are a measurement fault (a fixed clock, cached results),
        # not certainty: never a reason to stop.
        return StopDecision(False, f"zero spread after {pairs} pairs (degenerate); going on")
    if width <= target:
        return StopDecision(True, f"target reached ({shown} after {pairs} pairs)")
    if pairs >= max_pairs:
        return StopDecision(True, f"max pairs ({max_pairs}) reached ({shown})")
    return StopDecision(False, f"{shown} after {pairs} pairs, target ±{target:.1%}")


# --- Drift, acceptance, agreement, latency ------------------------------------------------


def _drift(runs: pd.DataFrame, speedup: float) -> Drift:
    effect = abs(math.log(speedup)) if speedup > 0 else NAN
    baseline = _valid(runs[runs["arm"] == "baseline"])
    per_block = baseline.groupby("block")["decode_tok_s"].median()
    if len(per_block) < 2:
        return Drift(0.0, 0.0, effect, False)
    # Fit on the log so the slope is a relative change per block, like the effect it is
    # compared with.
    slope = float(np.polyfit(per_block.index.to_numpy(dtype=float),
                             np.log(per_block.to_numpy(dtype=float)), 1)[0])
    moved = slope * float(runs["block"].max() - runs["block"].min())
    # NaN effect (no complete pair) compares False: nothing reported, nothing to outweigh.
    return Drift(slope, math.expm1(moved), effect, bool(abs(moved) > effect))


def drift(runs: pd.DataFrame) -> Drift:
    """Least-squares trend of the log baseline per-block median decode tok/s on block index.

    Counterbalancing cancels a linear drift in the speedup, but a baseline that moved more
    than the reported effect means the machine was not steady enough to trust it blindly.
    """
    return _drift(runs, job_speedup(runs).estimate)


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


def acceptance(runs: pd.DataFrame) -> Acceptance:
    """The variant's acceptance from its raw counters.

    ``rate`` is accepted / drafted (llama.cpp's); ``mean_accepted_length`` is
    (accepted + drafts) / drafts, vLLM's acceptance length, which counts the bonus token each
    verify step yields; ``per_position[i]`` is accepted at draft position i per draft. No
    drafts gives NaN, not zero: nothing was measured.
    """
    variant = runs[runs["arm"] == "variant"]
    drafts, drafted, accepted = (int(variant[column].fillna(0).sum())
                                 for column in ("spec_drafts", "spec_drafted", "spec_accepted"))
    # Per position: over the drafts of runs that have the counters (older builds lack them).
    counted = variant["spec_accepted_per_pos"].map(
        lambda counts: isinstance(counts, list | tuple | np.ndarray) and len(counts) > 0)
    counted_drafts = int(variant.loc[counted, "spec_drafts"].fillna(0).sum())
    per_position = [_ratio(count, counted_drafts)
                    for count in _summed_positions(variant["spec_accepted_per_pos"])]
    return Acceptance(drafts, drafted, accepted, _ratio(accepted, drafted),
                      _ratio(accepted + drafts, drafts), per_position)


def _has_tokens(value: object) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def _as_sequence(value: object, use_tokens: bool) -> Sequence[object]:
    if use_tokens:
        return list(value) if isinstance(value, list | tuple | np.ndarray) else []
    return value if isinstance(value, str) else ""


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    # One output a strict prefix of the other: they part where the shorter one ends.
    return None if len(a) == len(b) else min(len(a), len(b))


def _compared(runs: pd.DataFrame) -> pd.DataFrame:
    """Variant runs joined to the first baseline run of the same prompt and repetition."""
    keys = ["prompt_id", "repetition"]
    baseline = (runs[runs["arm"] == "baseline"].sort_values("block", kind="stable")
                .drop_duplicates(keys)[[*keys, "text", "tokens"]])
    variant = runs[runs["arm"] == "variant"][[*keys, "text", "tokens"]]
    return variant.merge(baseline, on=keys, suffixes=("", "_base"))


def _agreement_reason(divergence: dict[str, int | None], share: float, use_tokens: bool,
                      early: int) -> str:
    unit = "token" if use_tokens else "character"
    parts = [] if use_tokens else [f"no token ids on every run: compared characters "
                                   f"(early = first {early} characters)"]
    differing = {p: d for p, d in divergence.items() if d is not None}
    if not differing:
        return "; ".join([*parts, "every variant output matches the baseline"])
    first = min(differing, key=lambda p: (differing[p], p))
    parts.append(f"{1 - share:.0%} of outputs differ, {len(differing)} of {len(divergence)} "
                 f"prompts; earliest at {unit} {differing[first]} ({first})")
    if differing[first] < early:
        parts.append(f"divergence within the first {early} {unit}s")
    if len(differing) > len(divergence) / 2:
        parts.append("more than half of the prompts differ")
    return "; ".join(parts)


def agreement(runs: pd.DataFrame) -> Agreement:
    """Compare each variant output with the baseline's for the same prompt and repetition.

    Seeds are fixed, so speculative decoding should reproduce the baseline's output; it may
    drift late through floating-point order, but an early divergence, or most prompts
    differing, makes the job suspect. Token ids are compared when every compared run has them;
    otherwise characters (the reason says so), with the early limit scaled to characters.
    """
    compared = _compared(runs)
    if compared.empty:
        return Agreement(NAN, {}, False, "no variant run has a baseline run to compare with")
    use_tokens = bool(compared["tokens"].map(_has_tokens).all()
                      and compared["tokens_base"].map(_has_tokens).all())
    column = "tokens" if use_tokens else "text"
    positions = [_first_difference(_as_sequence(v, use_tokens), _as_sequence(b, use_tokens))
                 for v, b in zip(compared[column], compared[f"{column}_base"], strict=True)]
    divergence: dict[str, int | None] = {}
    for prompt, position in zip(compared["prompt_id"].astype(str), positions, strict=True):
        # A prompt's divergence is its earliest over repetitions; None only if all match.
        found = [d for d in (divergence.get(prompt), position) if d is not None]
        divergence[prompt] = min(found) if found else None
    share = sum(p is None for p in positions) / len(positions)
    early = EARLY_DIVERGENCE_TOKENS * (1 if use_tokens else CHARS_PER_TOKEN)
    differing = [d for d in divergence.values() if d is not None]
    suspect = (any(d < early for d in differing)) or len(differing) > len(divergence) / 2
    return Agreement(share, divergence, suspect,
                     _agreement_reason(divergence, share, use_tokens, early))


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


def summarize_job(runs: pd.DataFrame) -> dict[str, object]:
    """The job's headline numbers, JSON-friendly (plain floats, ints and bools; NaN allowed)."""
    ratios = pair_log_ratios(runs)
    speedup = speedup_interval(ratios)
    agreed = agreement(runs)
    accepted = acceptance(runs)
    return {
        "speedup": speedup.estimate,
        "ci_low": speedup.low,
        "ci_high": speedup.high,
        "pairs": speedup.pairs,
        # What a group interval needs to combine this job with others (see pool_jobs).
        "log_se": log_standard_error(speedup.low, speedup.high, speedup.pairs),
        "df": speedup.pairs - 1,
        # Flags: pairs left out for a missing prompt or arm, runs with unusable tok/s, and
        # a zero spread (identical pairs), which is a fault, not certainty.
        "incomplete_pairs": int(runs["pair"].nunique()) - speedup.pairs,
        "invalid_runs": len(runs) - len(_valid(runs)),
        "degenerate": bool(speedup.pairs >= 2 and float(np.std(ratios)) == 0.0),
        "agreement": agreed.identical_share,
        "agreement_suspect": agreed.suspect,
        "drift_flag": _drift(runs, speedup.estimate).flag,
        "acceptance_rate": accepted.rate,
        "mean_accepted_length": accepted.mean_accepted_length,
    }
