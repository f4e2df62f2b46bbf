"""Execute one job: baseline and variant arms in counterbalanced blocks on real servers.

This is the one function both ``farm run`` (in-process) and the Celery worker call. It
reads nothing from the store itself: what is already done and where results go come
through a ``RunSink``, so the caller decides how writes are guarded.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from farm.matrix.spec import ArmRole, JobSpec, Prompt
from workers.checks import Preflight, preflight
from workers.runtime.client import Generation, ServerClient, SpecCounters
from workers.runtime.server import LlamaServer

WARMUP_TOKENS = 8


@dataclass(frozen=True)
class RunKey:
    arm: ArmRole
    block: int
    prompt_id: str
    repetition: int


@dataclass(frozen=True)
class Slot:
    """Where a block sits in the design: its index, pair, and the arm's place in the pair."""

    block: int
    pair: int
    position: int
    role: ArmRole


@dataclass(frozen=True)
class RunResult:
    key: RunKey
    slot: Slot
    prompt: Prompt
    arm_name: str
    build_name: str
    generation: Generation
    counters: SpecCounters
    argv: list[str]
    server_log: str
    started_at: datetime


class RunSink(Protocol):
    """Where a job's runs go; implementations guard writes (e.g. by lease) as they need."""

    def done(self) -> set[RunKey]: ...

    def record(self, result: RunResult, checked: Preflight) -> None: ...


ProgressFn = Callable[[RunResult], None]


def schedule(pairs: int) -> list[Slot]:
    """Counterbalanced blocks: AB, BA, AB, ... so a linear drift favours neither arm."""
    slots = []
    for pair in range(pairs):
        order: tuple[ArmRole, ArmRole] = (("baseline", "variant") if pair % 2 == 0
                                          else ("variant", "baseline"))
        for position, role in enumerate(order):
            slots.append(Slot(block=2 * pair + position, pair=pair, position=position,
                              role=role))
    return slots


def execute_job(spec: JobSpec, sink: RunSink, *, logs_dir: Path,
                on_run: ProgressFn | None = None) -> None:
    """Run every missing run of ``spec``; raises a ``FarmError`` on failure."""
    checked = preflight(spec)
    done = sink.done()
    for slot in schedule(spec.pairs):
        todo = [(prompt, rep) for prompt in spec.prompts for rep in range(spec.repetitions)
                if RunKey(slot.role, slot.block, prompt.id, rep) not in done]
        if todo:
            _run_block(spec, slot, todo, sink, checked, logs_dir, on_run)


def _run_block(spec: JobSpec, slot: Slot, todo: list[tuple[Prompt, int]], sink: RunSink,
               checked: Preflight, logs_dir: Path, on_run: ProgressFn | None) -> None:
    arm = spec.arm(slot.role)
    log_path = logs_dir / spec.job_key[:16] / f"block{slot.block}-{slot.role}.log"
    server = LlamaServer(spec.build.local_path, spec.model.local_path, arm.argv, log_path)
    with server, ServerClient(server.base_url) as client:
        argv = server.argv(server.port)
        client.generate(todo[0][0].text, mode=spec.prompt_mode, n_predict=WARMUP_TOKENS,
                        sampling=spec.sampling)
        for prompt, repetition in todo:
            started = datetime.now(UTC)
            before = client.spec_counters()
            generation = client.generate(prompt.text, mode=spec.prompt_mode,
                                         n_predict=spec.n_predict, sampling=spec.sampling)
            counters = client.spec_counters() - before
            result = RunResult(
                key=RunKey(slot.role, slot.block, prompt.id, repetition), slot=slot,
                prompt=prompt, arm_name=arm.name, build_name=spec.build.name,
                generation=generation, counters=counters,
                argv=argv, server_log=str(log_path), started_at=started)
            sink.record(result, checked)
            if on_run:
                on_run(result)


def host_name() -> str:
    return socket.gethostname()
