"""Where the executor's results go: run, stream and GPU sample rows in the store (the
job's summary is ``farm.results.finish``'s, written with its final state).

``DbRunSink`` writes straight to the store (``farm run``, the single owner);
``LeasedRunSink`` writes only under a worker's lease on the job (the fleet).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from farm.matrix.spec import Arm
from farm.retry import retrying
from farm.run_metrics import RUN_METRICS
from farm.store import leases, repo
from farm.store.models import GpuSample, Job, Run, Stream
from workers.job.checks import Preflight
from workers.job.executor import host_name
from workers.job.results import RunKey, RunResult, Slot
from workers.job.telemetry import Sample

log = logging.getLogger("farm.worker")


def _commit(arm: Arm) -> str | None:
    """The commit a source build was made from; None for a build by name."""
    return arm.build.source.commit if arm.build.source is not None else None


class DbRunSink:
    """Runs of one job, written straight to the store (the embedded, single-owner case), by
    a machine of GPU class ``machine_class``."""

    def __init__(self, engine: Engine, job_id: int, machine_class: str) -> None:
        self.engine, self.job_id, self.machine_class = engine, job_id, machine_class
        self.host = host_name()

    def done(self) -> dict[RunKey, float]:
        """Runs already stored, with their decode tok/s (for the stopping rule)."""
        with Session(self.engine) as session:
            rows = session.execute(select(Run.arm, Run.block, Run.prompt_id, Run.repetition,
                                          Run.__table__.c.decode_tok_s)
                                   .where(Run.job_id == self.job_id))
            return {RunKey(arm, block, prompt, rep): tok_s
                    for arm, block, prompt, rep, tok_s in rows}

    def start(self, checked: Preflight) -> None:
        """Store the model and the job's flag translations before its first run."""
        with Session(self.engine) as session, session.begin():
            self._write_start(session, checked)

    def _write_start(self, session: Session, checked: Preflight) -> None:
        repo.ensure_model(session, asdict(checked.model))
        session.execute(update(Job).where(Job.id == self.job_id)
                        .values(translations=checked.translations))

    def record(self, result: RunResult, checked: Preflight) -> None:
        """Store one run."""
        with Session(self.engine) as session, session.begin():
            session.add(run_row(self.job_id, result, checked, self.host, self.machine_class))

    def record_samples(self, slot: Slot, samples: list[Sample]) -> None:
        """Store one block's GPU samples."""
        with Session(self.engine) as session, session.begin():
            session.add_all(sample_rows(self.job_id, 1, slot, samples))


def sample_rows(job_id: int, attempt: int, slot: Slot, samples: list[Sample]) -> list[GpuSample]:
    """One block's GPU samples as rows, timed from the block's first sample."""
    first = samples[0].t if samples else 0.0
    return [GpuSample(job_id=job_id, attempt=attempt, block=slot.block, t=sample.t - first,
                      device=sample.device, vram_used_mb=sample.vram_used_mb,
                      power_w=sample.power_w, sm_clock_mhz=sample.sm_clock_mhz,
                      mem_clock_mhz=sample.mem_clock_mhz, temperature_c=sample.temperature_c,
                      throttle_reasons=sample.throttle_reasons, energy_mj=sample.energy_mj)
            for sample in samples]


def run_row(job_id: int, result: RunResult, checked: Preflight, host: str,
            machine_class: str, worker_name: str | None = None, attempt: int = 1) -> Run:
    """The row of one run: its place, its metrics (``metric_values``), its raw content and
    where and how it ran."""
    counters, node = result.counters, result.node.other
    return Run(
        job_id=job_id, arm=result.key.arm, arm_name=result.arm_name, block=result.slot.block,
        pair=result.slot.pair, position=result.slot.position, prompt_id=result.prompt.id,
        prompt_category=result.prompt.category, repetition=result.key.repetition,
        spec_accepted_per_pos=list(counters.accepted_per_pos), text=result.generation.text,
        server_version=checked.probe(result.key.arm).version,
        build_name=result.build_name, build_commit=_commit(checked.spec.arm(result.key.arm)),
        model_source=checked.spec.model.provenance,
        model_file=checked.model.file_name,
        model_size=checked.model.size, model_sha256=checked.model.sha256, host=host,
        argv=result.argv, sandboxed=result.sandboxed, server_log=result.server_log,
        worker_name=worker_name, attempt=attempt, started_at=result.started_at,
        throttle_reasons=result.telemetry.throttle_reasons or None, tokens=result.tokens,
        seed=result.seeds[0], gpu_name=result.gpu_name, gpu_memory_mb=result.gpu_memory_mb,
        machine_class=machine_class, concurrency=len(result.streams),
        node_top=[[name, pid, round(cores, 3)] for name, pid, cores in node.top
                  if cores >= 0.01] if node else None,
        streams=stream_rows(result), **metric_values(result))


def metric_values(result: RunResult) -> dict[str, Any]:
    """Each run metric's value (``farm.run_metrics``), found in ``result`` where its
    ``source`` says: a None on the way (no speculative statistics, no memory in the log,
    no /proc) makes it null."""
    values = {}
    for metric in RUN_METRICS:
        value: Any = result
        for name in metric.source.split("."):
            value = None if value is None else getattr(value, name)
        values[metric.name] = value
    return values


def stream_rows(result: RunResult) -> list[Stream]:
    """The rows of a run's simultaneous streams, timed in ms from its first request (none
    for a run of one stream: its row is the stream's)."""
    if len(result.streams) == 1:
        return []
    origin = min(stream.sent_at for stream in result.streams)
    return [Stream(stream=index, slot=gen.slot, seed=seed, prompt_tokens=gen.prompt_tokens,
                   generated_tokens=gen.generated_tokens, prompt_tok_s=gen.prompt_tok_s,
                   decode_tok_s=gen.decode_tok_s, ttft_ms=gen.ttft_ms, e2e_ms=gen.e2e_ms,
                   draft_n=gen.draft_n, draft_accepted=gen.draft_accepted,
                   sent_ms=(gen.sent_at - origin) * 1000.0,
                   first_ms=(gen.first_at - origin) * 1000.0,
                   last_ms=(gen.last_at - origin) * 1000.0)
            for index, (gen, seed) in enumerate(zip(result.streams, result.seeds, strict=True))]


class LeasedRunSink(DbRunSink):
    """Runs written only while this worker's lease on the job holds (``lost`` is set by the
    lease keeper); a write that meets a database outage is retried for ``retry_for`` s."""

    def __init__(self, engine: Engine, lease: leases.Lease, lost: threading.Event,
                 worker_name: str, machine_class: str, retry_for: float) -> None:
        super().__init__(engine, lease.job_id, machine_class)
        self.lease, self.lost, self.worker_name = lease, lost, worker_name
        self.retry_for = retry_for

    def _write(self, write: Callable[[Session], None]) -> None:
        def attempt() -> None:
            if self.lost.is_set():
                raise leases.LeaseLost(f"job {self.lease.job_id}: lease lost; stopping")
            with leases.holding(self.engine, self.lease) as session:
                write(session)

        retrying(attempt, within=self.retry_for, what=f"job {self.job_id}: writing", log=log)

    def start(self, checked: Preflight) -> None:
        """As :meth:`DbRunSink.start`, only while the lease holds."""
        self._write(lambda session: self._write_start(session, checked))

    def record(self, result: RunResult, checked: Preflight) -> None:
        """Store one run, only while the lease holds."""
        self._write(lambda session: session.add(run_row(
            self.job_id, result, checked, self.host, self.machine_class, self.worker_name,
            self.lease.attempt)))

    def record_samples(self, slot: Slot, samples: list[Sample]) -> None:
        """Store one block's GPU samples, only while the lease holds."""
        self._write(lambda session: session.add_all(
            sample_rows(self.job_id, self.lease.attempt, slot, samples)))
