"""The answer a report opens with: per campaign, model and GPU class, the best variant and
its interval, or "no clear gain" (and the fastest with its interval, which includes 1x).

Nothing is computed anew: the fastest of m >= 2 variants carries the simultaneous interval
of the best-of-m rule (``best_low``/``best_high``, ``farm.results.rows._best_of``), a lone
variant its own 95% interval. A gain is claimed only when that interval lies above 1x.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from farm.report import cells

if TYPE_CHECKING:
    import pandas as pd


# What a headline reads of a report row (a frame of jobs without them has none).
_NEEDED = {"campaign", "model", "gpu_class", "kind", "variant", "speedup", "ci_low", "ci_high"}


def headlines(report: pd.DataFrame) -> list[str]:
    """One sentence per campaign x model x GPU class of ``report`` (``job_report``'s rows)
    that has variant jobs; none for a report without them."""
    if not set(report.columns) >= _NEEDED:
        return []
    rows = [{str(key): value for key, value in row.items()}
            for row in report.to_dict("records")]
    return list(dict.fromkeys(_sentences(rows).values()))


def with_headlines(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (``job_rows``), each with ``headline``: the sentence of its campaign x model x
    GPU class (None where that has no variant job), so a CSV or JSON export carries the
    report's answer on every row. Without pandas."""
    said = _sentences(rows) if rows and set(rows[0]) >= _NEEDED else {}
    return [{**row, "headline": said.get(_where(row)) if said else None} for row in rows]


def _where(row: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return row["campaign"], row["model"], row["gpu_class"]


def _sentences(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, Any, Any], str]:
    """Per campaign x model x GPU class with variant jobs, in report order, its sentence."""
    groups: dict[tuple[Any, Any, Any], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["kind"] == "variant":
            groups.setdefault(_where(row), []).append(row)
    said = {}
    for (campaign, model, gpu_class), group in groups.items():
        where = f"{campaign} · {model} · {gpu_class}"
        measured = [row for row in group if not cells.missing(row["speedup"])]
        if not measured:
            said[campaign, model, gpu_class] = f"{where}: no speedup measured yet"
            continue
        # The first of equally fast jobs, in report order.
        best = max(measured, key=lambda row: row["speedup"])
        said[campaign, model, gpu_class] = f"{where}: {_verdict(best, len(measured))}"
    return said


def _verdict(best: Any, m: int) -> str:
    if m >= 2 and not cells.missing(best.get("best_low")):
        low, high, how = best["best_low"], best["best_high"], f", best of {m}"
    else:
        low, high, how = best["ci_low"], best["ci_high"], ""
    said = f"{best['variant']} {cells.ratio(best['speedup'])}"
    if cells.missing(low) or cells.missing(high):
        return f"no clear gain ({said}, no interval yet)"
    said += f" {cells.bracket(low, high)}{how}"
    if low > 1:
        return said
    return f"no clear gain ({said})"


def provenance(runs: pd.DataFrame) -> list[str]:
    """Where and with what the runs were measured: llama-server versions, hosts, devices
    (GPU names, or CPU), and the UTC span of their starts."""
    if runs.empty:
        return []

    def listed(column: str, missing: str = "") -> str:
        if column not in runs:
            return cells.MISSING
        values = runs[column].map(lambda value: missing if cells.missing(value)
                                  else str(value).splitlines()[0] if str(value) else missing)
        return ", ".join(sorted(set(values) - {""})) or cells.MISSING

    import pandas as pd

    started = pd.to_datetime(runs["started_at"], utc=True) if "started_at" in runs else None
    span = (cells.MISSING if started is None or started.isna().all() else
            f"{started.min():%Y-%m-%d %H:%M} to {started.max():%Y-%m-%d %H:%M} UTC")
    return [f"llama-server: {listed('server_version')}", f"hosts: {listed('host')}",
            f"devices: {listed('gpu_name', 'CPU')}", f"measured: {span}"]
