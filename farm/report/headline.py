"""The answer a report opens with: per campaign, model and GPU class, the best variant and
its interval, or "no clear gain" (and the fastest with its interval, which includes 1x);
and the slowest variant whose interval lies below 1x, named "slower".

Nothing is computed anew. The pick is the job ``farm.results.rows._best_of`` marks (the
fastest of the m >= 2 variants with an interval), else the only one with an interval; a
faster-looking job without one is named after it, "no interval yet". The pick's own 95%
interval is quoted as the table shows it; a pick of m >= 2 also gets the simultaneous
interval of the best-of-m rule (``best_low``/``best_high``), labelled "best-of-m
interval", the one the table's "best of m" flag gives. A gain is claimed only when the
interval it is judged on (that one, or a lone variant's own) lies above 1x. "Slower"
reads the plain interval, as the table does. A report whose jobs all ran on the unnamed
GPU class (``default``: no ``FARM_GPU_CLASS`` set) names none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from farm.report import cells

if TYPE_CHECKING:
    import pandas as pd


# What a headline reads of a report row (a frame of jobs without them has none).
_NEEDED = {"campaign", "model", "gpu_class", "kind", "variant", "speedup", "ci_low", "ci_high"}

# The GPU class of a machine that names none (FARM_GPU_CLASS unset).
UNNAMED_CLASS = "default"


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
    unnamed = {row["gpu_class"] for row in rows} == {UNNAMED_CLASS}
    return {(campaign, model, gpu_class):
            f"{campaign} · {model}{'' if unnamed else f' · {gpu_class}'}: {_verdict(group)}"
            for (campaign, model, gpu_class), group in groups.items()}


def _verdict(group: Sequence[Mapping[str, Any]]) -> str:
    """The pick of one group of variant jobs and what its interval says; then the slowest
    job that is clearly slower, if another; then the fastest-looking job, if it has no
    interval yet."""
    measured = [row for row in group if not cells.missing(row["speedup"])]
    if not measured:
        return "no speedup measured yet"
    framed = [row for row in measured if _framed(row)]
    if not framed:
        # The first of equally fast jobs, in report order.
        best = max(measured, key=lambda row: row["speedup"])
        return f"no clear gain ({_named(best)}, no interval yet)"
    best = next((row for row in framed if not cells.missing(row.get("best_of"))),
                max(framed, key=lambda row: row["speedup"]))
    said = _picked(best)
    slower = sorted((row for row in framed if row is not best and row["ci_high"] < 1),
                    key=lambda row: row["speedup"])
    if slower:
        said += _slower(slower)
    fastest = max(measured, key=lambda row: row["speedup"])
    if fastest["speedup"] > best["speedup"]:
        # Faster-looking but not a pick: without an interval, it may be only noise.
        said += f"; {_named(fastest)}, no interval yet"
    return said


def _slower(slower: Sequence[Mapping[str, Any]]) -> str:
    """The slowest of the clearly slower jobs, and how many more there are."""
    slowest = slower[0]
    said = f"; {_named(slowest)} {cells.bracket(slowest['ci_low'], slowest['ci_high'])}, slower"
    more = len(slower) - 1
    return said + (f", as {'is' if more == 1 else 'are'} {more} more" if more else "")


def _framed(row: Mapping[str, Any]) -> bool:
    return not (cells.missing(row["ci_low"]) or cells.missing(row["ci_high"]))


def _named(row: Mapping[str, Any]) -> str:
    return f"{row['variant']} {cells.ratio(row['speedup'])}"


def _picked(best: Mapping[str, Any]) -> str:
    """The pick with its own interval, and its best-of-m interval when it is one of m >= 2:
    a gain, "slower", or "no clear gain"."""
    said = f"{_named(best)} {cells.bracket(best['ci_low'], best['ci_high'])}"
    low = best["ci_low"]
    if not cells.missing(best.get("best_of")):
        said += (f", best-of-{int(best['best_of'])} interval "
                 f"{cells.bracket(best['best_low'], best['best_high'])}")
        low = best["best_low"]
    if not cells.missing(low) and low > 1:
        return said
    if best["ci_high"] < 1:
        return f"{said}, slower"
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
