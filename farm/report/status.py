"""``farm status`` and ``farm workers`` on the terminal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from rich.console import Console
from rich.table import Table
from rich.text import Text

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


def _add_row(table: Table, cells: Iterable[object]) -> None:
    # As plain text: Rich would read "[request_failed]" or a sweep's "ngram[n-max=4]" as
    # markup and drop it.
    table.add_row(*(Text(str(cell)) for cell in cells))


def render_status(status: CampaignStatus, console: Console) -> None:
    """Print the state counts and ETA, then tables of the running and the failed jobs."""
    total = sum(status.counts.values())
    summary = ", ".join(f"{n} {state}" for state, n in status.counts.items() if n)
    eta = (f"; about {status.eta_seconds / 60:.0f} min left" if status.eta_seconds else "")
    console.print(f"campaign {status.campaign}: {plural(total, 'job')}: {summary or 'none'}{eta}",
                  markup=False)
    if status.unposted:
        console.print(f"{status.unposted} waiting for reconciliation (message lost or "
                      "overdue; a live worker re-posts them, or run `farm submit` again)",
                      markup=False)
    _table("running", ("job", "variant", "worker", "attempt", "runs"), status.running,
           console)
    _table("handed back: these workers cannot make the build (another worker of the class "
           "may)", ("job", "variant", "refused by"), status.refused, console)
    _table("failed", ("job", "variant", "reason"), status.failures, console)


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]],
           console: Console) -> None:
    """A titled table of ``rows``, printed only when there are some."""
    if not rows:
        return
    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        _add_row(table, row)
    console.print(table)


def render_workers(rows: Sequence[Sequence[object]], console: Console) -> None:
    """Print every registered worker (``farm.fleet.status.worker_rows``)."""
    table = Table(title="workers", title_justify="left")
    for header in ("name", "class", "host", "devices", "builds", "models", "state", "heartbeat"):
        table.add_column(header, overflow="fold")
    for row in rows:
        _add_row(table, row)
    console.print(table)
