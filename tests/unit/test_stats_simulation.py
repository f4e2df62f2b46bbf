"""Simulations with fixed seeds that measure the error rates farm.stats claims (docs/statistics.md,
"What the numbers mean"): the two-stage rule's coverage per scenario and for the jobs that
stop earliest, how often an assured plan meets its target, an A/A control, the drift test,
the agreement control, the acceptance interval and the per-slot acceptance test. 4,000
simulated jobs per cell (1,000 for the slot test), so a rate's standard error is about
0.0035 (0.007).

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np
import pandas as pd
import pytest

from farm.stats.acceptance import rate_interval
from farm.stats.agreement import agreement
from farm.stats.design import Design
from farm.stats.drift import drift
from farm.stats.speedup import estimate, pair_log_ratios
from farm.stats.traffic import SLOT_MARGIN, slot_acceptance
from farm.stats.twostage import planned_pairs

JOBS = 4000
DESIGN = Design(first_stage=4, max_pairs=12, target=0.03)  # the matrix defaults
PROMPTS, REPS = 4, 3


@dataclass(frozen=True)
class Scenario:
    """What the machine does to a job, in log units (0.05 ~ 5%)."""

    block_sd: tuple[float, float] = (0.01, 0.05)  # a server session's shared offset, drawn per job
    run_sd: tuple[float, float] = (0.01, 0.06)
    drift: tuple[float, float] = (0.0, 0.0)  # linear, per block, drawn per job
    thermal: float = 0.0  # slows toward this over the first blocks
    cold: float = 0.0  # the job's first block only
    carry: float = 0.0  # the first block of every pair
    slow_share: float = 0.0  # runs 30% slow (a background task)


SCENARIOS = {
    "no drift": Scenario(),
    "linear drift": Scenario(drift=(-0.01, 0.01)),
    "thermal drift": Scenario(thermal=0.08),
    "cold first block": Scenario(cold=0.05),
    "+3% carry-over": Scenario(carry=0.03),
    "block SD 0.05": Scenario(block_sd=(0.05, 0.05)),
    "5% of runs 30% slow": Scenario(slow_share=0.05),
    "20% of runs 30% slow": Scenario(slow_share=0.20),
    "mixed": Scenario(drift=(-0.01, 0.01), cold=0.05, carry=0.03, slow_share=0.05),
}


@dataclass(frozen=True)
class Simulated:
    """``log_speed[job, pair, position, prompt, rep]`` and which arm ran each block."""

    log_speed: np.ndarray
    variant: np.ndarray  # [job, pair, position], True where the variant ran
    ratio: np.ndarray

    def pair_values(self) -> tuple[np.ndarray, np.ndarray]:
        """Per job and pair, the mean over prompts of the log ratio of the arms' medians
        (what pair_log_ratios computes), and the pair's order (+1 AB, -1 BA)."""
        medians = np.median(self.log_speed, axis=-1)
        variant_first = self.variant[:, :, 0]
        first, second = medians[:, :, 0], medians[:, :, 1]
        log_ratio = np.where(variant_first[..., None], first - second, second - first)
        return log_ratio.mean(axis=-1), np.where(variant_first, -1, 1)

    def runs(self, job: int) -> pd.DataFrame:
        """One job's runs as the store's tidy frame."""
        runs = _runs_layout(self.log_speed.shape[1], bool(self.variant[job, 0, 0])).copy()
        runs["job_id"] = job
        runs["decode_tok_s"] = np.exp(self.log_speed[job].reshape(-1))
        return runs


@lru_cache(maxsize=8)
def _runs_layout(pairs: int, opens_variant: bool) -> pd.DataFrame:
    """``Simulated.runs``' frame of a job of ``pairs`` pairs, whatever its number and
    speeds (0): the same for every job whose first pair opens with the same arm (copy it)."""
    pair, position, prompt, rep = np.indices((pairs, 2, PROMPTS, REPS)).reshape(4, -1)
    variant = (pair + position + opens_variant) % 2 == 1
    return pd.DataFrame({
        "job_id": 0, "arm": np.where(variant, "variant", "baseline"),
        "block": 2 * pair + position, "pair": pair, "position": position,
        "prompt_id": np.char.add("p", prompt.astype(str)), "repetition": rep,
        "decode_tok_s": np.zeros(pair.size)})


def simulate(rng: np.random.Generator, scenario: Scenario, ratio: np.ndarray,
             pairs: int = DESIGN.max_pairs) -> Simulated:
    """Jobs run as the executor runs them: the job's coin picks the arm that opens, pairs
    alternate; log tok/s = prompt speed + (variant: log ratio + prompt deviation, zero mean
    over the job's prompts) + block offset + machine effects + run noise."""
    jobs = len(ratio)
    opens_variant = rng.random(jobs) < 0.5
    pair = np.arange(pairs)[None, :, None]
    position = np.arange(2)[None, None, :]
    variant = (pair + position + opens_variant[:, None, None]) % 2 == 1
    block = 2 * pair + position
    deviation = rng.normal(0.0, 0.1, (jobs, PROMPTS))
    deviation -= deviation.mean(axis=1, keepdims=True)
    block_sd = rng.uniform(*scenario.block_sd, jobs)[:, None, None]
    machine = (rng.normal(0.0, 1.0, (jobs, pairs, 2)) * block_sd
               + rng.uniform(*scenario.drift, jobs)[:, None, None] * block
               - scenario.thermal * (1.0 - np.exp(-block / 3.0))
               - scenario.cold * (block == 0) + scenario.carry * (position == 0))
    shape = (jobs, pairs, 2, PROMPTS, REPS)
    run_sd = rng.uniform(*scenario.run_sd, jobs)[:, None, None, None, None]
    log_speed = (rng.uniform(math.log(20), math.log(200), (jobs, 1, 1, PROMPTS, 1))
                 + variant[..., None, None] * (np.log(ratio)[:, None, None, None, None]
                                               + deviation[:, None, None, :, None])
                 + machine[..., None, None] + rng.normal(0.0, 1.0, shape) * run_sd
                 + np.log(0.7) * (rng.random(shape) < scenario.slow_share))
    return Simulated(log_speed, variant, ratio)


def test_the_simulated_pair_values_are_what_pair_log_ratios_computes() -> None:
    simulated = simulate(np.random.default_rng(1), Scenario(), np.array([1.3, 0.9]), pairs=4)
    values, orders = simulated.pair_values()
    for job in range(2):
        runs = simulated.runs(job)
        assert pair_log_ratios(runs).to_numpy() == pytest.approx(values[job], abs=1e-12)
        first = runs[runs["position"] == 0].groupby("pair")["arm"].first()
        assert ((first == "baseline") == (orders[job] == 1)).all()


def _run_two_stage(values: np.ndarray, orders: np.ndarray,
                   ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each job as the executor runs it: planned pairs, then the job's interval."""
    used, covered = np.zeros(len(ratio), dtype=int), np.zeros(len(ratio), dtype=bool)
    for job in range(len(ratio)):
        used[job] = planned_pairs(values[job], orders[job], DESIGN)
        interval = estimate(values[job, :used[job]], orders[job, :used[job]], DESIGN).speedup
        covered[job] = interval.low <= ratio[job] <= interval.high
    return used, covered


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_stage_jobs_cover_in_every_scenario_and_when_they_stop_earliest(name: str) -> None:
    rng = np.random.default_rng(20261130 + list(SCENARIOS).index(name))
    ratio = np.exp(rng.uniform(math.log(0.8), math.log(2.0), JOBS))
    values, orders = simulate(rng, SCENARIOS[name], ratio).pair_values()
    used, covered = _run_two_stage(values, orders, ratio)
    earliest = used == used.min()
    print(f"{name}: coverage {covered.mean():.3f}, earliest ({used.min()} pairs, "
          f"{earliest.mean():.0%} of jobs) {covered[earliest].mean():.3f}, "
          f"mean pairs {used.mean():.1f}")
    assert 0.93 <= covered.mean() <= 0.97
    # Fewer jobs plan the least pairs since the plan allows for the autocorrelation factor
    # (issue 38): 84 of 4,000 in the 20%-slow scenario.
    assert covered[earliest].mean() >= 0.90 and earliest.sum() >= 75


# The design a verification matrix uses (farm.results.recommend), with room to plan freely.
ASSURED = Design(first_stage=12, max_pairs=100, target=0.025, assurance=0.9)


def test_an_assured_plan_meets_its_target_as_often_as_it_promises() -> None:
    rng = np.random.default_rng(29)
    ratio = np.exp(rng.uniform(math.log(0.8), math.log(2.0), JOBS))
    values, orders = simulate(rng, Scenario(), ratio, pairs=ASSURED.max_pairs).pair_values()
    point = Design(ASSURED.first_stage, ASSURED.max_pairs, ASSURED.target)
    met, pairs, covered = {}, {}, {}
    for name, design in (("assured", ASSURED), ("point", point)):
        used = np.array([planned_pairs(values[job], orders[job], design) for job in range(JOBS)])
        found = [estimate(values[job, :used[job]], orders[job, :used[job]], design).speedup
                 for job in range(JOBS)]
        half = np.array([f.half_width for f in found])
        met[name], pairs[name] = float((half <= design.target).mean()), float(used.mean())
        covered[name] = float(np.mean([f.low <= r <= f.high for f, r in zip(found, ratio,
                                                                             strict=True)]))
        print(f"{name}: within ±{design.target:.1%} {met[name]:.3f}, coverage "
              f"{covered[name]:.3f}, mean pairs {pairs[name]:.1f}, at the maximum "
              f"{(used == design.max_pairs).mean():.3f}")
    # The claim (issue 24): met in at least p - 0.05 of steady jobs. The estimate and its
    # spread come from the second stage alone, scaled for autocorrelation: 0.869 here.
    assert 0.85 <= met["assured"] <= 0.97
    assert met["point"] <= 0.7  # planning from the first stage's spread as if exact
    assert 0.93 <= covered["assured"] <= 0.97


def test_an_a_a_control_covers_one() -> None:
    rng = np.random.default_rng(11)
    ratio = np.ones(JOBS)
    values, orders = simulate(rng, Scenario(), ratio).pair_values()
    used, covered = _run_two_stage(values, orders, ratio)
    print(f"A/A: coverage of 1.0 {covered.mean():.3f}, mean pairs {used.mean():.1f}")
    assert 0.93 <= covered.mean() <= 0.97


def _drift_flags(rng: np.random.Generator, scenario: Scenario, pairs: int) -> np.ndarray:
    simulated = simulate(rng, scenario, np.exp(rng.uniform(0.0, 0.5, JOBS)), pairs=pairs)
    return np.array([drift(simulated.runs(job)).flag for job in range(JOBS)])


def test_drift_test_false_alarms_on_a_steady_machine_and_power_for_a_real_drift() -> None:
    rng = np.random.default_rng(5)
    # Steady, even with a carry-over: its own term in the fit, not drift.
    steady = _drift_flags(rng, Scenario(carry=0.03), DESIGN.first_stage + 4).mean()
    # -10% over the job's 16 blocks, the fewest a two-stage job runs.
    per_block = math.log(0.9) / 15
    drifting = _drift_flags(rng, Scenario(drift=(per_block, per_block)),
                            DESIGN.first_stage + 4).mean()
    print(f"drift flag: false positives {steady:.3f}, power at -10% {drifting:.3f}")
    # GLS for AR(1) blocks with a critical value that allows for correlations up to 0.8
    # keeps the false alarms under 5% when blocks are autocorrelated
    # (tests/unit/test_stats_drift_ar.py), at a cost in power: 0.453 here for -10% over 16
    # blocks (0.59 with a rho floor of 0.4, which alarmed 0.11 at AR(1) 0.8; 0.89 with
    # least squares, which alarmed 0.197 of steady jobs at AR(1) 0.5).
    assert steady <= 0.06 and drifting >= 0.4


# --- Agreement -----------------------------------------------------------------------------

TOKENS = 128


def _outputs(rng: np.random.Generator, flips: float, count: int) -> np.ndarray:
    """Where each of ``count`` greedy outputs first leaves the canonical text (TOKENS: never),
    with a benign flip rate per token."""
    if flips == 0:
        return np.full(count, TOKENS)
    return np.minimum(rng.geometric(flips, count) - 1, TOKENS)


# Each prompt's canonical greedy output, as token ids.
CANONICAL = [list(range(1000 * prompt, 1000 * prompt + TOKENS)) for prompt in range(PROMPTS)]


@cache
def _own_text(row: int) -> list[int]:
    """The text of a job's ``row``-th output after it leaves the canonical one: ids no
    other output has (the first ``TOKENS - at`` of them follow a departure at ``at``)."""
    own = -1 - row * TOKENS
    return list(range(own, own - TOKENS, -1))


@lru_cache(maxsize=4)
def _agreement_layout(pairs: int) -> tuple[dict[str, Any], list[str], list[int]]:
    """A job's columns but its tokens (AB then BA pairs, prompts, then repetitions, in a
    block), each block's arm and each run's prompt: the same for every job (read-only)."""
    columns: dict[str, list[object]] = {name: [] for name in (
        "arm", "block", "pair", "prompt_id", "repetition", "text")}
    arms: list[str] = []
    prompts: list[int] = []
    for pair in range(pairs):
        for position, arm in enumerate(("baseline", "variant") if pair % 2 == 0
                                       else ("variant", "baseline")):
            arms.append(arm)
            for prompt in range(PROMPTS):
                for rep in range(REPS):
                    prompts.append(prompt)
                    for name, value in (("arm", arm), ("block", 2 * pair + position),
                                        ("pair", pair), ("prompt_id", f"p{prompt}"),
                                        ("repetition", rep), ("text", "")):
                        columns[name].append(value)
    arrays = {name: np.array(values, dtype=object if name in ("arm", "prompt_id", "text")
                             else np.int64) for name, values in columns.items()}
    for array in arrays.values():
        array.setflags(write=False)
    return arrays, arms, prompts


def _agreement_job(rng: np.random.Generator, *, baseline_flips: float, variant_flips: float,
                   early_bug: bool, pairs: int = 8) -> pd.DataFrame:
    columns, arms, prompts = _agreement_layout(pairs)
    at: list[int] = []  # where each run's output leaves the canonical one
    for arm in arms:
        flips = variant_flips if arm == "variant" else baseline_flips
        parts = _outputs(rng, flips, PROMPTS * REPS).tolist()
        # The bug: prompt 0's variant output (the block's first runs) changes in its first
        # 16 tokens in 70% of the runs.
        for rep in range(REPS if early_bug and arm == "variant" else 0):
            if rng.random() < 0.7:
                parts[rep] = min(parts[rep], int(rng.integers(0, 16)))
        at += parts
    # After it leaves, a text of its own.
    tokens = [CANONICAL[prompt] if where == TOKENS
              else CANONICAL[prompt][:where] + _own_text(row)[:TOKENS - where]
              for row, (prompt, where) in enumerate(zip(prompts, at, strict=True))]
    return pd.DataFrame(columns | {"tokens": tokens})


@pytest.mark.parametrize(("baseline_flips", "variant_flips", "early_bug", "low", "high"), [
    (0.002, 0.002, False, 0.0, 0.06),  # benign flips in both arms
    (0.0, 0.002, False, 0.0, 0.06),  # a deterministic baseline, benign flips in the variant
    (0.002, 0.002, True, 0.8, 1.0),  # an early divergence on one prompt
    (0.0, 0.0, True, 0.8, 1.0),  # ... against a deterministic baseline
], ids=["benign", "deterministic-baseline", "early-bug", "early-bug-deterministic"])
def test_agreement_suspect_rate(baseline_flips: float, variant_flips: float, early_bug: bool,
                                low: float, high: float) -> None:
    rng = np.random.default_rng(int(baseline_flips * 1e4) + int(variant_flips * 1e3) + early_bug)
    rate = np.mean([agreement(_agreement_job(rng, baseline_flips=baseline_flips,
                                             variant_flips=variant_flips,
                                             early_bug=early_bug)).suspect
                    for _ in range(JOBS)])
    print(f"agreement suspect rate: {rate:.3f}")
    assert low <= rate <= high


# --- Acceptance ----------------------------------------------------------------------------


def test_acceptance_interval_covers_with_runs_as_clusters() -> None:
    rng = np.random.default_rng(3)
    runs = 24  # the variant's runs in a short job
    # Runs differ: each has its own acceptance (its text), drawn around 0.6.
    per_run = rng.beta(6.0, 4.0, (JOBS, runs))
    drafted = rng.integers(20, 60, (JOBS, runs))
    accepted = rng.binomial(drafted, per_run)
    truth = 0.6  # E[accepted] / E[drafted], drafts independent of the rate
    bounds = np.array([rate_interval(a, d) for a, d in zip(accepted, drafted, strict=True)])
    coverage = np.mean((bounds[:, 0] <= truth) & (truth <= bounds[:, 1]))
    # A binomial interval over the pooled drafts, for comparison: far too narrow.
    pooled = accepted.sum(axis=1) / drafted.sum(axis=1)
    margin = 1.96 * np.sqrt(pooled * (1 - pooled) / drafted.sum(axis=1))
    binomial = np.mean(np.abs(pooled - truth) <= margin)
    print(f"acceptance interval: coverage {coverage:.3f} (binomial over drafts {binomial:.3f})")
    assert 0.93 <= coverage <= 0.97 and binomial < 0.9


# --- Per-slot acceptance ---------------------------------------------------------------------


def _slot_jobs(rng: np.random.Generator, gaps: list[float], runs: int = 12) -> list[pd.DataFrame]:
    """Simulated variants' streams of 4-slot jobs: per run one prompt (its own acceptance,
    shared by every slot), each slot's rate shifted by ``gaps`` and drafts binomial."""
    slots = len(gaps)
    frames = []
    for _ in range(JOBS // 4):
        prompt = rng.beta(7.0, 3.0, runs)  # the run's text: 0.7 on average
        rates = np.clip(prompt[:, None] + np.asarray(gaps)[None, :], 0.0, 1.0)
        drafted = rng.integers(30, 90, (runs, slots))
        accepted = rng.binomial(drafted, rates)
        frames.append(pd.DataFrame({
            "arm": "variant", "block": np.repeat(np.arange(runs) // 2, slots),
            "prompt_id": "p", "repetition": np.repeat(np.arange(runs) % 2, slots),
            "slot": np.tile(np.arange(slots), runs), "draft_n": drafted.ravel(),
            "draft_accepted": accepted.ravel()}))
    return frames


def test_the_slot_test_false_alarms_at_most_5_percent_and_finds_a_dead_slot() -> None:
    rng = np.random.default_rng(11)
    equal = np.mean([bool(slot_acceptance(job).low) for job in _slot_jobs(rng, [0.0] * 4)])
    # At the margin: slot 3 is exactly 5 points below, the most the test lets pass.
    margin = [0.0, 0.0, 0.0, -SLOT_MARGIN]
    boundary = np.mean([bool(slot_acceptance(job).low) for job in _slot_jobs(rng, margin)])
    # The fork's bug: every slot but 0 at about 3%.
    dead = [slot_acceptance(job).low for job in _slot_jobs(rng, [0.0, -0.67, -0.67, -0.67])]
    # One slot 20 points low: found, and only that one.
    low = [slot_acceptance(job).low for job in _slot_jobs(rng, [0.0, 0.0, -0.2, 0.0])]
    found = np.mean([flagged == [2] for flagged in low])
    print(f"slot test: false alarms {equal:.3f} (equal slots), {boundary:.3f} (at the "
          f"margin); finds slots 1-3 dead {np.mean([f == [1, 2, 3] for f in dead]):.3f}, "
          f"one slot 20 points low {found:.3f}")
    assert equal <= 0.01 and boundary <= 0.05
    assert np.mean([flagged == [1, 2, 3] for flagged in dead]) >= 0.99 and found >= 0.9


def test_the_slot_test_needs_three_runs_and_reads_rates_per_slot() -> None:
    frame = pd.DataFrame({"arm": "variant", "block": [0, 0, 0, 0], "prompt_id": "p",
                          "repetition": [0, 0, 1, 1], "slot": [0, 1, 0, 1],
                          "draft_n": [10, 10, 10, 0], "draft_accepted": [8, 1, 6, 0]})
    check = slot_acceptance(frame)
    assert check.rates == {0: 0.7, 1: 0.1} and check.low == [] and check.runs == 1
