"""A real `farm worker` with a null engine, for tests/bench/bench_fleet_workers.py only.

Everything of the worker is the farm's own (Celery, the claim, the lease and its keeper,
the heartbeat with its reaping and reconciliation, the finish with its summary) except the
measurement: a job "runs" by sleeping for ``NULL_BLOCK_SECONDS`` and writing one
synthetic run per arm under its lease. No farm command can select this engine (no flag,
no matrix key): it exists only in this module, which the bench starts with
``python -m tests.bench.null_worker worker ...``.

It also appends what the bench measures to files in ``NULL_WORKER_LOG`` (a folder): each
claim's seconds, each reconciliation's seconds and whether it read a queue.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from farm.fleet import reconcile as reconciling
from farm.matrix.spec import JobSpec
from farm.store import leases
from farm.store.models import Run
from workers.fleet import daemon, task
from workers.job.checks import Preflight
from workers.job.model_info import ModelInfo
from workers.job.results import Outcome

BLOCK_SECONDS = float(os.environ.get("NULL_BLOCK_SECONDS", "2"))
LOG = Path(os.environ.get("NULL_WORKER_LOG", "."))
T = TypeVar("T")
_MODEL = ModelInfo(file_name="null.gguf", size=1, sha256="0" * 64, architecture="null",
                   file_type="F16", n_params=1, context_length=None, has_chat_template=False,
                   nextn_layers=0, vocab_size=1, tokenizer="null", vocab_hash="0" * 64)


def _record(kind: str, seconds: float, extra: str = "") -> None:
    with (LOG / f"{kind}-{os.getpid()}.txt").open("a") as out:
        out.write(f"{seconds:.6f} {extra}\n")


def _timed(kind: str, call: Callable[..., T]) -> Callable[..., T]:
    """``call``, its seconds logged with the wall-clock time it began."""
    def timed(*args: Any, **kwargs: Any) -> T:
        began, started = time.time(), time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            _record(kind, time.perf_counter() - started, f"{began:.3f}")
    return timed


def _held_jobs(app: Any, queues: Any, taken_within: float) -> set[int]:
    names = list(queues)
    _record("queue-read", 0.0, str(len(names)))
    return held(app, names, taken_within)


def _run(job_id: int, arm: str) -> Run:
    return Run(job_id=job_id, arm=arm, arm_name=arm, block=0 if arm == "baseline" else 1,
               pair=0, position=0, prompt_id="p", prompt_category="c", repetition=0,
               prompt_tokens=16, generated_tokens=32, decode_tok_s=100.0, ttft_ms=10.0,
               e2e_ms=330.0, text="null", server_version="null", build_name="cpu",
               model_file="null.gguf", model_size=1, model_sha256="0" * 64, host="null",
               argv=[], started_at=datetime.now(UTC))


def _null_measure(worker: task.WorkerContext, lease: leases.Lease, spec: JobSpec,
                  keeper: Any) -> tuple[Outcome, float]:
    del keeper  # renewing the lease as a real job does, in its thread
    time.sleep(BLOCK_SECONDS)
    with leases.holding(worker.engine(), lease) as session:
        session.add_all([_run(lease.job_id, "baseline"), _run(lease.job_id, "variant")])
    return Outcome(Preflight(spec, {}, _MODEL), 1, "null engine"), 0.0


held = reconciling.held_jobs
reconciling.held_jobs = _held_jobs
setattr(daemon, "reconcile", _timed("reconcile", reconciling.reconcile))  # noqa: B010
leases.claim = _timed("claim", leases.claim)
task._measure = _null_measure

if __name__ == "__main__":
    from farm.cli import main

    sys.argv[0] = "farm"
    main()
