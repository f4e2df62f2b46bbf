"""The writes the farm makes: campaigns, jobs (idempotent by job_key) and runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from farm.matrix.spec import JobSpec
from farm.store.models import Campaign, Job, Run
from workers.checks import Preflight
from workers.executor import RunKey, RunResult, host_name


def ensure_campaign(session: Session, name: str, matrix_path: str) -> Campaign:
    campaign = session.scalar(select(Campaign).where(Campaign.name == name))
    if campaign is None:
        campaign = Campaign(name=name, matrix_path=matrix_path)
        session.add(campaign)
        session.flush()
    return campaign


def ensure_jobs(session: Session, campaign: Campaign, specs: Sequence[JobSpec],
                max_attempts: int = 3) -> list[Job]:
    """The campaign's job rows for ``specs``, inserting only those not stored yet."""
    existing = {job.job_key: job for job in session.scalars(
        select(Job).where(Job.campaign_id == campaign.id))}
    rows = []
    for spec in specs:
        job = existing.get(spec.job_key)
        if job is None:
            job = Job(campaign_id=campaign.id, job_key=spec.job_key, model_name=spec.model.name,
                      build_name=spec.build.name, variant_name=spec.variant.name,
                      varying=spec.varying, spec=spec.model_dump(mode="json"),
                      gpu_class=spec.gpu_class, state="queued", attempt=0,
                      max_attempts=max_attempts)
            session.add(job)
        rows.append(job)
    session.flush()
    return rows


def register(engine: Engine, campaign_name: str, matrix_path: str,
             specs: Sequence[JobSpec], max_attempts: int = 3) -> list[int]:
    """Store the campaign and its jobs in one transaction; return the job ids in order."""
    with Session(engine) as session, session.begin():
        campaign = ensure_campaign(session, campaign_name, matrix_path)
        return [job.id for job in ensure_jobs(session, campaign, specs, max_attempts)]


def job_state(engine: Engine, job_id: int) -> str:
    with Session(engine) as session:
        return session.get_one(Job, job_id).state


def mark_running(engine: Engine, job_id: int) -> None:
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == job_id).values(
            state="running", attempt=Job.attempt + 1, error=None,
            started_at=datetime.now(UTC)))


def mark_finished(engine: Engine, job_id: int, state: str, error: str | None = None) -> None:
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == job_id).values(
            state=state, error=error,
            finished_at=datetime.now(UTC) if state in ("done", "failed") else None))


class DbRunSink:
    """Runs of one job, written straight to the store (the embedded, single-owner case)."""

    def __init__(self, engine: Engine, job_id: int) -> None:
        self.engine, self.job_id = engine, job_id
        self.host = host_name()

    def done(self) -> set[RunKey]:
        with Session(self.engine) as session:
            rows = session.execute(select(Run.arm, Run.block, Run.prompt_id, Run.repetition)
                                   .where(Run.job_id == self.job_id))
            return {RunKey(arm, block, prompt, rep)  # type: ignore[arg-type]
                    for arm, block, prompt, rep in rows}

    def record(self, result: RunResult, checked: Preflight) -> None:
        with Session(self.engine) as session, session.begin():
            session.add(run_row(self.job_id, result, checked, self.host))


def run_row(job_id: int, result: RunResult, checked: Preflight, host: str,
            worker_name: str | None = None, attempt: int = 1) -> Run:
    gen, counters = result.generation, result.counters
    return Run(
        job_id=job_id, arm=result.key.arm, arm_name=result.arm_name, block=result.slot.block,
        pair=result.slot.pair, position=result.slot.position, prompt_id=result.prompt.id,
        prompt_category=result.prompt.category, repetition=result.key.repetition,
        prompt_tokens=gen.prompt_tokens, generated_tokens=gen.generated_tokens,
        prompt_tok_s=gen.prompt_tok_s, decode_tok_s=gen.decode_tok_s,
        client_decode_tok_s=gen.client_decode_tok_s, ttft_ms=gen.ttft_ms, e2e_ms=gen.e2e_ms,
        tpot_ms=gen.tpot_ms, draft_n=gen.draft_n, draft_accepted=gen.draft_accepted,
        spec_drafts=counters.drafts, spec_drafted=counters.drafted,
        spec_accepted=counters.accepted, spec_accepted_per_pos=list(counters.accepted_per_pos),
        text=gen.text, server_version=checked.probe.version, build_name=result.build_name,
        model_file=checked.model.file_name, model_size=checked.model.size,
        model_sha256=checked.model.sha256, host=host, argv=result.argv,
        server_log=result.server_log, worker_name=worker_name, attempt=attempt,
        started_at=result.started_at)
