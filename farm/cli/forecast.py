"""What ``farm run``'s progress counts: the runs its jobs make as their designs plan them
(a range while a two-stage job's second stage is unknown, narrowed to the plan once its
first stage fixes it), the runs done, and the time left at the plan's upper bound."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class JobRuns:
    """One job's runs: ``per_pair`` in each block pair, the fewest and the most it makes in
    all as far as its design knows, and how many are done."""

    per_pair: int
    least: int
    most: int
    done: int = 0


class RunForecast:
    """The runs of a campaign's pending jobs and the time they have left, on a clock the
    caller reads (``time.monotonic``'s seconds, or a test's)."""

    def __init__(self, jobs: Sequence[JobRuns], started: float) -> None:
        self.jobs = list(jobs)
        self.current = 0
        self.started = started
        self.timed = 0  # runs made since ``started`` (stored ones took no time of this run)
        self.last = started

    @property
    def done(self) -> int:
        """Runs done, a resumed job's stored ones included once it starts."""
        return sum(job.done for job in self.jobs)

    @property
    def least(self) -> int:
        """The fewest runs the jobs make in all."""
        return sum(job.least for job in self.jobs)

    @property
    def most(self) -> int:
        """The most runs the jobs make in all: the plan's current upper bound."""
        return sum(job.most for job in self.jobs)

    def job_started(self, index: int, stored: int) -> None:
        """Job ``index`` (from 0) starts with ``stored`` runs already done."""
        self.current = index
        self.jobs[index].done = stored

    def ran(self, now: float) -> None:
        """The current job made one more run, at ``now``."""
        self.jobs[self.current].done += 1
        self.timed += 1
        self.last = now

    def planned(self, pairs: tuple[int, int]) -> None:
        """The current job's stopping rule now bounds its pairs by ``pairs`` (equal once it
        stops)."""
        job = self.jobs[self.current]
        job.least = max(pairs[0] * job.per_pair, job.done)
        job.most = max(pairs[1] * job.per_pair, job.least)

    def ended(self) -> None:
        """The current job ended where it is (it failed): no more runs from it."""
        job = self.jobs[self.current]
        job.least = job.most = job.done

    def seconds_left(self) -> float | None:
        """The time per run so far times the runs left at the upper bound; None before a
        run is timed. Never 0 while a run is left."""
        if not self.timed:
            return None
        left = self.most - self.done
        return max(1.0, math.ceil((self.last - self.started) / self.timed * left)) if left else 0.0

    def runs_text(self) -> str:
        """``runs 150 of 288-432`` while the plan is a range, ``runs 150 of 396`` once fixed."""
        span = str(self.most) if self.least == self.most else f"{self.least}-{self.most}"
        return f"runs {self.done} of {span}"

    def left_text(self) -> str:
        """``left up to 0:05:12`` while the plan is a range (the time at its upper bound),
        ``left 0:05:12`` once fixed, ``left -:--:--`` before a run is timed."""
        seconds = self.seconds_left()
        if seconds is None:
            return "left -:--:--"
        minutes, secs = divmod(int(seconds), 60)
        hours, minutes = divmod(minutes, 60)
        bound = "up to " if self.least != self.most else ""
        return f"left {bound}{hours}:{minutes:02d}:{secs:02d}"
