"""``farm status`` and ``farm workers`` on the terminal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from rich.console import Console

from farm.report.cells import clean
from farm.report.sheet import plain_sheet, table_text, terminal_width
from farm.words import plural


class CampaignStatus(Protocol):
    """What the status of a campaign holds (``farm.fleet.status.CampaignStatus``)."""

    @property
    def campaign(self) -> str:
        """The campaign's name."""

    @property
    def counts(self) -> Mapping[str, int]:
        """Jobs by state."""

    @property
    def running(self) -> Sequence[Sequence[object]]:
        """Running jobs: job, variant, worker, attempt, runs."""

    @property
    def failures(self) -> Sequence[Sequence[object]]:
        """Failed jobs: job, variant, reason."""

    @property
    def refused(self) -> Sequence[Sequence[object]]:
        """Pending jobs some workers could not make the build of: job, variant, reasons."""

    @property
    def eta_seconds(self) -> float | None:
        """About how long the campaign still takes."""

    @property
    def unposted(self) -> int:
        """Jobs waiting for reconciliation to post them again."""

    @property
    def waiting(self) -> Sequence[tuple[str, str, str, float | None, datetime]]:
        """Running jobs whose owner is overdue: job, variant, owner, seconds since its
        heartbeat (None: never registered), re-posted by (UTC)."""


def render_status(status: CampaignStatus, console: Console) -> None:
    """Print the state counts and ETA, then tables of the running and the failed jobs."""
    total = sum(status.counts.values())
    summary = ", ".join(f"{n} {state}" for state, n in status.counts.items() if n)
    eta = (f"; about {status.eta_seconds / 60:.0f} min left" if status.eta_seconds else "")
    # The campaign's name is the store's: cleaned as every table cell is.
    console.print(clean(f"campaign {status.campaign}: {plural(total, 'job')}: "
                        f"{summary or 'none'}{eta}"), markup=False)
    if status.unposted:
        console.print(f"{status.unposted} waiting for reconciliation (message lost or "
                      "overdue; a live worker re-posts them, or run `farm submit` again)",
                      markup=False)
    for job, variant, owner, silent, repost in status.waiting:
        console.print(clean(f"{job} {variant}: waiting for {owner}'s lease (last heartbeat "
                            f"{_ago(silent)}; re-posted by {repost.astimezone(UTC):%H:%M} "
                            "UTC at the latest)"), markup=False)
    _table("running", ("job", "variant", "worker", "attempt", "runs"), status.running)
    _table("handed back: these workers cannot make the build (another worker of the class "
           "may)", ("job", "variant", "refused by"), status.refused)
    _table("failed", ("job", "variant", "reason"), status.failures)


def _ago(seconds: float | None) -> str:
    """How long ago, in seconds under two minutes, else in minutes."""
    if seconds is None:
        return "none on record"
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A titled table of ``rows`` fitted to the terminal, printed only when there are some."""
    if rows:
        print(table_text([plain_sheet(title, headers, rows)], terminal_width()), end="")


def render_workers(rows: Sequence[Sequence[object]]) -> None:
    """Print every registered worker (``farm.fleet.status.worker_rows``)."""
    _table("workers", ("name", "class", "host", "devices", "builds", "models", "state",
                       "heartbeat"), rows)
