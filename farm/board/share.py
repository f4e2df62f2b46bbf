"""A store's campaigns as a bundle's records, with nothing that names the machine or its user.

What ``farm share`` takes: the named campaigns' finished jobs (those with a summary) and
every run of them. What it changes on the way out, so that a bundle carries no hostname,
username, local path or secret:

- a run's ``host`` becomes the data dir's machine id, and its ``worker_name`` (which names
  the host) and ``node_top`` (the names of other processes a busy block met) are dropped,
  unless the contributor shares hosts (``with_host``);
- ``server_log`` (a local path) and the store's row ids are dropped;
- paths in a run's argv and a job's spec become their role, as the dry run of ``farm run``
  prints them: ``BUILD:<name>`` for the llama-server binary, ``MODELS_DIR/<file>`` (or
  ``DOWNLOADS_DIR/<file>``) for a file there, ``PATH`` for any other absolute path;
- a model file is named by its base name; passwords and tokens in URLs and the values of
  secret flags (``--api-key``, ``--hf-token``) become ``***``;
- a control character other than a tab or line break in a run's generated text becomes
  U+FFFD (a bundle holds none: ``farm.board.bounds``).

Summaries are shared in this farm's summary version (``farm.summary.upgraded``), which the
manifest states.
"""

from __future__ import annotations

import copy
import math
import os
import posixpath
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, func, select

from farm.board.bounds import as_prose, first_error
from farm.board.bundle import (
    DROPPED_RUN_COLUMNS,
    JobRecord,
    RunRecord,
    run_identity,
    write_bundle,
)
from farm.board.keys import fingerprint, load_private, public_bytes
from farm.board.machine import existing_machine_id, machine_id
from farm.board.verify import BundleError, read_bundle
from farm.errors import ConfigError
from farm.settings import Settings, redact_url
from farm.store.db import open_store
from farm.store.models import Campaign, Job, JobState, Run
from farm.summary import SummaryError, upgraded
from farm.words import plural

# Flags whose value is a secret (without their dashes), in argv and in a spec's flags.
SECRET_FLAGS = frozenset({"api-key", "hf-token", "hft"})
SECRET = "***"
# What a dry run in a data dir without a machine id computes identities with (never shown).
_NEW_MACHINE = "0" * 32


@dataclass(frozen=True)
class Places:
    """This machine's folders that argv and specs name files in: a path inside one is
    shared as the folder's role and the file's place in it; any other absolute path as
    ``PATH``."""

    models_dir: Path
    downloads_dir: Path | None = None

    def role(self, text: str) -> str:
        """``text`` as shared: an absolute path by its role, anything else as it is."""
        if not posixpath.isabs(text):
            return text
        path = posixpath.normpath(text)
        for folder, role in ((self.models_dir, "MODELS_DIR"),
                             (self.downloads_dir, "DOWNLOADS_DIR")):
            # The folder as configured and as it resolves: a run may name either.
            for base in () if folder is None else {os.path.abspath(folder),
                                                   os.path.realpath(folder)}:
                if path.startswith(base.rstrip("/") + "/"):
                    return f"{role}/{posixpath.relpath(path, base)}"
        return "PATH"


def collect(engine: Engine, campaigns: Sequence[str], *, machine_id: str, places: Places,
            with_host: bool = False) -> tuple[list[JobRecord], list[RunRecord]]:
    """The records of ``campaigns``' finished jobs and their runs, anonymised (the module
    docstring says how), in a fixed order; a ConfigError for a campaign the store lacks, or
    a value no bundle may carry (naming its job)."""
    names = campaign_names(engine, campaigns)
    jobs = _jobs(engine, names, places)
    keys = {job.job_key: job.campaign for job in jobs}
    runs = _runs(engine, names, machine_id, places, with_host, keys)
    runs.sort(key=lambda run: (run.job_key, run.block, run.arm, run.prompt_id,
                               run.repetition))
    return jobs, runs


def campaign_names(engine: Engine, campaigns: Sequence[str]) -> list[str]:
    """``campaigns`` without repeats, each checked to be in the store."""
    with engine.connect() as connection:
        stored = sorted(connection.scalars(select(Campaign.name)))
    if not campaigns:
        raise ConfigError("name the campaigns to share; the store holds "
                          + (", ".join(stored) or "none yet"))
    for name in campaigns:
        if name not in stored:
            raise ConfigError(f"no campaign named {name!r}; the store holds "
                              + (", ".join(stored) or "no campaign yet (`farm run` makes one)"))
    return list(dict.fromkeys(campaigns))


def _jobs(engine: Engine, names: list[str], places: Places) -> list[JobRecord]:
    """The finished jobs of ``names`` that have a summary, by campaign and key."""
    query = (select(Campaign.name.label("campaign"), *Job.__table__.columns)
             .join(Campaign, Job.campaign_id == Campaign.id)
             .where(Campaign.name.in_(names), Job.state == JobState.DONE))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    jobs = [_job_record(row, places) for row in rows if row["summary"]]
    return sorted(jobs, key=lambda job: (job.campaign, job.job_key))


def _job_record(row: Any, places: Places) -> JobRecord:
    where = f"job {row['job_key'][:12]} of campaign {row['campaign']!r}"
    try:
        summary = upgraded(dict(row["summary"]))
    except SummaryError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    values = {
        "campaign": row["campaign"], "job_key": row["job_key"],
        "comparable_key": row["comparable_key"], "model_name": row["model_name"],
        "build_name": row["build_name"], "variant_name": row["variant_name"],
        "varying": _flag_values(row["varying"], places), "spec": anonymous_spec(row["spec"],
                                                                               places),
        "gpu_class": row["gpu_class"], "state": row["state"], "pairs": row["pairs"],
        "stop_reason": row["stop_reason"], "speculation": row["speculation"],
        "summary": summary, "started_at": _utc(row["started_at"]),
        "finished_at": _utc(row["finished_at"])}
    try:
        return JobRecord.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {first_error(exc)}; a bundle cannot carry it: share "
                          "without this campaign, or run the job again") from None


def _runs(engine: Engine, names: list[str], machine_id: str, places: Places, with_host: bool,
          keys: dict[str, str]) -> list[RunRecord]:
    """The runs of the jobs in ``keys`` (job key -> campaign) as records."""
    columns = [column for column in Run.__table__.columns
               if column.name not in DROPPED_RUN_COLUMNS]
    query = (select(Job.job_key, *columns).join(Job, Run.job_id == Job.id)
             .join(Campaign, Job.campaign_id == Campaign.id)
             .where(Campaign.name.in_(names), Job.state == JobState.DONE))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    return [_run_record(dict(row), machine_id, places, with_host, keys[row["job_key"]])
            for row in rows if row["job_key"] in keys]


def _run_record(values: dict[str, Any], machine_id: str, places: Places, with_host: bool,
                campaign: str) -> RunRecord:
    values = {name: None if isinstance(value, float) and not math.isfinite(value) else value
              for name, value in values.items()}
    values["identity"] = run_identity(machine_id, values["job_key"], values["arm"],
                                      values["block"], values["prompt_id"],
                                      values["repetition"])
    if not with_host:  # other processes' names say who uses the machine and for what
        values.update(host=machine_id, worker_name=None, node_top=None)
    elif values["node_top"] is not None:
        values["node_top"] = [tuple(process) for process in values["node_top"]]
    values["argv"] = anonymous_argv(values["argv"] or [], values["build_name"], places)
    values["model_file"] = posixpath.basename(values["model_file"])
    values["text"] = as_prose(values["text"])
    if values["model_source"] is not None:
        values["model_source"] = redact_url(values["model_source"])
    values["started_at"] = _utc(values["started_at"])
    try:
        return RunRecord.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(
            f"job {values['job_key'][:12]} of campaign {campaign!r}, run {values['arm']} "
            f"block {values['block']} prompt {values['prompt_id']!r} repetition "
            f"{values['repetition']}: {first_error(exc)}; a bundle cannot carry it: share "
            "without this campaign, or run the job again") from None


def anonymous_argv(argv: Sequence[str], build_name: str, places: Places) -> list[str]:
    """A server's argv as shared: the binary as ``BUILD:<name>``, paths by their role,
    secret flags' values as ``***``."""
    shared = [f"BUILD:{build_name}"] if argv else []
    hide_next = False
    for arg in argv[1:]:
        flag, equals, value = arg.partition("=")
        if hide_next:
            shared.append(SECRET)
        elif arg.startswith("-") and flag.lstrip("-") in SECRET_FLAGS:
            shared.append(f"{flag}={SECRET}" if equals else arg)
        elif arg.startswith("-") and equals:
            shared.append(f"{flag}={places.role(value)}")
        else:
            shared.append(places.role(arg))
        hide_next = (not hide_next and not equals and arg.startswith("-")
                     and flag.lstrip("-") in SECRET_FLAGS)
    return shared


def anonymous_spec(spec: dict[str, Any], places: Places) -> dict[str, Any]:
    """A stored JobSpec as shared: model, draft model and build paths by their role, source
    and download URLs without secrets, flag values as in argv."""
    spec = copy.deepcopy(spec)
    for model in [spec.get("model"), *spec.get("draft_models", [])]:
        if isinstance(model, dict):
            _anonymous_model(model, places)
    for role in ("baseline", "variant"):
        if isinstance(spec.get(role), dict):
            _anonymous_arm(spec[role], places)
    if isinstance(spec.get("varying"), dict):
        spec["varying"] = _flag_values(spec["varying"], places)
    return spec


def _anonymous_model(model: dict[str, Any], places: Places) -> None:
    """A spec's model (or draft model), in place: its path by role, its URL's secrets out."""
    if isinstance(model.get("path"), str):
        model["path"] = places.role(model["path"])
    if isinstance(model.get("url"), str):
        model["url"] = redact_url(model["url"])


def _anonymous_arm(arm: dict[str, Any], places: Places) -> None:
    """A spec's arm, in place: its binary as ``BUILD:<name>``, its source's URL or path,
    its flags' values."""
    build = arm.get("build")
    if isinstance(build, dict):
        if build.get("path") is not None:
            build["path"] = f"BUILD:{build.get('name')}"
        source = build.get("source")
        if isinstance(source, dict) and isinstance(source.get("git"), str):
            source["git"] = places.role(redact_url(source["git"]))
    if isinstance(arm.get("flags"), list):
        arm["flags"] = [_flag(pair, places) for pair in arm["flags"]]


def _flag(pair: Any, places: Places) -> Any:
    """One ``[name, value]`` of an arm's flags as shared."""
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
        return pair
    return [pair[0], _flag_value(pair[0], pair[1], places)]


def _flag_values(flags: dict[str, Any], places: Places) -> dict[str, Any]:
    return {name: _flag_value(name, value, places) for name, value in flags.items()}


def _flag_value(name: str, value: Any, places: Places) -> Any:
    if not isinstance(value, str):
        return value
    return SECRET if name.lstrip("-") in SECRET_FLAGS else places.role(value)


def _utc(moment: datetime | None) -> datetime | None:
    """A stored time as UTC: SQLite hands back the UTC times it was given without a zone."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def share_campaigns(settings: Settings, campaigns: Sequence[str], output: Path | None, *,
                    with_host: bool = False, key: Path | None = None,
                    dry_run: bool = False) -> list[str]:
    """``farm share``: write the bundle of ``campaigns`` to ``output`` (signed with the
    private key file ``key``), or with ``dry_run`` only say what it would hold; the lines
    to print. A dry run writes nothing, not even the data dir's machine id."""
    signing_key = None if key is None else load_private(key)
    places = Places(settings.models_dir, settings.downloads_dir)
    if dry_run or output is None:
        known = existing_machine_id(settings.data_dir)
        with open_store(settings) as engine:
            jobs, runs = collect(engine, campaigns, machine_id=known or _NEW_MACHINE,
                                 places=places, with_host=with_host)
            return dry_run_lines(engine, campaigns, jobs, runs, machine_id=known,
                                 with_host=with_host)
    machine = machine_id(settings.data_dir)
    with open_store(settings) as engine:
        jobs, runs = collect(engine, campaigns, machine_id=machine, places=places,
                             with_host=with_host)
    names = list(dict.fromkeys(campaigns))
    output.parent.mkdir(parents=True, exist_ok=True)
    _write_checked(output, machine_id=machine, campaigns=names, with_host=with_host,
                   jobs=jobs, runs=runs, signing_key=signing_key)
    signed = ("" if signing_key is None
              else f", signed by key {fingerprint(public_bytes(signing_key))}")
    return [f"wrote {output}: {plural(len(jobs), 'job')} and {plural(len(runs), 'run')} of "
            f"{', '.join(names)} as machine {machine}{signed}",
            f"a board takes it with `farm board add {shlex.quote(str(output))}`"]


def _write_checked(output: Path, **bundle: Any) -> None:
    """``write_bundle`` to ``output`` once the bundle reads back as a board reads it: a
    bundle no board would take (too large, say) is never left, and what was at ``output``
    stays."""
    staged = output.with_name(f".{output.name}.check")
    write_bundle(staged, **bundle)
    try:
        read_bundle(staged)
    except BundleError as exc:
        staged.unlink()
        raise ConfigError(f"{output}: a board would refuse this bundle ({exc.problem}); share "
                          "fewer campaigns per bundle") from None
    os.replace(staged, output)


def dry_run_lines(engine: Engine, campaigns: Sequence[str], jobs: Sequence[JobRecord],
                  runs: Sequence[RunRecord], *, machine_id: str | None,
                  with_host: bool) -> list[str]:
    """What a bundle of ``jobs`` and ``runs`` (``collect``'s) would share, and what it
    leaves out or changes, one line each; ``machine_id`` None for a data dir that has none
    yet."""
    machine = machine_id or "not made yet (the first bundle makes it)"
    names = campaign_names(engine, campaigns)
    query = (select(Campaign.name, Job.state, func.count())
             .join(Campaign, Job.campaign_id == Campaign.id)
             .where(Campaign.name.in_(names)).group_by(Campaign.name, Job.state))
    with engine.connect() as connection:
        states = {(name, state): int(count) for name, state, count in connection.execute(query)}
    shared = Counter(job.campaign for job in jobs)
    lines = [f"would share {plural(len(jobs), 'job')} and {plural(len(runs), 'run')} of "
             f"{plural(len(names), 'campaign')} as machine {machine}"]
    for name in names:
        left = Counter({state: count for (campaign, state), count in states.items()
                        if campaign == name and state != JobState.DONE})
        unsummarised = states.get((name, JobState.DONE), 0) - shared[name]
        if unsummarised:
            left["done without a summary"] = unsummarised
        rest = ", ".join(f"{count} {state}" for state, count in sorted(left.items()))
        lines.append(f"  {name}: {plural(shared[name], 'finished job')}"
                     + (f"; not shared: {rest}" if rest else ""))
    lines.append("hosts and worker names: kept (--with-host)" if with_host else
                 f"hosts: shown as the machine id {machine}; worker names: left out")
    lines.append("left out of every run: " + ", ".join(DROPPED_RUN_COLUMNS)
                 + " (the store's row ids, the server log's local path)")
    lines.append("paths in argv and job specs: as roles (BUILD:<build>, MODELS_DIR/<file>, "
                 "DOWNLOADS_DIR/<file>, PATH); model files by name; secrets in URLs and "
                 "flags as ***")
    if runs:
        lines.append(f"  e.g. {runs[0].arm} of job {runs[0].job_key[:12]}: "
                     f"{shlex.join(runs[0].argv)}")
    return lines
