"""``farm board add``: a checked bundle (``farm.board.verify``) into a board's store, each
job and run taken once by its identity, every job's summary computed afresh by the farm
from the runs the board holds, the contributor's own figures compared with it, and the
jobs the contributing rules refuse kept with their reason, off the board.

Identity (docs/board.md): a machine id belongs to the first key that signs a bundle of it
(``BoardMachine``); a bundle's *lineage* is its machine id and its signer (none for an
unsigned bundle, which a machine can have only while no key owns it). A bundle of another
key, or an unsigned one, for a machine a key owns is refused, and so is a bundle naming a
job that another lineage brought: one lineage never adds runs to, or restates the summary
of, another's job.

Taking a bundle is one transaction: a bundle refused for any reason, or one that fails
half-way, changes nothing. Its runs are read from the file and inserted ``_BATCH`` at a
time, so memory stays flat in its size. The recomputation follows in a second step, job by
job, each job's finish and the rules' verdict written in one transaction; a job whose
recomputation did not finish (a crash between the two) is recomputed by the next ``farm
board add`` or ``farm board show``, and is not shown before.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from farm.board.bounds import first_error
from farm.board.bundle import JobRecord, RunRecord
from farm.board.verify import Bundle, BundleError, read_bundle
from farm.errors import ConfigError
from farm.matrix.spec import JobSpec
from farm.results.finish import finished_job_values
from farm.store.board import BoardBundle, BoardJob, BoardKey, BoardMachine, BoardRun
from farm.store.models import Job, JobState, Run
from farm.store.repo import ensure_campaign, ensure_jobs
from farm.summary import SUMMARY_VERSION, JobSummary, RunFacts, read_summary

# The contributing rules: the pairs a job needs at least (three A/B pairs, as the public
# tables ask of a hand-made comparison), and the summary fields compared with the
# contributor's own, with the relative difference that counts as one.
LEAST_PAIRS = 3
STATED = ("speedup", "ci_low", "ci_high", "baseline_tok_s", "variant_tok_s",
          "mean_accepted_length")
TOLERANCE = 1e-6
# Runs inserted per statement (and identities looked up per query): memory stays flat in
# the bundle's size, and under either database's limit on bound parameters.
_BATCH = 1_000
# The store's campaign names are at most this long.
_CAMPAIGN_NAME = 200
_FORGED = "`farm share` never writes such a bundle: do not use it, and tell its sender"


@dataclass
class Added:
    """What one bundle brought: new jobs and runs, jobs refused (key, reason), stated
    figures the recomputation did not reproduce, and notes."""

    path: Path
    known: bool = False
    jobs: int = 0
    runs: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _signer_ok(session: Session, path: Path, signer: str | None) -> None:
    known = signer is not None and session.scalar(
        select(BoardKey.id).where(BoardKey.fingerprint == signer)) is not None
    if not known:
        how = "unsigned" if signer is None else f"signed by key {signer}, which it does not know"
        raise ConfigError(f"{path}: the board requires signed bundles and this one is {how}; "
                          "add the contributor's key with `farm board trust KEY --name NAME`, "
                          "or add without --require-signed")


def _campaign_name(machine: str, campaign: str) -> str:
    """The campaign a machine's campaign is kept in on the board: one per machine and
    campaign, by the full machine id; a name too long for the store ends with its hash."""
    name = f"board.{machine}.{campaign}"
    if len(name) <= _CAMPAIGN_NAME:
        return name
    digest = hashlib.sha256(campaign.encode()).hexdigest()[:16]
    return f"{name[:_CAMPAIGN_NAME - len(digest) - 1]}.{digest}"


def _who(signer: str | None) -> str:
    return "unsigned" if signer is None else f"signed by key {signer}"


def _claim(session: Session, path: Path, bundle: Bundle) -> None:
    """The bundle's machine for its signer: bound to it if no key owns the machine yet; a
    BundleError if another key owns it, or it is unsigned and a key owns it."""
    machine, signer = bundle.manifest.machine_id, bundle.signer
    owner = session.scalar(select(BoardMachine.signer).where(
        BoardMachine.machine_id == machine))
    if owner is None:
        if signer is not None:
            session.execute(insert(BoardMachine).values(machine_id=machine, signer=signer))
        return
    if signer != owner:
        raise BundleError(path, f"machine {machine} belongs to key {owner} on this board and "
                          f"this bundle is {_who(signer)}", "a machine's bundles are signed "
                          "by its first key: sign with that key, or share from your own data "
                          "dir (its own machine id)")


def _known_job(session: Session, path: Path, bundle: Bundle, record: JobRecord) -> int | None:
    """The board's job for ``record`` if a bundle brought it already, its lineage checked."""
    machine = bundle.manifest.machine_id
    found = session.execute(
        select(BoardJob.job_id, BoardBundle.signer)
        .join(BoardBundle, BoardBundle.id == BoardJob.bundle_id)
        .where(BoardJob.machine_id == machine, BoardJob.source_key == record.job_key)).first()
    if found is None:
        return None
    if found.signer != bundle.signer:
        raise BundleError(path, f"job {record.job_key[:12]} of machine {machine} came in a "
                          f"bundle {_who(found.signer)} and this one is {_who(bundle.signer)}: "
                          "a bundle never adds to another lineage's job",
                          "share it without that job's campaign")
    return int(found.job_id)


def _store_job(session: Session, path: Path, bundle: Bundle, bundle_id: int,
               record: JobRecord, added: Added) -> int | None:
    """The board's new job for ``record``; None when its spec is unreadable (kept off
    with its reason). A BundleError when its spec is another job's of the machine already
    (one spec under two job keys)."""
    machine = bundle.manifest.machine_id
    try:
        spec = JobSpec.model_validate({**record.spec, "campaign": _campaign_name(
            machine, record.campaign)})
    except ValueError as exc:
        why = first_error(exc) if isinstance(exc, ValidationError) else \
            str(exc).splitlines()[0]
        added.refused.append((record.job_key, f"its spec is not one this farm reads ({why}); "
                              "upgrade the farm"))
        return None
    campaign = ensure_campaign(session, spec.campaign, f"bundle:{bundle_id}")
    twin = session.scalar(select(BoardJob.source_key).join(Job, Job.id == BoardJob.job_id)
                          .where(Job.campaign_id == campaign.id, Job.job_key == spec.job_key))
    if twin is not None:
        raise BundleError(path, f"job {record.job_key[:12]} has the spec of job {twin[:12]} "
                          f"of machine {machine}: one spec under two job keys", _FORGED)
    job_id = ensure_jobs(session, campaign, [spec])[spec.job_key]
    # Never queued, not for a moment: a stranger's job is data here, never work to run.
    session.execute(update(Job).where(Job.id == job_id).values(
        state=JobState.CANCELLED, error="a board's job, from a bundle: never run"))
    session.execute(insert(BoardJob).values(
        job_id=job_id, bundle_id=bundle_id, machine_id=machine, source_key=record.job_key,
        stated=record.summary))
    added.jobs += 1
    return job_id


def _board_host(machine: str, host: str) -> str:
    """A run's host on the board: the machine id, or a host of a bundle made with hosts
    under its machine id, so that no bundle's runs pass for another machine's (a job's
    drift test reads its host's earlier jobs)."""
    return host if host == machine else f"{machine}/{host}"[:255]


def _insert_runs(session: Session, bundle: Bundle, bundle_id: int, jobs: dict[str, int | None],
                 added: Added) -> None:
    """The bundle's runs the board lacks, read from its file ``_BATCH`` at a time."""
    batch: list[RunRecord] = []
    for run in bundle.runs:
        if jobs.get(run.job_key) is not None:
            batch.append(run)
        if len(batch) == _BATCH:
            _insert_batch(session, bundle, bundle_id, jobs, batch, added)
            batch = []
    if batch:
        _insert_batch(session, bundle, bundle_id, jobs, batch, added)


def _insert_batch(session: Session, bundle: Bundle, bundle_id: int,
                  jobs: dict[str, int | None], batch: list[RunRecord], added: Added) -> None:
    on_board = set(session.scalars(select(BoardRun.identity).where(
        BoardRun.identity.in_([run.identity for run in batch]))))
    new = [run for run in batch if run.identity not in on_board]
    if not new:
        return
    machine = bundle.manifest.machine_id
    rows = [{**run.model_dump(exclude={"identity", "job_key"}), "job_id": jobs[run.job_key],
             "host": _board_host(machine, run.host)} for run in new]
    ids = session.scalars(insert(Run).returning(Run.id, sort_by_parameter_order=True),
                          rows).all()
    session.execute(insert(BoardRun), [
        {"identity": run.identity, "run_id": run_id, "bundle_id": bundle_id}
        for run, run_id in zip(new, ids, strict=True)])
    added.runs += len(new)


def _take(session: Session, path: Path, bundle: Bundle, digest: str, added: Added
          ) -> set[int]:
    """Store the bundle, its new jobs and runs; the board job ids it touched. A
    BundleError (and nothing stored) when its lineage may not."""
    manifest = bundle.manifest
    _claim(session, path, bundle)
    bundle_id = session.scalar(insert(BoardBundle).values(
        sha256=digest, machine_id=manifest.machine_id, signer=bundle.signer,
        farm_version=manifest.farm_version, summary_version=manifest.summary_version,
        created_at=manifest.created_at, campaigns=list(manifest.campaigns),
        with_host=manifest.with_host).returning(BoardBundle.id))
    assert bundle_id is not None
    jobs: dict[str, int | None] = {}
    for record in bundle.jobs:
        known = _known_job(session, path, bundle, record)
        if known is not None:  # its own lineage's: a re-shared bundle may state again
            session.execute(update(BoardJob).where(BoardJob.job_id == known)
                            .values(stated=record.summary))
        jobs[record.job_key] = (known if known is not None else
                                _store_job(session, path, bundle, bundle_id, record, added))
    _insert_runs(session, bundle, bundle_id, jobs, added)
    if manifest.summary_version < SUMMARY_VERSION:
        added.notes.append(f"{path}: its summaries are version {manifest.summary_version}; "
                           f"the board recomputed them with version {SUMMARY_VERSION}")
    # Every job it names is compared again with what it states (a re-shared bundle may
    # state other figures for the same runs).
    return {job_id for job_id in jobs.values() if job_id is not None}


def _parallel(argv: Iterable[Any]) -> str:
    """The --parallel an arm's server ran with (llama-server's default: 1)."""
    args = [str(arg) for arg in argv]
    for flag in ("--parallel", "-np"):
        if flag in args[:-1]:
            return args[args.index(flag) + 1]
    return "1"


def refusal(spec: JobSpec, summary: dict[str, Any], pairs: int,
            parallels: dict[str, set[str]]) -> str | None:
    """Why the contributing rules refuse a job (None: they take it): a comparison of two
    arms measured in pairs, on a quiet machine, at least ``LEAST_PAIRS`` pairs, both arms
    at one ``--parallel``. A variant is a setting of the board; a synthetic-acceptance job,
    a point of its machine's engine curve for ``farm recommend``'s prediction
    (``farm.board.predict``), never shown as a setting."""
    if spec.kind not in ("variant", "synthetic"):
        return (f"neither a variant against its baseline nor an engine-curve point (a "
                f"{spec.kind} job)")
    if pairs < LEAST_PAIRS:
        return f"too few pairs ({pairs}; the board needs {LEAST_PAIRS})"
    if summary.get("speedup") is None or summary.get("df") in (None, 0):
        return "no paired interval (its arms were not measured in complete pairs)"
    if (summary.get("busy_blocks") or 0) > 0:
        return (f"run beside other work ({summary['busy_blocks']} busy blocks): a busy "
                "machine halves decode speed")
    both = parallels.get("baseline", {"1"}) | parallels.get("variant", {"1"})
    if len(both) > 1:
        return f"arms at different --parallel ({', '.join(sorted(both))})"
    return None


def _figures(summary: dict[str, Any]) -> dict[str, float | None] | None:
    """The compared figures (``STATED``) of a summary, typed; None when it is not a summary
    this farm reads (a stated one stored before bundles' summaries were typed)."""
    try:
        typed = read_summary(summary) or JobSummary()
    except (ValueError, TypeError, KeyError):
        return None
    facts = typed.facts or RunFacts()
    return {name: getattr(typed if name in JobSummary.model_fields else facts, name)
            for name in STATED}


def _different(stated: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """The stated figures the recomputation does not reproduce, one text each."""
    said, computed = _figures(stated), _figures(found) or {}
    if said is None:
        return ["its stated summary is not one this farm reads"]
    out = []
    for name in STATED:
        a, b = said[name], computed.get(name)
        if a is None and b is None:
            continue
        if a is None or b is None or not math.isclose(a, b, rel_tol=TOLERANCE):
            out.append(f"{name} stated {a}, recomputed {b}")
    return out


def recompute(engine: Engine, job_ids: Iterable[int], added: Added | None = None) -> None:
    """Each job's summary afresh from the runs the board holds (``finished_job_values``,
    as a finished job's), the rules applied, the stated figures compared; the job's finish
    and the verdict written in one transaction, so no job is ever done without it."""
    for job_id in sorted(job_ids):
        with Session(engine) as session:
            job = session.get_one(Job, job_id)
            board = session.scalars(select(BoardJob).where(BoardJob.job_id == job_id)).one()
            version = session.scalar(select(BoardBundle.summary_version).where(
                BoardBundle.id == board.bundle_id))
            spec = JobSpec.model_validate(job.spec)
            argv = session.execute(select(Run.arm, Run.argv).where(Run.job_id == job_id)).all()
            pairs = len(set(session.scalars(select(Run.pair).where(Run.job_id == job_id))))
            stated, source = dict(board.stated), board.source_key
        parallels: dict[str, set[str]] = {}
        for arm, args in argv:
            parallels.setdefault(arm, set()).add(_parallel(args or []))
        values = finished_job_values(
            engine, job_id, spec, asked=spec.variant.speculates, pairs=pairs,
            stop_reason="recomputed by the board")
        summary = values["summary"]
        why = refusal(spec, summary, pairs, parallels)
        differences = (_different(stated, summary) if version == SUMMARY_VERSION else [])
        text = "; ".join(differences) or None
        with Session(engine) as session, session.begin():
            # As farm.store.repo.mark_finished marks a finished job, with the verdict.
            session.execute(update(Job).where(Job.id == job_id).values(
                state=JobState.DONE, error=None, failure_class=None,
                finished_at=datetime.now(UTC), **values))
            session.execute(update(BoardJob).where(BoardJob.job_id == job_id).values(
                refused=why, differences=text))
        if added is not None:
            if why is not None:
                added.refused.append((source, why))
            if text is not None:
                added.differences.append(f"job {source[:12]} ({spec.campaign}): {text}")


def pending(engine: Engine) -> list[int]:
    """Board jobs whose recomputation did not finish."""
    with engine.connect() as connection:
        return list(connection.scalars(select(BoardJob.job_id).join(Job, Job.id == BoardJob.job_id)
                                       .where(Job.state != JobState.DONE.value)))


def add_bundle(engine: Engine, path: Path, require_signed: bool) -> Added:
    """Take one bundle onto the board (docs/board.md)."""
    added = Added(path)
    bundle = read_bundle(path)
    digest = bundle.sha256
    try:
        with Session(engine) as session, session.begin():
            if session.scalar(select(BoardBundle.id).where(BoardBundle.sha256 == digest)):
                added.known = True
                return added
            if require_signed:
                _signer_ok(session, path, bundle.signer)
            touched = _take(session, path, bundle, digest, added)
    except IntegrityError:
        # Only a board changed by another `farm board add` between our reads and writes
        # (the same bundle, or a key claiming the same machine) breaks a constraint here.
        raise BundleError(path, "the board took another bundle of this machine while it "
                          "was being added", "add it again") from None
    recompute(engine, touched | set(pending(engine)), added)
    return added
