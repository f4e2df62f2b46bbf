"""``farm history``: the finished jobs of one or more comparable keys (a matrix's, or one
given), every build they ran on in commit order, each series with its interval, and the
changes between consecutive builds (``farm.stats.changes``).

A build is the commit the job's baseline ran (a source build's, from its spec; else the
runs' ``build_commit``; else the build's name). Builds are ordered by llama.cpp's build
number (what ``--version`` prints: the commit count, so commit order along one branch),
then by when their first run started. Where a key ran more than once on one build, the
latest job stands for it, whatever its campaign: the campaign goes with the job and each
of its points, so a report says where each figure comes from.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
from pydantic import ValidationError
from sqlalchemy import Engine, select

from farm.errors import ConfigError
from farm.matrix.flags import varying_text
from farm.matrix.spec import JobSpec
from farm.stats.changes import PAIRED_COLUMNS, POINT_COLUMNS, describe, find_changes
from farm.stats.clock import on_client_clock
from farm.stats.difference import ratio_p_value
from farm.stats.history import (
    BASELINE,
    VARIANT,
    Estimate,
    cross_series,
    job_series,
    series_label,
    series_order,
)
from farm.store.models import Campaign, Job, JobState, Run
from farm.summary import JobSummary, SummaryError, read_summary
from farm.versions import parse_version

# What the series read of each run (farm.stats.history.block_values), and the build's.
_RUN_COLUMNS = ("job_id", "arm", "block", "pair", "decode_tok_s", "client_decode_tok_s",
                "generated_tokens", "spec_drafts", "spec_accepted", "spec_accepted_per_pos",
                "spec_draft_ms", "spec_accept_ms", "build_commit", "server_version",
                "started_at")
BUILD_COLUMNS = ["order", "build", "commit", "build_number", "build_name", "first_run"]


@dataclass(frozen=True)
class History:
    """A history: its builds in order, its jobs (one per key and build, with the campaign
    each came from), each series' point per build with its interval and campaign, the
    changes found and a sentence per transition."""

    builds: pd.DataFrame
    jobs: pd.DataFrame
    points: pd.DataFrame
    changes: pd.DataFrame
    described: pd.DataFrame


def _jobs(engine: Engine, keys: Sequence[str]) -> list[dict[str, Any]]:
    query = (select(Job.id, Job.comparable_key, Job.spec, Job.summary, Job.model_name,
                    Job.variant_name, Job.build_name, Job.varying, Campaign.name.label(
                        "campaign"))
             .join(Campaign).where(Job.comparable_key.in_(list(keys)),
                                   Job.state == JobState.DONE.value)
             .order_by(Job.id))
    with engine.connect() as connection:
        return [dict(row) for row in connection.execute(query).mappings()]


def _runs(engine: Engine, job_ids: list[int]) -> pd.DataFrame:
    query = (select(*(getattr(Run, name) for name in _RUN_COLUMNS))
             .where(Run.job_id.in_(job_ids)).order_by(Run.job_id, Run.block, Run.id))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    return pd.DataFrame([dict(row) for row in rows], columns=list(_RUN_COLUMNS))


def _spec(spec: dict[str, Any]) -> JobSpec | None:
    """A stored spec as today's model reads it (None for one it no longer reads)."""
    try:
        return JobSpec.model_validate(spec)
    except ValidationError:
        return None


def _spec_commit(spec: dict[str, Any]) -> str | None:
    read = _spec(spec)
    source = read.build.source if read is not None else None
    return source.commit if source is not None else None


def _build(job: dict[str, Any], runs: pd.DataFrame) -> dict[str, Any]:
    """The build a job's baseline ran: commit, build number, first run."""
    baseline = runs[runs["arm"] == "baseline"]
    commits = Counter(commit for commit in baseline["build_commit"] if commit)
    commit = _spec_commit(job["spec"]) or (commits.most_common(1)[0][0] if commits else None)
    numbers = [number for number, _ in map(parse_version, baseline["server_version"])
               if number is not None]
    first: datetime | None = baseline["started_at"].min() if not baseline.empty else None
    return {"build": commit[:12] if commit else job["build_name"], "commit": commit,
            "build_number": max(numbers) if numbers else None,
            "build_name": job["build_name"], "first_run": first}


def _label(job: dict[str, Any], kind: str) -> str:
    parts = [job["model_name"], job["variant_name"], varying_text(job["varying"] or {})]
    label = " · ".join(part for part in parts if part)
    return f"{label} ({kind})" if kind != "variant" else label


def _ordered_builds(builds: pd.DataFrame) -> pd.DataFrame:
    """One row per build, in commit order (build number, then first run), ``order`` 0..n-1."""
    first = builds.groupby("build", sort=False).agg(
        commit=("commit", "first"), build_number=("build_number", "max"),
        build_name=("build_name", "first"), first_run=("first_run", "min")).reset_index()
    first["_number"] = first["build_number"].astype(float).fillna(math.inf)
    first = first.sort_values(["_number", "first_run"], kind="stable").drop(columns="_number")
    first.insert(0, "order", range(len(first)))
    return first.reset_index(drop=True)[BUILD_COLUMNS]


def _summary(job: dict[str, Any]) -> JobSummary | None:
    try:
        return read_summary(job["summary"])
    except SummaryError as exc:
        raise ConfigError(f"job {job['id']}: {exc}") from exc


def _timed(runs: pd.DataFrame, summary: JobSummary | None) -> pd.DataFrame:
    """A job's runs with its decode speeds by the clock its summary took them from: the
    client's for a job on a commit's build (``farm.stats.clock``), else the server's."""
    return on_client_clock(runs) if summary and summary.speed_clock == "client" else runs


def _series(runs: pd.DataFrame, summary: JobSummary | None) -> dict[str, Estimate]:
    """A job's series: the speedup as its summary keeps it, the others from its runs (on
    the summary's clock)."""
    if summary is None:
        return job_series(runs, math.nan, math.nan, math.nan)
    return job_series(_timed(runs, summary), _number(summary.speedup),
                      _number(summary.log_se), _number(summary.df))


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _paired(engine: Engine, specs: Mapping[str, dict[str, Any]]) -> pd.DataFrame:
    """Changes measured in one job across two builds (``JobSpec.cross_build``, ``farm track
    --paired``): such a job's speedup, the newer commit over the older, is the change of
    the tok/s series of every history job with that arm. ``specs``: one stored spec per
    comparable key of the history."""
    wanted: dict[str, list[tuple[str, str]]] = {}
    for key, stored in specs.items():
        spec = _spec(stored)
        if spec is None:
            continue
        wanted.setdefault(spec.cross_key("baseline"), []).append((key, BASELINE))
        wanted.setdefault(spec.cross_key("variant"), []).append((key, VARIANT))
    found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for job in _jobs(engine, list(wanted)):
        spec, summary = _spec(job["spec"]), _summary(job)
        if spec is None or summary is None or summary.speedup is None or not spec.cross_build:
            continue
        older, newer = (arm.build.source.commit[:12] for arm in (spec.baseline, spec.variant)
                        if arm.build.source is not None)
        speedup, log_se, df = float(summary.speedup), _number(summary.log_se), _number(
            summary.df)
        for key, series in wanted[job["comparable_key"]]:
            # Later jobs across the same two builds replace earlier ones.
            found[key, series, older, newer] = {
                "key": key, "series": series, "build_a": older, "build_b": newer,
                "change": speedup, "change_low": _number(summary.ci_low),
                "change_high": _number(summary.ci_high),
                "p_value": ratio_p_value(math.log(speedup), log_se, df)}
    return pd.DataFrame(list(found.values()), columns=list(PAIRED_COLUMNS))


@dataclass(frozen=True)
class JobSeries:
    """One finished job's series (``job_series``), for a job across builds the newer
    build's over the older's (``cross_series``: none for another job), and what it cost:
    pairs, seconds."""

    series: dict[str, Estimate]
    across: dict[str, Estimate]
    pairs: int
    seconds: float


def finished_job(engine: Engine, job_key: str) -> JobSeries | None:
    """The series of the finished job with this ``job_key`` (None if it has not finished)."""
    query = (select(Job.id, Job.spec, Job.summary, Job.pairs, Job.started_at,
                    Job.finished_at)
             .where(Job.job_key == job_key, Job.state == JobState.DONE.value)
             .order_by(Job.id.desc()).limit(1))
    with engine.connect() as connection:
        found = connection.execute(query).mappings().first()
    if found is None:
        return None
    job = dict(found)
    runs, spec, summary = _runs(engine, [job["id"]]), _spec(job["spec"]), _summary(job)
    return JobSeries(_series(runs, summary),
                     cross_series(_timed(runs, summary))
                     if spec is not None and spec.cross_build else {},
                     job["pairs"] or 0, _seconds(job["started_at"], job["finished_at"]))


def _seconds(started: datetime | None, finished: datetime | None) -> float:
    """A job's seconds from start to finish (NaN without both)."""
    return float((finished - started).total_seconds()) if started and finished else math.nan


def last_job_seconds(engine: Engine, comparable_key: str) -> float | None:
    """How long the latest finished job of ``comparable_key`` ran (None: none has)."""
    query = (select(Job.started_at, Job.finished_at)
             .where(Job.comparable_key == comparable_key, Job.state == JobState.DONE.value,
                    Job.started_at.is_not(None), Job.finished_at.is_not(None))
             .order_by(Job.id.desc()).limit(1))
    with engine.connect() as connection:
        found = connection.execute(query).first()
    return None if found is None else _seconds(found.started_at, found.finished_at)


def _per_build(engine: Engine, keys: Sequence[str]
               ) -> tuple[dict[tuple[str, str], dict[str, Any]], pd.DataFrame]:
    """The latest finished job of each comparable key on each build (with its runs and
    build), and the builds in commit order (``BUILD_COLUMNS``)."""
    found = _jobs(engine, keys)
    if not found:
        raise ConfigError("no finished job has these comparable keys: run the matrix first "
                          "(`farm run`, `farm submit` or `farm track`), or give a key "
                          "`farm compare` shows")
    runs = _runs(engine, [job["id"] for job in found])
    by_job = {job_id: frame for job_id, frame in runs.groupby("job_id")}
    empty = runs.iloc[0:0]
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for job in found:
        job_runs = by_job.get(job["id"], empty)
        # Later jobs replace earlier ones on the same key and build.
        made = _build(job, job_runs)
        jobs[job["comparable_key"], made["build"]] = {"job": job, "runs": job_runs, **made}
    return jobs, _ordered_builds(pd.DataFrame([{name: entry[name] for name in BUILD_COLUMNS[1:]}
                                               for entry in jobs.values()]))


def tracked_builds(engine: Engine, keys: Sequence[str]) -> pd.DataFrame:
    """The builds finished jobs of these comparable keys ran on, in commit order
    (``BUILD_COLUMNS``), without their series (``farm track --paired``)."""
    return _per_build(engine, keys)[1]


def history(engine: Engine, keys: Sequence[str]) -> History:
    """The history of the jobs with these comparable keys (``job.comparable_key``): their
    finished jobs' series per build and the changes between consecutive builds."""
    jobs, builds = _per_build(engine, keys)
    order = dict(zip(builds["build"], builds["order"], strict=True))
    # The order builds were tracked in (their first runs): the history's running calls
    # follow it (farm.stats.changes).
    tracked = dict(zip(builds.sort_values(["first_run", "order"], kind="stable")["build"],
                       range(len(builds)), strict=True))
    points, listed = [], []
    for (key, build), entry in jobs.items():
        summary = _summary(entry["job"])
        kind = (summary.kind if summary and summary.kind else None) or "variant"
        listed.append({"key": key, "label": _label(entry["job"], kind), "kind": kind,
                       "build": build, "order": order[build],
                       "campaign": entry["job"]["campaign"], "job_id": entry["job"]["id"]})
        points += [{"key": key, "series": series, "series_label": series_label(series),
                    "order": order[build], "tracked": tracked[build], "build": build,
                    "value": estimate.value,
                    "low": estimate.low, "high": estimate.high, "log_se": estimate.log_se,
                    "df": estimate.df, "blocks": estimate.blocks,
                    "campaign": entry["job"]["campaign"]}
                   for series, estimate in _series(entry["runs"], summary).items()]
    frame = pd.DataFrame(points, columns=[*POINT_COLUMNS, "tracked", "series_label", "low",
                                         "high", "blocks", "campaign"])
    frame = frame.assign(rank=frame["series"].map(series_order)).sort_values(
        ["key", "rank", "order"]).drop(columns="rank").reset_index(drop=True)
    # Every build of a key ran the same arms: one spec a key finds its paired jobs.
    changes = find_changes(frame, paired=_paired(engine, {
        key: entry["job"]["spec"] for (key, _), entry in jobs.items()}))
    changes.insert(2, "series_label", changes["series"].map(series_label))
    return History(builds, pd.DataFrame(listed).sort_values(["label", "order"]),
                   frame, changes, describe(changes))
