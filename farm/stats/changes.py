"""Changes in a history: each series between consecutive builds, called at a controlled
false discovery rate across every series and build of the history, told in words, and
gated on (``farm history --fail-on-regression``).

The test is ``farm.stats.difference.difference`` of the two builds' log values (each with
its standard error and df) or, where a job ran that series' arm on both builds in one
paired job (``farm track --paired``), that job's own speedup against 1 (its crossover
interval: no drift between two jobs in it). Benjamini-Hochberg holds the expected share of
false calls among the calls at ``FDR`` over all the series x transitions tested together.
Its measured false alarms and power: docs/history.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from farm.stats.difference import FDR, adjusted_p_values, difference
from farm.stats.history import ACCEPTANCE, COSTS, LENGTH, series_label, series_order
from farm.stats.intervals import NAN

# What a point of a history holds (one series of one job on one build).
POINT_COLUMNS = ("key", "series", "order", "build", "value", "log_se", "df")
CHANGE_COLUMNS = ("key", "series", "build_a", "build_b", "order_b", "value_a", "value_b",
                  "change", "change_low", "change_high", "p_value", "paired", "q_value",
                  "verdict")
# A paired estimate of a change (one job across two builds): its key, series, builds,
# change with interval and p value.
PAIRED_COLUMNS = ("key", "series", "build_a", "build_b", "change", "change_low",
                  "change_high", "p_value")


def _test(before: Mapping[Any, Any], after: Mapping[Any, Any]) -> tuple[float, ...]:
    """change, its interval and p value of one series between two builds. Two values with
    no spread at all (every draft accepted on both) are unchanged if equal, untested if not."""
    a, b = float(before["value"]), float(after["value"])
    if not (a > 0 and b > 0):
        return NAN, NAN, NAN, NAN
    se_a, se_b = float(before["log_se"]), float(after["log_se"])
    if se_a == 0.0 and se_b == 0.0:
        return (1.0, 1.0, 1.0, 1.0) if a == b else (b / a, NAN, NAN, NAN)
    found = difference(math.log(a), se_a, float(before["df"]), math.log(b), se_b,
                       float(after["df"]))
    return found.change, found.low, found.high, found.p_value


def _verdict(series: str, change: float, called: bool, p_value: float) -> str:
    if not math.isfinite(p_value):
        return "no test"
    if not called:
        return "unchanged"
    worse = change > 1.0 if series in COSTS else change < 1.0
    return "regression" if worse else "improvement"


def find_changes(points: pd.DataFrame, rate: float = FDR,
                 paired: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every series of every job (``key``) between each pair of consecutive builds
    (``order``) where it has values: the change (after over before) with its 95% interval,
    p value, Benjamini-Hochberg q value over all the tests, and the verdict ("regression",
    "improvement", "unchanged", "no test") at false discovery rate ``rate``. ``paired``
    (``PAIRED_COLUMNS``): changes measured in one job across the two builds, used instead
    of the two builds' values where present (``paired`` True)."""
    measured = {} if paired is None else {
        (row["key"], row["series"], row["build_a"], row["build_b"]): row
        for row in paired.to_dict(orient="records")}
    rows = []
    for (key, series), group in points.groupby(["key", "series"], sort=False):
        ordered = group.sort_values("order").to_dict(orient="records")
        for before, after in itertools.pairwise(ordered):
            one = measured.get((key, series, before["build"], after["build"]))
            change, low, high, p_value = _test(before, after) if one is None else (
                one["change"], one["change_low"], one["change_high"], one["p_value"])
            rows.append({"key": key, "series": series, "build_a": before["build"],
                         "build_b": after["build"], "order_b": after["order"],
                         "value_a": before["value"], "value_b": after["value"],
                         "change": change, "change_low": low, "change_high": high,
                         "p_value": p_value, "paired": one is not None})
    changes = pd.DataFrame(rows, columns=list(CHANGE_COLUMNS[:-2]))
    changes["q_value"] = adjusted_p_values(changes["p_value"].astype(float).tolist())
    changes["verdict"] = [
        _verdict(series, change, math.isfinite(q) and q <= rate, p)
        for series, change, q, p in zip(changes["series"], changes["change"].astype(float),
                                        changes["q_value"].astype(float),
                                        changes["p_value"].astype(float), strict=True)]
    return changes


def _signed(change: float) -> str:
    return f"{(change - 1.0) * 100:+.0f}%"


def _moved(row: Mapping[Any, Any]) -> str:
    return (f"{series_label(str(row['series']))} {_signed(float(row['change']))} "
            f"[{_signed(float(row['change_low']))}, {_signed(float(row['change_high']))}]"
            + (" (paired)" if row.get("paired") else ""))


def _unchanged(series: list[str], acceptance: list[str]) -> list[str]:
    """Labels of the series found unchanged, in order; the acceptance positions as one
    "acceptance" when none of them moved."""
    whole = set(acceptance) <= set(series)
    labels: list[str] = []
    for name in series:
        label = "acceptance" if whole and name.startswith(ACCEPTANCE) else series_label(name)
        if label not in labels:
            labels.append(label)
    return labels


def _cause(moved: list[str]) -> str:
    drafter = any(name.startswith(ACCEPTANCE) or name == LENGTH for name in moved)
    engine = any(name in COSTS for name in moved)
    return ("drafter and engine" if drafter and engine else "drafter" if drafter
            else "engine" if moved else "no change")


def describe(changes: pd.DataFrame) -> pd.DataFrame:
    """One sentence per job and transition: which series moved (with the change and its
    interval) and which did not, e.g. "engine: verify ms/token +18% [+9%, +28%]; baseline
    tok/s, acceptance unchanged". The cause reads "drafter" when acceptance moved,
    "engine" when only speeds or costs did."""
    rows = []
    for (key, build_a, build_b), group in changes.groupby(["key", "build_a", "build_b"],
                                                           sort=False):
        ordered = group.assign(rank=group["series"].map(series_order)).sort_values("rank")
        moved = ordered[ordered["verdict"].isin(["regression", "improvement"])]
        still = ordered[ordered["verdict"] == "unchanged"]["series"].tolist()
        acceptance = [name for name in ordered["series"] if name.startswith(ACCEPTANCE)]
        parts = [", ".join(_moved(row) for row in moved.to_dict(orient="records"))]
        if still:
            parts.append(", ".join(_unchanged(still, acceptance)) + " unchanged")
        text = "; ".join(part for part in parts if part)
        rows.append({"key": key, "build_a": build_a, "build_b": build_b,
                     "order_b": group["order_b"].iloc[0],
                     "moved": len(moved), "text": f"{_cause(moved['series'].tolist())}: {text}"})
    return pd.DataFrame(rows, columns=["key", "build_a", "build_b", "order_b", "moved", "text"])


def _matches(pattern: str, series: str) -> bool:
    return pattern in ("all", series) or (pattern == "acceptance"
                                          and series.startswith(ACCEPTANCE))


def regression_size(series: str, change: float) -> float:
    """How much worse a change is, as a fraction: a cost's rise, any other series' fall."""
    return change - 1.0 if series in COSTS else 1.0 - change


def beyond(changes: pd.DataFrame, thresholds: Mapping[str, float]) -> pd.DataFrame:
    """The regressions (by the test) of series named in ``thresholds`` (a series, its
    family "acceptance", or "all") worse than their threshold (a fraction: 0.05 = 5%)."""
    def gated(row: Mapping[Any, Any]) -> bool:
        series, change = str(row["series"]), float(row["change"])
        return row["verdict"] == "regression" and any(
            _matches(pattern, series) and regression_size(series, change) > threshold
            for pattern, threshold in thresholds.items())

    if changes.empty:
        return changes
    return changes[[gated(row) for row in changes.to_dict(orient="records")]]
