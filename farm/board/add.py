"""``farm board add``: a checked bundle (``farm.board.verify``) into a board's store, each
job and run taken once by its identity, every job's summary computed afresh by the farm
from the runs the board holds, the contributor's own figures compared with it, and the
jobs the contributing rules refuse kept with their reason, off the board.

Taking a bundle is one transaction: a bundle refused for any reason, or one that fails
half-way, changes nothing. The recomputation follows in a second step, job by job; a job
whose recomputation did not finish (a crash between the two) is recomputed by the next
``farm board add`` or ``farm board show``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.orm import Session

from farm.board.verify import Bundle, read_bundle
from farm.errors import ConfigError
from farm.matrix.spec import JobSpec
from farm.results.finish import finished_job_values
from farm.store.board import BoardBundle, BoardJob, BoardKey, BoardRun
from farm.store.models import Job, JobState, Run
from farm.store.repo import ensure_campaign, ensure_jobs, mark_finished
from farm.summary import SUMMARY_VERSION

# The contributing rules: the pairs a job needs at least (three A/B pairs, as the public
# tables ask of a hand-made comparison), and the summary fields compared with the
# contributor's own, with the relative difference that counts as one.
LEAST_PAIRS = 3
STATED = ("speedup", "ci_low", "ci_high", "baseline_tok_s", "variant_tok_s",
          "mean_accepted_length")
TOLERANCE = 1e-6
# Identities bound per query: under either database's limit on bound parameters.
_PER_QUERY = 10_000


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
    """The campaign a machine's campaign is kept in on the board: one per machine."""
    return f"board.{machine[:12]}.{campaign}"[:200]


def _store_job(session: Session, bundle: Bundle, bundle_id: int, record: Any,
               added: Added) -> int | None:
    """The board's job for ``record`` (made if new); None when its spec is unreadable."""
    machine = bundle.manifest.machine_id
    known = session.scalar(select(BoardJob.job_id).where(
        BoardJob.machine_id == machine, BoardJob.source_key == record.job_key))
    if known is not None:
        return int(known)
    try:
        spec = JobSpec.model_validate({**record.spec, "campaign": _campaign_name(
            machine, record.campaign)})
    except ValueError as exc:
        added.refused.append((record.job_key, "its spec is not one this farm reads "
                              f"({str(exc).splitlines()[0]}); upgrade the farm"))
        return None
    campaign = ensure_campaign(session, spec.campaign, f"bundle:{bundle_id}")
    job_id = ensure_jobs(session, campaign, [spec])[spec.job_key]
    # Never queued, not for a moment: a stranger's job is data here, never work to run.
    session.execute(update(Job).where(Job.id == job_id).values(
        state=JobState.CANCELLED, error="a board's job, from a bundle: never run"))
    session.execute(insert(BoardJob).values(
        job_id=job_id, bundle_id=bundle_id, machine_id=machine, source_key=record.job_key,
        stated=record.summary or {}))
    added.jobs += 1
    return job_id


def _take(session: Session, path: Path, bundle: Bundle, digest: str, added: Added
          ) -> set[int]:
    """Store the bundle, its new jobs and runs; the board job ids it touched."""
    manifest = bundle.manifest
    bundle_id = session.scalar(insert(BoardBundle).values(
        sha256=digest, machine_id=manifest.machine_id, signer=bundle.signer,
        farm_version=manifest.farm_version, summary_version=manifest.summary_version,
        created_at=manifest.created_at, campaigns=list(manifest.campaigns),
        with_host=manifest.with_host).returning(BoardBundle.id))
    assert bundle_id is not None
    jobs = {record.job_key: _store_job(session, bundle, bundle_id, record, added)
            for record in bundle.jobs}
    for record in bundle.jobs:
        if jobs[record.job_key] is not None:
            session.execute(update(BoardJob).where(BoardJob.job_id == jobs[record.job_key])
                            .values(stated=record.summary or {}))
    identities = [run.identity for run in bundle.runs]
    seen = {identity for start in range(0, len(identities), _PER_QUERY)
            for identity in session.scalars(select(BoardRun.identity).where(
                BoardRun.identity.in_(identities[start:start + _PER_QUERY])))}
    # Every job it names is compared again with what it states (a re-shared bundle may
    # state other figures for the same runs).
    touched = {job_id for job_id in jobs.values() if job_id is not None}
    for run in bundle.runs:
        job_id = jobs.get(run.job_key)
        if job_id is None or run.identity in seen:
            continue
        values = run.model_dump(exclude={"identity", "job_key"})
        run_id = session.scalar(insert(Run).values(job_id=job_id, **values).returning(Run.id))
        session.execute(insert(BoardRun).values(identity=run.identity, run_id=run_id,
                                                bundle_id=bundle_id))
        seen.add(run.identity)
        added.runs += 1
    if manifest.summary_version < SUMMARY_VERSION:
        added.notes.append(f"{path}: its summaries are version {manifest.summary_version}; "
                           f"the board recomputed them with version {SUMMARY_VERSION}")
    return touched


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


def _field(summary: dict[str, Any], name: str) -> Any:
    """A summary's field, or its run facts' (tok/s, drafts)."""
    return summary[name] if name in summary else (summary.get("facts") or {}).get(name)


def _different(stated: dict[str, Any], found: dict[str, Any]) -> list[str]:
    out = []
    for name in STATED:
        a, b = _field(stated, name), _field(found, name)
        if a is None and b is None:
            continue
        if a is None or b is None or not math.isclose(float(a), float(b), rel_tol=TOLERANCE):
            out.append(f"{name} stated {a}, recomputed {b}")
    return out


def recompute(engine: Engine, job_ids: Iterable[int], added: Added | None = None) -> None:
    """Each job's summary afresh from the runs the board holds (``finished_job_values``,
    as a finished job's), the rules applied, the stated figures compared."""
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
        mark_finished(engine, job_id, JobState.DONE, summary=values)
        summary = values["summary"]
        why = refusal(spec, summary, pairs, parallels)
        differences = (_different(stated, summary) if version == SUMMARY_VERSION else [])
        text = "; ".join(differences) or None
        with Session(engine) as session, session.begin():
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
    with Session(engine) as session, session.begin():
        if session.scalar(select(BoardBundle.id).where(BoardBundle.sha256 == digest)):
            added.known = True
            return added
        if require_signed:
            _signer_ok(session, path, bundle.signer)
        touched = _take(session, path, bundle, digest, added)
    recompute(engine, touched | set(pending(engine)), added)
    return added
