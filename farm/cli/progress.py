"""``farm run``'s progress: on a terminal a bar over the runs with the time left; in a pipe
or a log, one plain line per block; a line per failed job."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from farm.errors import FarmError
from farm.matrix.spec import JobSpec
from farm.words import plural
from workers.job.results import RunResult


class RunProgress:
    """A ``farm.runner.Progress`` drawn with rich on ``console``."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("left"), TimeRemainingColumn(), console=console,
                            disable=not console.is_terminal)
        self.task = self.bar.add_task("starting", total=0)
        self.label = ""
        self.block: tuple[str, str, int] | None = None  # the last block a line was printed for

    def start(self, jobs: int, skipped: int, least_runs: int) -> None:
        """The bar, over the least number of runs the jobs make."""
        if skipped:
            self.console.print(f"{skipped} of {plural(jobs + skipped, 'job')} already done: "
                               "skipped")
        self.bar.update(self.task, total=least_runs)
        self.bar.start()

    def job(self, index: int, count: int, spec: JobSpec, runs_done: int) -> None:
        """A job starts: its label, and the runs it already has."""
        self.label = f"job {index}/{count} {spec.model.name} {spec.variant.name}"
        self.bar.update(self.task, description=self.label, advance=runs_done)

    def run(self, result: RunResult) -> None:
        """A run finished: one more, with its decode speed."""
        tok_s = result.generation.decode_tok_s
        task = self.bar.tasks[0]
        if task.total is not None and task.completed + 1 > task.total:
            # The two-stage rule planned pairs beyond the least a job runs.
            self.bar.update(self.task, total=task.total + 1)
        line = f"{self.label} · {result.key.arm} block {result.slot.block} · {tok_s:.1f} tok/s"
        self.bar.update(self.task, advance=1, description=line)
        block = (self.label, result.key.arm, result.slot.block)
        if not self.console.is_terminal and block != self.block:
            self.block = block
            self.console.print(line, markup=False, soft_wrap=True)

    def failed(self, spec: JobSpec, error: FarmError) -> None:
        """A job failed: one line."""
        # Styled as Text: the error is shown as written (a "[...]" in it is no markup).
        self.console.print(Text.assemble((f"job {spec.job_key[:10]} failed:", "red"),
                                         f" {error}"))

    def close(self) -> None:
        """Stop drawing the bar."""
        self.bar.stop()
