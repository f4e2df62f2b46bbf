"""Fixed-seed simulations of the audit's scenarios (issue 24), calling the farm's own
functions: the coverage tests (tests/unit/test_stats_coverage.py) run them with few
replicates, tests/bench/bench_statistics.py with many. Each cell returns its figures; none
asserts anything.

The scenarios are the independent audit's (/work/shared/statsaudit, sim_a.py and
sim_misc.py): a job's pair values from block offsets (a server session's shared state)
plus run noise, counterbalanced AB/BA pairs, a true speedup of 1.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.stats.acceptance import acceptance
from farm.stats.design import Design
from farm.stats.difference import difference, discoveries
from farm.stats.drift import drift
from farm.stats.frame import Floats
from farm.stats.speedup import estimate
from farm.stats.twostage import planned_pairs

TRUE_LOG = math.log(1.3)
# The matrix defaults; recommend's verification design (an assured plan, the audit's); jobs
# measured to ±3% (the difference test's power is stated for them).
DEFAULT = Design(first_stage=4, max_pairs=12, target=0.03)
ASSURED = Design(first_stage=12, max_pairs=100, target=0.025, assurance=0.9)
THREE_PERCENT = Design(first_stage=12, max_pairs=100, target=0.03, assurance=0.9)

# The two-stage cells, as the issue names them (the audit's kind in brackets).
TWO_STAGE_CELLS = {
    "steady": "normal",
    "heavy tails (t3)": "t3",
    "noisy warm-up": "quieter_after",  # block noise SD halves after the first stage
    "noise doubling": "louder_after",  # block noise SD doubles after the first stage
    "wandering speedup": "speedup_ar",  # the speedup itself AR(1) 0.5, SD 3%
    "AR(1) 0.5 blocks": "ar0.5",
}


def binomial_sd(rate: float, replicates: int) -> float:
    """The standard deviation of a rate measured over ``replicates`` independent
    replicates: the slack a seeded cell's band allows, and the ± a bench prints."""
    return math.sqrt(max(rate * (1 - rate), 1e-9) / max(replicates, 1))


def plus_minus(rate: float, replicates: int) -> str:
    """``binomial_sd`` as a bench prints it: "±0.005"."""
    return f"±{binomial_sd(rate, replicates):.3f}"


def ar1_rows(rng: np.random.Generator, rows: int, blocks: int, phi: float) -> Floats:
    """``rows`` stationary AR(1) series of ``blocks`` values, correlation ``phi``, unit
    variance (one draw of all the innovations, then the recursion)."""
    noise = rng.normal(size=(rows, blocks))
    series = np.empty_like(noise)
    series[:, 0] = noise[:, 0]
    for i in range(1, blocks):
        series[:, i] = phi * series[:, i - 1] + math.sqrt(1 - phi * phi) * noise[:, i]
    return series


def ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> Floats:
    """One such series of ``n`` values with marginal SD ``sd``."""
    series: Floats = sd * ar1_rows(rng, 1, n, phi)[0]
    return series


def block_noise(rng: np.random.Generator, kind: str, blocks: int, sd: float,
                change: int) -> Floats:
    """Block-level log-speed offsets, common to a server session (the audit's)."""
    index = np.arange(blocks)
    if kind in ("normal", "speedup_ar", "walk"):
        return rng.normal(0, sd, blocks)
    if kind == "t3":
        return rng.standard_t(3, blocks) * sd / math.sqrt(3.0)
    if kind == "louder_after":
        return rng.normal(0, sd, blocks) * np.where(index >= change, 2.0, 1.0)
    if kind == "quieter_after":
        return rng.normal(0, sd, blocks) * np.where(index >= change, 0.5, 1.0)
    if kind.startswith("ar"):
        return ar1(rng, blocks, float(kind[2:]), sd)
    raise ValueError(kind)


def job_pairs(rng: np.random.Generator, kind: str, max_pairs: int,
              first_stage: int) -> tuple[Floats, npt.NDArray[np.int64]]:
    """One job's pair values (log speedups) and orders (+1 AB, -1 BA), the audit's job."""
    values, orders, _ = job_effects(rng, kind, max_pairs, first_stage)
    return values, orders


def job_effects(rng: np.random.Generator, kind: str, max_pairs: int, first_stage: int,
                true_log: float = TRUE_LOG) -> tuple[Floats, npt.NDArray[np.int64], Floats]:
    """``job_pairs`` at a true log speedup of ``true_log``, with each pair's own true log
    speedup: ``true_log`` but where the speedup moves ("speedup_ar": AR(1) 0.5 around it,
    SD 3%; "walk": a random walk from it, 1% a pair)."""
    sd = rng.uniform(0.01, 0.05)
    variant_first = (np.arange(max_pairs) + int(rng.random() < 0.5)) % 2 == 1
    noise = block_noise(rng, kind, 2 * max_pairs, sd, 2 * first_stage)
    # Medians of 3 repetitions, mean over 4 prompts.
    noise = noise + rng.normal(0, rng.uniform(0.01, 0.06) * math.sqrt(0.45 / 4), 2 * max_pairs)
    first, second = noise[0::2], noise[1::2]
    effect = np.full(max_pairs, true_log)
    if kind == "speedup_ar":
        effect = effect + ar1(rng, max_pairs, 0.5, 0.03)
    elif kind == "walk":
        effect = effect + np.concatenate([[0.0], np.cumsum(rng.normal(0, 0.01, max_pairs - 1))])
    values = effect + np.where(variant_first, first - second, second - first)
    return values, np.where(variant_first, -1, 1).astype(np.int64), effect


@dataclass(frozen=True)
class TwoStageCell:
    """A two-stage cell's figures: coverage overall and for the jobs that stop earliest,
    how many those are, how often the target was met, the mean pairs run, and the coverage
    of the same pairs' interval made without the design (as ``speedup_by`` made it before
    issue 24)."""

    coverage: float
    earliest: float
    earliest_jobs: int
    met: float
    mean_pairs: float
    without_design: float


def two_stage_cell(kind: str, design: Design, jobs: int, seed: int) -> TwoStageCell:
    """``jobs`` two-stage jobs of one scenario through ``planned_pairs`` and ``estimate``."""
    rng = np.random.default_rng(seed)
    used = np.zeros(jobs, dtype=int)
    covered = np.zeros(jobs, dtype=bool)
    met = np.zeros(jobs, dtype=bool)
    plain = np.zeros(jobs, dtype=bool)
    truth = math.exp(TRUE_LOG)
    for job in range(jobs):
        values, orders = job_pairs(rng, kind, design.max_pairs, design.first_stage)
        pairs = planned_pairs(values, orders, design)
        used[job] = pairs
        found = estimate(values[:pairs], orders[:pairs], design).speedup
        covered[job] = found.low <= truth <= found.high
        met[job] = found.half_width <= design.target
        fixed = estimate(values[:pairs], orders[:pairs]).speedup
        plain[job] = fixed.low <= truth <= fixed.high
    earliest = used == used.min()
    return TwoStageCell(float(covered.mean()), float(covered[earliest].mean()),
                        int(earliest.sum()), float(met.mean()), float(used.mean()),
                        float(plain[earliest].mean()))


# --- runs frames: the drift test and acceptance read runs, not pair values --------------

PROMPTS, REPS = 4, 3


def runs_frame(rng: np.random.Generator, pairs: int, offsets: Floats,
               speedup: float = 0.2, run_sd: float = 0.02) -> pd.DataFrame:
    """A job's runs (4 prompts x 3 repetitions per block): log tok/s = the prompt's base +
    ``speedup`` for the variant + the block's offset + run noise of SD ``run_sd`` (2%, the
    audit's sim_misc); the first pair opens with either arm."""
    opens = int(rng.random() < 0.5)
    frame, variant, base = _runs_layout(pairs, opens)
    block = frame["block"].to_numpy()
    log_speed = (base + variant * speedup + offsets[block]
                 + rng.normal(0, run_sd, block.size))
    runs = frame.copy()
    runs["decode_tok_s"] = np.exp(log_speed)
    return runs


@lru_cache(maxsize=64)
def _runs_layout(pairs: int, opens: int) -> tuple[pd.DataFrame, npt.NDArray[np.bool_], Floats]:
    """What ``runs_frame`` makes of a job of ``pairs`` pairs whose first pair opens with the
    variant (``opens`` 1) or not, whatever its speeds: its frame (speeds 0; copy it), which
    runs are the variant's and each run's prompt base (log tok/s). Made once each, as a
    simulation makes thousands of such jobs."""
    pair = np.repeat(np.arange(pairs), 2 * PROMPTS * REPS)
    position = np.tile(np.repeat(np.arange(2), PROMPTS * REPS), pairs)
    prompt = np.tile(np.repeat(np.arange(PROMPTS), REPS), 2 * pairs)
    block = 2 * pair + position
    variant = (pair + position + opens) % 2 == 1
    base = np.log(np.array([30.0, 60.0, 90.0, 120.0]))[prompt]
    frame = pd.DataFrame({"arm": np.where(variant, "variant", "baseline"), "block": block,
                          "pair": pair, "position": position,
                          "prompt_id": np.char.add("p", prompt.astype(str)),
                          "repetition": np.tile(np.arange(REPS), 2 * PROMPTS * pairs),
                          "decode_tok_s": np.zeros(block.size)})
    for array in (variant, base):
        array.setflags(write=False)
    return frame, variant, base


def drift_cell(kind: str, jobs: int, seed: int, pairs: int = 8,
               total_change: float = 0.0) -> float:
    """The share of ``jobs`` jobs the drift test flags: a steady machine whose blocks are
    "iid", "t3" or "arPHI" autocorrelated, plus a linear drift of ``total_change`` (e.g.
    -0.10) from the first block to the last."""
    rng = np.random.default_rng(seed)
    blocks = 2 * pairs
    trend = math.log1p(total_change) * np.arange(blocks) / (blocks - 1)
    flags = 0
    for _ in range(jobs):
        sd = rng.uniform(0.01, 0.05)
        if kind == "iid":
            offsets = rng.normal(0, sd, blocks)
        elif kind == "t3":
            offsets = rng.standard_t(3, blocks) * sd / math.sqrt(3)
        else:
            offsets = ar1(rng, blocks, float(kind[2:]), sd)
        flags += drift(runs_frame(rng, pairs, offsets + trend)).flag
    return flags / jobs


def acceptance_cell(jobs: int, seed: int, prompts: int = 4, runs_per_prompt: int = 18
                    ) -> float:
    """How often ``acceptance``'s interval covers the prompt population's rate (0.6:
    prompts' rates from Beta(6, 4)) when every run of a prompt repeats its text
    (temperature 0), the audit's repeated-prompt scenario."""
    rng = np.random.default_rng(seed)
    covered = 0
    for _ in range(jobs):
        rate = rng.beta(6, 4, prompts)
        drafted = rng.integers(20, 60, prompts)
        accepted = rng.binomial(drafted, rate)
        runs = pd.DataFrame({
            "arm": "variant",
            "prompt_id": np.repeat([f"p{i}" for i in range(prompts)], runs_per_prompt),
            "spec_drafts": np.repeat(drafted, runs_per_prompt),
            "spec_drafted": np.repeat(drafted, runs_per_prompt),
            "spec_accepted": np.repeat(accepted, runs_per_prompt),
            "spec_accepted_per_pos": [None] * (prompts * runs_per_prompt)})
        found = acceptance(runs)
        covered += found.rate_low <= 0.6 <= found.rate_high
    return covered / jobs


@dataclass(frozen=True)
class DifferenceCell:
    """The difference test over rounds of ``jobs`` compared jobs: the false discovery rate
    (false calls over calls, 0 without calls, averaged), the share of rounds with any
    false call, and the power (true changes called over true changes)."""

    fdr: float
    any_false: float
    power: float


def _job_log(rng: np.random.Generator, true_log: float, design: Design
             ) -> tuple[float, float, int]:
    """A two-stage job of ``design`` (``steady``): its log speedup, standard error and df
    as its summary stores them."""
    values, orders = job_pairs(rng, "normal", design.max_pairs, design.first_stage)
    values = values - TRUE_LOG + true_log
    pairs = planned_pairs(values, orders, design)
    found = estimate(values[:pairs], orders[:pairs], design)
    return math.log(found.speedup.estimate), found.log_se, found.df


def difference_cell(rounds: int, seed: int, jobs: int = 20, changed: int = 0,
                    change: float = 0.05, design: Design = THREE_PERCENT) -> DifferenceCell:
    """``rounds`` comparisons of ``jobs`` jobs of ``design`` measured twice (A, then B),
    ``changed`` of them ``change`` faster in B, each called by ``difference`` and
    ``discoveries``."""
    rng = np.random.default_rng(seed)
    fdr = any_false = found = 0.0
    for _ in range(rounds):
        p_values = []
        for job in range(jobs):
            a = _job_log(rng, TRUE_LOG, design)
            b = _job_log(rng, TRUE_LOG + (math.log1p(change) if job < changed else 0.0),
                         design)
            p_values.append(difference(*a, *b).p_value)
        calls = discoveries(p_values)
        false = sum(calls[changed:])
        fdr += false / max(sum(calls), 1)
        any_false += false > 0
        found += sum(calls[:changed])
    return DifferenceCell(fdr / rounds, any_false / rounds,
                          found / (rounds * changed) if changed else math.nan)
