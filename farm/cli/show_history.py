"""What ``farm history`` prints or writes, and the regression gate of ``farm history`` and
``farm compare`` (``--fail-on-regression``: exit ``REGRESSION_EXIT`` when a series
regressed beyond its threshold by the test; for a history, the gate's test of each job's
newest build, ``farm.stats.changes``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from farm.errors import ConfigError
from farm.report import kinds
from farm.report.cells import clean
from farm.settings import Settings

if TYPE_CHECKING:
    import pandas as pd

# The exit code of a gate that found a regression (0 success, 1 failure, 2 bad input).
REGRESSION_EXIT = 3
_GATE = re.compile(r"^(?P<series>[a-z_0-9]+)(:(?P<threshold>\d+(\.\d+)?)%?)?$")
# Names a gate may give besides the series themselves.
_FAMILIES = ("all", "acceptance")


def thresholds(gates: tuple[str, ...], known: set[str],
               families: tuple[str, ...] = _FAMILIES) -> dict[str, float]:
    """``--fail-on-regression`` values (SERIES[:PERCENT]) as series -> fraction; a bad one
    is a ConfigError naming the series this command knows."""
    parsed: dict[str, float] = {}
    for gate in gates:
        found = _GATE.match(gate)
        names = sorted(known) + list(families)
        if not found or found["series"] not in names:
            raise ConfigError(f"--fail-on-regression {gate!r}: give SERIES or SERIES:PERCENT "
                              f"(e.g. speedup:5 fails on a speedup 5% lower), SERIES one of "
                              f"{', '.join(names)}")
        parsed[found["series"]] = float(found["threshold"] or 0) / 100.0
    return parsed


def fail_on(regressed: pd.DataFrame, what: str) -> None:
    """Exit ``REGRESSION_EXIT`` naming each regression in ``regressed`` (rows of changes:
    key, series, build_a, build_b, change), if any."""
    if regressed.empty:
        return
    for row in regressed.to_dict(orient="records"):
        click.echo(clean(f"regression: {what} {str(row['key'])[:12]} {row['series']} "
                         f"{(float(row['change']) - 1) * 100:+.1f}% ({row['build_a']} -> "
                         f"{row['build_b']}, q {float(row['q_value']):.3g})"), err=True)
    raise click.exceptions.Exit(REGRESSION_EXIT)


def show_history(settings: Settings, target: str, fmt: str, output: Path | None,
                 gates: tuple[str, ...], *, wide: bool = False) -> None:
    """``farm history TARGET``: the table, markdown, JSON or HTML page; the gate after."""
    from farm.report.formats import Target, check_target, write
    from farm.stats.changes import beyond
    from farm.workflows.reports import key_history

    check_target(kinds.History, fmt, output)
    loaded = key_history(settings, target)
    found = loaded.history
    limits = thresholds(gates, set(found.points["series"]))
    write(kinds.History(found, f"history of {loaded.title}"), fmt, Target(wide, output))
    if limits:
        gated = found.changes[found.changes["gate_verdict"] != ""]
        _differs(gated)
        fail_on(beyond(gated, limits, "gate_verdict"), "job")


def _differs(gated: pd.DataFrame) -> None:
    """Say where the gate's call of a newest transition is not the history's own (the gate
    tests the newest build as its own family; the history's calls are LORD++ over every
    tracked build: docs/history.md)."""
    for row in gated[gated["gate_verdict"] != gated["verdict"]].to_dict(orient="records"):
        click.echo(clean(f"note: {str(row['key'])[:12]} {row['series']} {row['build_a']} -> "
                         f"{row['build_b']}: the gate calls it {row['gate_verdict']}, the "
                         f"history's running calls {row['verdict']}"), err=True)


def gate_comparison(frame: pd.DataFrame, gates: tuple[str, ...]) -> None:
    """``farm compare --fail-on-regression``: the speedup of each matching job."""
    from farm.stats.changes import beyond

    limits = thresholds(gates, {"speedup"}, ("all",))
    fail_on(beyond(frame.assign(series="speedup"), limits), "job")
    if limits:
        print("no regression beyond the thresholds", file=sys.stderr)
