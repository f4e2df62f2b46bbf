"""One job's steps, in order, for every way the farm runs one: `farm run` in-process on
the embedded store, a fleet worker under a lease, and the workflows built on `farm run`
(`farm track`, `farm bisect`).

1. **admit** the job against this node: its flags, paths and sources, before anything is
   downloaded or built (``workers.job.admission.admit``);
2. **fetch** its Hub and URL models (``workers.setup.download.fetch_models``);
3. **build** its source builds (``workers.setup.ondemand.with_source_builds``, under the
   node's build lock);
4. **measure**: resolved on the node (``workers.job.resolve.resolve``: `farm run` resolves
   each job as it checks the matrix, a worker once the job is prepared), checked, and its
   block pairs run with the build lock shared until its stop rule stops
   (``workers.job.executor.execute_job``);
5. **summarize**: its runs read back and summarized once, with the seconds its builds took
   (``farm.results.finish.finished_job_values``).

Finishing the job's row is the holder's: `farm run` marks it in its store, a worker
finishes its lease. `farm run` admits and fetches a whole matrix's jobs before it builds
any (``build``), a worker one job at a time (``prepare``). What else differs between them
is passed in: a ``Hold`` (how a step that meets an outage is tried, the job's clock, what
runs between blocks, the farm's other processes on the node) and the sink its runs go to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Engine

from farm.matrix.spec import JobSpec
from farm.results.finish import finished_job_values
from workers.job.admission import admit
from workers.job.executor import DecisionFn, ProgressFn, RunSink, execute_job
from workers.job.resolve import NodeFiles
from workers.job.results import Outcome
from workers.job.telemetry import GpuInfo
from workers.paths import NodePaths
from workers.setup.download import fetch_models
from workers.setup.hub import HubAccess
from workers.setup.ondemand import measuring, with_source_builds

T = TypeVar("T")


def _once(call: Callable[[], T]) -> T:
    return call()


def _no_clock() -> AbstractContextManager[None]:
    return nullcontext()


def _let_go(let_builds_go: Callable[[], float]) -> Callable[[], object]:
    return let_builds_go


@dataclass(frozen=True)
class Hold:
    """How a job is held while it runs. The defaults are `farm run`'s: each step tried
    once, no clock of its own, a waiting build of the node let go first before each block,
    no other farm process on the node. A worker passes its own (``workers.fleet.task``)."""

    gpus: Sequence[GpuInfo] = ()
    # Runs a step that may meet an outage (a download, a source's fetch).
    attempt: Callable[[Callable[[], Any]], Any] = _once
    # The job's own time limit, around the measurement (not its builds).
    clock: Callable[[], AbstractContextManager[None]] = _no_clock
    # Given the measurement's ``let_builds_go`` (``measuring``): what runs between blocks.
    between_blocks: Callable[[Callable[[], float]], Callable[[], object]] = _let_go
    # The pids of the farm's other workers on this node (their servers are not other work).
    siblings: Callable[[], Sequence[int]] = tuple
    on_run: ProgressFn | None = None
    on_decision: DecisionFn | None = None
    say: Callable[[str], None] = field(default=lambda _line: None)


@dataclass(frozen=True)
class Prepared:
    """A job admitted, its models here and its builds made: the node's files with them,
    and the seconds its builds took (0 when none was made)."""

    files: NodeFiles
    build_seconds: float


def prepare(spec: JobSpec, files: NodeFiles, paths: NodePaths, hub: HubAccess,
            sources: Sequence[str] | None, hold: Hold) -> Prepared:
    """Steps 1 to 3: admit the job (``sources``: the builds' sources the node allows; None
    on `farm run`), fetch its models into ``files``' downloads dir, make its builds."""
    admit(spec, files, sources)
    hold.attempt(lambda: fetch_models([spec], files.downloads_dir, hub, hold.say))
    return build(spec, files, paths, sources, hold)


def build(spec: JobSpec, files: NodeFiles, paths: NodePaths, sources: Sequence[str] | None,
          hold: Hold) -> Prepared:
    """Step 3 alone, for a job admitted and its models fetched (`farm run` does both for a
    whole matrix first, its errors naming the matrix's file and place)."""
    built: tuple[NodeFiles, float] = hold.attempt(lambda: with_source_builds(
        spec, files, paths, hold.gpus, sources))
    return Prepared(*built)


def measure(spec: JobSpec, files: NodeFiles, paths: NodePaths, sink: RunSink,
            hold: Hold) -> Outcome:
    """Step 4: the job (resolved on ``files``) run to its stop rule, its runs to ``sink``,
    with the node's build lock shared (no build beside a measurement) and the hold's clock
    running."""
    with measuring(paths) as let_builds_go, hold.clock():
        return execute_job(spec, sink, node=files, paths=paths,
                           gpus=hold.gpus, siblings=hold.siblings,
                           between_blocks=hold.between_blocks(let_builds_go),
                           on_run=hold.on_run, on_decision=hold.on_decision)


def summarize(engine: Engine, job_id: int, outcome: Outcome,
              build_seconds: float) -> dict[str, Any]:
    """Step 5: the finished job's summary (its runs read back from ``engine``), with the
    seconds its builds took (None when it made none)."""
    return {**finished_job_values(engine, job_id, outcome.checked.spec,
                                  asked=outcome.speculation_asked, pairs=outcome.pairs,
                                  stop_reason=outcome.stop_reason),
            "build_seconds": build_seconds or None}

