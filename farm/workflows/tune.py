"""A tune: a matrix's `tune:` space raced for its fastest setting (farm.stats.race,
docs/tune.md). Each round is a stored campaign, ``CAMPAIGN-rN``, of ordinary jobs (one per
candidate that runs in it, a fixed design of the round's pairs), so report, history and
share take them; a round whose jobs the store has finished is read, not run again, so the
same command resumes where an interrupted one stopped. How a round's jobs run (here, or on
the fleet) is passed in (``farm.workflows.tune_jobs``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from farm.errors import BenchmarkError, ConfigError
from farm.matrix.load import load_matrix
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.settings import Settings
from farm.stats.race import FIRST_ROUND, Evidence, RacePlan, RaceResult, Standing, grid_pairs, race

# The candidates and rounds' jobs: the matrix as the round names it, its jobs.
Pick = Callable[[Matrix, list[JobSpec]], tuple[Matrix, list[JobSpec]]]
# Runs a round's jobs (the matrix's path, the round's pick); returns nothing, raises on
# a job that failed.
RunRound = Callable[[Path, Pick], None]

METHOD = ("successive elimination with LUCB's stop; at each look Bonferroni t intervals "
          "on every deficit to the leader (crossover fits, variances shrunk toward the "
          "pooled one), one level at every look set by simulation")


def tune_matrix(path: Path) -> tuple[Matrix, list[JobSpec]]:
    """The matrix of a tune and its candidates (one job each, in the space's order)."""
    matrix, specs = load_matrix(path)
    if matrix.tune is None:
        raise ConfigError(f"{path}: no `tune:` section; `farm run` runs it as a matrix")
    if len(matrix.gpu_classes) > 1:
        raise ConfigError(f"{path}: gpu-classes: a tune races on one GPU class; give one")
    if len(specs) < 2:
        raise ConfigError(f"{path}: tune.space: {len(specs)} candidate; a race needs two or "
                          "more (a list sweeps a flag)")
    return matrix, specs


def is_tune(path: Path) -> bool:
    """Whether the matrix at ``path`` has a `tune:` section (`farm run` races it); a
    matrix that does not load is not (`farm run`'s check says why)."""
    from farm.matrix.yaml_file import read_yaml

    try:
        data = read_yaml(path)
    except ConfigError:
        return False
    return isinstance(data, dict) and data.get("tune") is not None


def race_plan(path: Path, matrix: Matrix, candidates: int) -> RacePlan:
    """The race a matrix's `tune:` asks for; ConfigError naming the key it cannot run."""
    assert matrix.tune is not None
    try:
        return RacePlan(candidates, epsilon=matrix.tune.epsilon,
                        max_pairs=matrix.tune.max_pairs, budget=matrix.tune.budget_pairs)
    except ValueError as exc:
        raise ConfigError(f"{path}: tune: {exc}") from exc


def label(spec: JobSpec) -> str:
    """A candidate's name: its swept flags (``tune[a=1,b=2]`` as ``a=1,b=2``)."""
    name = spec.variant.name
    return name[len("tune["):-1] if name.startswith("tune[") else name


def round_campaign(campaign: str, number: int) -> str:
    """The campaign of a tune's round ``number``."""
    return f"{campaign}-r{number}"


def round_pick(number: int, pairs: int, chosen: frozenset[int]) -> Pick:
    """Round ``number``'s matrix and jobs: the ``chosen`` candidates, ``pairs`` pairs each
    (a fixed design), in the round's own campaign."""
    def pick(matrix: Matrix, specs: list[JobSpec]) -> tuple[Matrix, list[JobSpec]]:
        changes = {"campaign": round_campaign(matrix.campaign, number), "pairs": pairs,
                   "max_pairs": pairs, "stop_rule": "fixed"}
        jobs = [JobSpec.model_validate({**spec.model_dump(mode="json"), **changes})
                for index, spec in enumerate(specs) if index in chosen]
        return matrix.model_copy(update=changes), jobs
    return pick


@dataclass
class _Rounds:
    """The rounds run so far: each candidate's rounds' campaigns and job keys."""

    path: Path
    matrix: Matrix
    specs: list[JobSpec]
    settings: Settings
    run_round: RunRound
    say: Callable[[str], None]
    number: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.keys: dict[int, list[tuple[str, str]]] = {i: [] for i in range(len(self.specs))}
        self.frames: dict[str, Any] = {}
        # Each candidate's valid pairs so far (a pair without every prompt's runs is not).
        self.valid: dict[int, int] = dict.fromkeys(range(len(self.specs)), 0)

    def __call__(self, wanted: Mapping[int, int]) -> dict[int, Evidence]:
        more = {i: n - self.valid[i] for i, n in wanted.items() if n > self.valid[i]}
        for pairs in sorted(set(more.values())):
            self.number += 1
            chosen = frozenset(i for i, n in more.items() if n == pairs)
            pick = round_pick(self.number, pairs, chosen)
            _, jobs = pick(self.matrix, self.specs)
            if not self._finished([job.job_key for job in jobs]):
                self.say(f"round {self.number}: {len(jobs)} candidates, {pairs} pairs each")
                self.run_round(self.path, pick)
            for index, job in zip(sorted(chosen), jobs, strict=True):
                self.keys[index].append((job.campaign, job.job_key))
        found = {i: self._evidence(i) for i in wanted}
        self.valid.update({i: e.values.size for i, e in found.items()})
        return found

    def _finished(self, keys: list[str]) -> bool:
        from farm.store.db import connected, table_names
        from farm.store.repo import stored_states

        with connected(self.settings.database_url) as engine:
            if "job" not in table_names(engine):
                return False
            states = stored_states(engine, keys)
        return all(states.get(key) == "done" for key in keys)

    def _evidence(self, index: int) -> Evidence:
        import numpy as np

        from farm.results.history import finished_job
        from farm.results.runs import runs_frame
        from farm.stats.speedup import pair_log_ratios, pair_orders
        from farm.store.db import connected

        values: list[float] = []
        orders: list[int] = []
        with connected(self.settings.database_url) as engine:
            for campaign, key in self.keys[index]:
                if campaign not in self.frames:
                    self.frames[campaign] = runs_frame(engine, campaign)
                    self.seconds += sum(done.seconds for done in (
                        finished_job(engine, k) for k in self.frames[campaign]["job_key"]
                        .unique()) if done is not None)
                frame = self.frames[campaign]
                if frame.empty:
                    continue
                runs = frame[frame["job_key"] == key]
                found = pair_log_ratios(runs)
                values += found.tolist()
                orders += pair_orders(runs).reindex(found.index).astype(int).tolist()
        return Evidence(np.array(values, dtype=float), np.array(orders, dtype=np.int64))


@dataclass(frozen=True)
class Tuned:
    """A finished tune: the matrix's candidates, the race's plan and result, each
    candidate's evidence (for the grid's cost), the seconds its jobs ran, its rounds."""

    campaign: str
    labels: list[str]
    plan: RacePlan
    result: RaceResult
    grid: float
    seconds: float
    rounds: int


def tune(path: Path, settings: Settings, run_round: RunRound,
         say: Callable[[str], None] = lambda _line: None) -> Tuned:
    """Race the matrix's candidates, each round run by ``run_round`` unless stored."""
    matrix, specs = tune_matrix(path)
    plan = race_plan(path, matrix, len(specs))
    rounds = _Rounds(path, matrix, specs, settings, run_round, say)
    evidence: dict[int, Evidence] = {}

    def measure(wanted: Mapping[int, int]) -> Mapping[int, Evidence]:
        found = rounds(wanted)
        evidence.update(found)
        return found

    def replan(first: RacePlan, spent: int) -> RacePlan:
        minutes = matrix.tune.budget_minutes if matrix.tune is not None else None
        if minutes is None or rounds.seconds <= 0:
            return first
        most = int(minutes * 60 / (rounds.seconds / spent))
        say(f"budget: {minutes:g} min is about {most} pairs at the first round's "
            f"{rounds.seconds / spent:.0f} s a pair")
        return replace(first, budget=max(most, spent))

    try:
        result = race(plan, measure, replan)
    except ValueError as exc:  # a round's jobs gave too few valid pairs to compare
        raise BenchmarkError(f"{matrix.campaign}: {exc}; `farm report "
                             f"{round_campaign(matrix.campaign, rounds.number)}` shows its "
                             "runs") from exc
    return Tuned(matrix.campaign, [label(spec) for spec in specs], plan, result,
                 grid_pairs(list(evidence.values())), rounds.seconds, rounds.number)


def _standing(standing: Standing, labels: list[str]) -> dict[str, Any]:
    return {"candidate": labels[standing.candidate], "pairs": standing.pairs,
            "speedup": standing.speedup.estimate, "low": _finite(standing.speedup.low),
            "high": _finite(standing.speedup.high), "vs_leader": standing.deficit,
            "vs_leader_low": standing.deficit_low, "vs_leader_high": standing.deficit_high}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def answer(tuned: Tuned) -> dict[str, Any]:
    """The tune's answer as plain data (``--format json``; the text renderers read it)."""
    result, labels = tuned.result, tuned.labels
    per_pair = tuned.seconds / result.spent if result.spent else 0.0
    return {
        "campaign": tuned.campaign, "candidates": len(labels), "epsilon": tuned.plan.epsilon,
        "look_level": tuned.plan.look_level, "method": METHOD, "stop": result.final.stop,
        "named": _standing(result.final.leader, labels),
        "survivors": [_standing(s, labels) for s in result.final.standings],
        "dropped": [{**_standing(d.standing, labels), "look": d.look, "spent": d.spent,
                     "leader": labels[d.leader]} for d in result.drops],
        "looks": result.looks, "rounds": tuned.rounds, "pairs": result.spent,
        "grid_pairs": round(tuned.grid, 1), "seconds": round(tuned.seconds, 1),
        "grid_seconds": round(tuned.grid * per_pair, 1),
        "round_campaigns": [round_campaign(tuned.campaign, n)
                            for n in range(1, tuned.rounds + 1)]}


def space(path: Path) -> dict[str, Any]:
    """A tune's space without running it (``--dry-run``): its candidates and plan."""
    matrix, specs = tune_matrix(path)
    plan = race_plan(path, matrix, len(specs))
    return {"campaign": matrix.campaign, "candidates": [label(spec) for spec in specs],
            "size": len(specs), "epsilon": plan.epsilon, "first_round": FIRST_ROUND,
            "first_round_pairs": plan.first_round_pairs, "most_pairs": plan.most_pairs,
            "grid_most_pairs": len(specs) * 12}
