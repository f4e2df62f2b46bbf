"""The reports' loaders: the store opened (the embedded one migrated in place), the campaign
found (default: the latest), and what ``farm report``, ``compare``, ``curve``,
``recommend``, ``export`` and ``history`` show loaded as frames and typed results, for
``farm.cli`` to render; and the arms' measured costs that ``farm run``'s estimates read.

Each loads what it needs where it is used: ``farm report --format json`` prints its rows
without pandas, numpy or yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.errors import ConfigError
from farm.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd
    from sqlalchemy import Engine

    from farm.matrix.spec import JobSpec
    from farm.results.history import History
    from farm.results.printed import Printed
    from farm.results.rows import JobRows, Row
    from farm.results.runs import ArmCost


@dataclass(frozen=True)
class Recommending:
    """A campaign's ``farm recommend`` picks, its candidates and the engine curve's points
    they used."""

    chosen: pd.DataFrame
    candidates: pd.DataFrame
    points: pd.DataFrame


@dataclass(frozen=True)
class CampaignReport:
    """``farm report``'s campaign (None: every campaign), the report kept for it (None:
    none asked for, or a store that keeps none; a body: print that, nothing else was
    loaded), its rows, and for a page or per category its runs, job specs and picks."""

    campaign: str | None
    printed: Printed | None
    rows: JobRows | None = None
    runs: pd.DataFrame | None = None
    specs: Mapping[str, JobSpec | None] | None = None
    recommending: Recommending | None = None


def campaign_report(settings: Settings, campaign: str | None, all_campaigns: bool, *,
                    kept: bool, runs: bool, draws: bool) -> CampaignReport:
    """The rows of ``campaign`` (default the latest; every one with ``all_campaigns``):
    with ``kept``, those kept with their jobs, or the whole report kept at today's stamp;
    with ``runs``, the runs and job specs too; with ``draws``, those and the picks."""
    from farm.results.printed import printed_report
    from farm.results.rows import report_rows
    from farm.results.runs import job_specs, runs_frame
    from farm.store.campaigns import latest_campaign
    from farm.store.db import open_store

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        printed = printed_report(engine, name) if kept else None
        if printed is not None and printed.body is not None:
            return CampaignReport(name, printed)
        found = report_rows(engine, name, kept=kept)
        frame = runs_frame(engine, name) if runs or draws else None
        # Each spec read once: the page wants the designs and the draft lengths of them.
        specs = job_specs(engine, name) if frame is not None else {}
        picks = _recommending(engine, name) if draws else None
    return CampaignReport(name, printed, found, frame, specs, picks)


def job_rows_of(settings: Settings, campaign: str) -> list[Row]:
    """One row per job of ``campaign`` (``farm ab``'s answer reads its job's)."""
    from farm.results.rows import job_rows
    from farm.store.db import open_store

    with open_store(settings) as engine:
        return job_rows(engine, campaign)


def measured_costs(settings: Settings) -> dict[tuple[str, str], ArmCost]:
    """``arm_costs`` of the store, or nothing where there is no store yet (a dry run writes
    nothing, not even an empty database)."""
    from sqlalchemy.engine import make_url

    from farm.results.runs import arm_costs
    from farm.store.db import connected, table_names

    database = make_url(settings.database_url).database
    if settings.embedded and not (database and Path(database).exists()):
        return {}
    with connected(settings.database_url) as engine:
        return arm_costs(engine) if "run" in table_names(engine) else {}


def keep_report(settings: Settings, printed: Printed, body: bytes) -> None:
    """Keep ``body``, the report just printed for ``printed``'s scope, for the next one."""
    from farm.results.printed import keep_printed
    from farm.store.db import open_store

    with open_store(settings) as engine:
        keep_printed(engine, printed, body)


def _recommending(engine: Engine, campaign: str | None) -> Recommending | None:
    if campaign is None:
        return None
    from farm.results.recommend import predictions, recommendations, store_curve_points

    points = store_curve_points(engine)
    candidates = predictions(engine, campaign, points)
    if candidates.empty:
        return None
    used = points.merge(candidates[["model", "gpu_class", "build", "spec_type"]]
                        .drop_duplicates(), on=["model", "gpu_class", "build", "spec_type"])
    return Recommending(recommendations(candidates), candidates, used)


def comparison(settings: Settings, a: str, b: str, *, build_a: str | None,
               build_b: str | None) -> pd.DataFrame:
    """``farm compare``: the matching jobs of campaigns (or builds) A and B."""
    from farm.results.compare import compare
    from farm.store.db import open_store

    with open_store(settings) as engine:
        return compare(engine, a, b, build_a=build_a, build_b=build_b)


@dataclass(frozen=True)
class CampaignFrame:
    """A campaign's frame (campaign None: every campaign's)."""

    campaign: str | None
    frame: pd.DataFrame


def curve_points_of(settings: Settings, campaign: str | None,
                    all_campaigns: bool) -> CampaignFrame:
    """The engine curve's points of the synthetic-acceptance jobs of ``campaign`` (default
    the latest; every campaign's with ``all_campaigns``)."""
    from farm.results.curve import curve_points
    from farm.results.rows import job_report
    from farm.store.campaigns import latest_campaign
    from farm.store.db import open_store

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        return CampaignFrame(name, curve_points(job_report(engine, name)))


def campaign_runs(settings: Settings, campaign: str | None,
                  all_campaigns: bool) -> pd.DataFrame:
    """The runs of ``campaign`` (default the latest; every campaign's with
    ``all_campaigns``)."""
    from farm.results.runs import runs_frame
    from farm.store.campaigns import latest_campaign
    from farm.store.db import open_store

    with open_store(settings) as engine:
        return runs_frame(engine, None if all_campaigns
                          else campaign or latest_campaign(engine))


@dataclass(frozen=True)
class Recommended:
    """``farm recommend``'s campaign and candidates, then either the picks (with the matrix
    written to check them, if asked) or, verifying, predicted beside measured."""

    campaign: str
    candidates: pd.DataFrame
    chosen: pd.DataFrame | None = None
    matrix: dict[str, Any] | None = None
    checked: pd.DataFrame | None = None


def recommendation(settings: Settings, campaign: str | None, *, model: str | None,
                   gpu_class: str | None, verify: str | None,
                   matrix: Path | None) -> Recommended:
    """The best setting per GPU class x model x category of ``campaign`` (default the
    latest); ``matrix`` gets the matrix that checks them; ``verify`` names the campaign that
    ran it, to put predictions and measurements side by side."""
    from farm.results import recommend
    from farm.store.campaigns import latest_campaign
    from farm.store.db import open_store

    with open_store(settings) as engine:
        name = campaign or latest_campaign(engine)
        candidates = recommend.predictions(engine, name)
        for column, wanted in (("model", model), ("gpu_class", gpu_class)):
            if wanted is not None:
                candidates = candidates[candidates[column] == wanted]
        if candidates.empty:
            raise ConfigError(
                f"campaign {name}: nothing to recommend from. It needs variant jobs that "
                "drafted (per-position acceptance counters) and an engine cost curve of "
                "the same build, model, GPU class and spec type in the store (an "
                "`engine-curve:` campaign: docs/statistics.md, \"farm recommend\")")
        if verify is not None:
            return Recommended(name, candidates,
                               checked=recommend.check(engine, candidates, verify))
        chosen = recommend.recommendations(candidates)
        written = None if matrix is None else \
            _write_verify_matrix(engine, name, candidates, matrix)
    return Recommended(name, candidates, chosen, written)


def _write_verify_matrix(engine: Engine, campaign: str, candidates: pd.DataFrame,
                         output: Path) -> dict[str, Any]:
    """The recommended and runner-up settings of every row vs baseline, as a matrix file
    (written whole or not at all)."""
    from farm.matrix.yaml_file import matrix_yaml
    from farm.results.recommend import verify_matrix

    top = candidates[candidates["rank"] <= 2]
    if top.empty:
        raise ConfigError(f"--write-matrix: campaign {campaign} has nothing to check: no "
                          "setting was predicted (insufficient data: acceptance's error "
                          "needs two or more prompts per category). Run the campaign with "
                          "more prompts, then `farm recommend --write-matrix` again")
    engines = top[["model", "build"]].drop_duplicates()
    if len(engines) != 1:
        raise ConfigError(f"--write-matrix writes one matrix, for one model and build; "
                          f"campaign {campaign} has {len(engines)}: narrow it with --model "
                          "(and --gpu-class)")
    matrix = verify_matrix(engine, campaign, top)
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text(matrix_yaml(matrix), encoding="utf-8")
    partial.replace(output)
    return matrix


@dataclass(frozen=True)
class KeysHistory:
    """``farm history``'s target's history and its title."""

    history: History
    title: str


def key_history(settings: Settings, target: str) -> KeysHistory:
    """The history of ``target``: a matrix file's jobs, or those whose comparable key starts
    with it."""
    from farm.results.history import history
    from farm.store.db import open_store

    with open_store(settings) as engine:
        keys, title = _keys(engine, target)
        return KeysHistory(history(engine, keys), title)


def _keys(engine: Engine, target: str) -> tuple[list[str], str]:
    """The comparable keys of ``target``: a matrix file's jobs, or the keys starting with
    it (at least 8 hex digits); and a title."""
    from sqlalchemy import select

    from farm.store.models import Job

    path = Path(target)
    if path.is_file():
        from farm.matrix.load import load_matrix

        return sorted({spec.comparable_key for spec in load_matrix(path)[1]}), f"matrix {path}"
    if not re.fullmatch(r"[0-9a-f]{8,64}", target):
        raise ConfigError(f"{target!r} is neither a matrix file nor a comparable key (8 to 64 "
                          "hex digits, as `farm compare --format json` gives in `key`)")
    with engine.connect() as connection:
        keys = sorted({key for key in connection.scalars(
            select(Job.comparable_key).where(Job.comparable_key.startswith(target))) if key})
    if not keys:
        raise ConfigError(f"no job has a comparable key starting {target!r}")
    return keys, f"key {target[:12]}"
