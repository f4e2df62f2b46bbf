"""``farm run``'s progress: first a line of how many runs the design makes and, where the
store has timed them, about how long; then on a terminal a bar over the runs with the
planned range and the time left; in a pipe or a log, one plain line per finished block
with the same; a line per failed job."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from farm.cli.dry_run import design_totals
from farm.cli.forecast import JobRuns, RunForecast
from farm.errors import FarmError
from farm.matrix.spec import JobSpec
from farm.report.cells import clean_lines
from farm.results.runs import ArmCost
from farm.runner import RunResult, run_range, runs_per_pair
from farm.stats.design import StopDecision
from farm.words import plural


@dataclass
class _Block:
    """The block whose runs come in: its line's start, its speeds, how many it makes."""

    key: tuple[int, str, int]  # job, arm, block
    label: str
    runs: int
    speeds: list[float] = field(default_factory=list)


class RunProgress:
    """A ``farm.runner.Progress`` drawn with rich on ``console``. ``costs`` (a run's and a
    block start's seconds by build and model file, ``farm.workflows.reports.measured_costs``):
    the up-front estimate's; None prints no up-front line."""

    def __init__(self, console: Console,
                 costs: Mapping[tuple[str, str], ArmCost] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console, self.costs, self.clock = console, costs, clock
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            TextColumn("{task.fields[runs]}"), TimeElapsedColumn(),
                            TextColumn("{task.fields[left]}"), console=console,
                            disable=not console.is_terminal)
        self.task = self.bar.add_task("starting", total=0, runs="", left="")
        self.forecast = RunForecast([], clock())
        self.label = ""
        self.block: _Block | None = None  # in a pipe: the block whose line is not out yet

    def start(self, pending: Sequence[JobSpec], skipped: int) -> None:
        """The design's runs and time up front, then the bar over them."""
        if skipped:
            self.console.print(f"{skipped} of {plural(len(pending) + skipped, 'job')} already "
                               "done: skipped")
        if self.costs is not None and pending:
            self.console.print(f"to run: {design_totals(pending, self.costs)}", markup=False,
                               soft_wrap=True)
        self.forecast = RunForecast([JobRuns(runs_per_pair(spec), *run_range(spec))
                                     for spec in pending], self.clock())
        self._update()
        self.bar.start()

    def job(self, index: int, count: int, spec: JobSpec, runs_done: int) -> None:
        """A job starts: its label, and the runs it already has."""
        self._flush()
        self.label = f"job {index}/{count} {spec.model.name} {spec.variant.name}"
        self.forecast.job_started(index - 1, runs_done)
        self.bar.update(self.task, description=self.label)
        self._update()

    def run(self, result: RunResult) -> None:
        """A run finished: one more, with its decode speed."""
        tok_s = result.generation.decode_tok_s
        self.forecast.ran(self.clock())
        line = f"{self.label} · {result.key.arm} block {result.slot.block}"
        self.bar.update(self.task, description=f"{line} · {tok_s:.1f} tok/s")
        self._update()
        if self.console.is_terminal:
            return
        key = (self.forecast.current, result.key.arm, result.slot.block)
        if self.block is None or self.block.key != key:
            self._flush()
            per_block = self.forecast.jobs[self.forecast.current].per_pair // 2
            self.block = _Block(key, line, per_block)
        self.block.speeds.append(tok_s)
        # A pair's second block waits for the pair's decision, which may narrow the plan.
        if len(self.block.speeds) == self.block.runs and result.slot.position == 0:
            self._flush()

    def decision(self, decision: StopDecision) -> None:
        """A pair ended: the job's stopping rule bounds its pairs anew."""
        self.forecast.planned(decision.pairs)
        self._update()
        self._flush()

    def failed(self, spec: JobSpec, error: FarmError) -> None:
        """A job failed: one line."""
        self.forecast.ended()
        self._update()
        self._flush()
        # Styled as Text: the error is shown as written (a "[...]" in it is no markup).
        self.console.print(Text.assemble((f"job {spec.job_key[:10]} failed:", "red"),
                                         f" {clean_lines(str(error))}"))

    def close(self) -> None:
        """Stop drawing the bar."""
        self._flush()
        self.bar.stop()

    def _update(self) -> None:
        forecast = self.forecast
        self.bar.update(self.task, total=forecast.most, completed=forecast.done,
                        runs=forecast.runs_text(), left=forecast.left_text())

    def _flush(self) -> None:
        """In a pipe: the open block's line, with the runs done, their range and the time
        left."""
        if self.block is None:
            return
        block, self.block = self.block, None
        self.console.print(f"{block.label} · {statistics.fmean(block.speeds):.1f} tok/s · "
                           f"{self.forecast.runs_text()} · {self.forecast.left_text()}",
                           markup=False, soft_wrap=True)
