"""Changes in a history: each series between consecutive builds, called as builds arrive
at a false discovery rate held over the whole history, told in words, and gated on
(``farm history --fail-on-regression``).

The test is ``farm.stats.difference.difference`` of the two builds' log values (each with
its standard error and df, plus the series' between-build variance:
``farm.stats.online.between_build_variance`` over its earlier transitions, so a machine
that drifts between nights is not read as a change) or, where a job ran that series' arm
on both builds in one paired job (``farm track --paired``), that job's own speedup
against 1 (its crossover interval: no drift between two jobs in it).

Three families of calls, each with its own error control (docs/history.md: measured false
alarms and power):
- **tracked**: transitions between builds tracked in commit order (each, when it ran, the
  newest of its key). LORD++ (``farm.stats.online.lord_levels``) over them in the order
  they ran: a call is final when made and does not fade as the history grows.
- **out of order**: transitions to or from a build older than one tracked before it (a
  bisect step, a backfill): Benjamini-Hochberg over them alone.
- **the gate**: each key's newest tracked transition, every series of every key at once:
  Benjamini-Hochberg over that family alone, so its power does not depend on the
  history's length. ``--fail-on-regression`` reads it (``gate_verdict``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from farm.stats.difference import FDR, adjusted_p_values, difference
from farm.stats.history import (
    ACCEPTANCE,
    BETWEEN_JOBS,
    COSTS,
    LENGTH,
    series_label,
    series_order,
)
from farm.stats.intervals import NAN
from farm.stats.online import between_build_variance, lord_levels, with_between

# What a point of a history holds (one series of one job on one build); ``tracked``, when
# present, the rank of the build's first run (else builds count as tracked in ``order``).
POINT_COLUMNS = ("key", "series", "order", "build", "value", "log_se", "df")
CHANGE_COLUMNS = ("key", "series", "build_a", "build_b", "order_b", "value_a", "value_b",
                  "change", "change_low", "change_high", "p_value", "paired", "family",
                  "level", "q_value", "verdict", "gate_verdict")
TRACKED, OUT_OF_ORDER = "tracked", "out of order"
# A paired estimate of a change (one job across two builds): its key, series, builds,
# change with interval and p value.
PAIRED_COLUMNS = ("key", "series", "build_a", "build_b", "change", "change_low",
                  "change_high", "p_value")


def _test(a: float, se_a: float, df_a: float, b: float, se_b: float, df_b: float,
          tau2: float, tau_df: float) -> tuple[float, ...]:
    """change, its interval and p value of one series between two builds' values ``a`` and
    ``b``, each with the between-build variance ``tau2`` added. Two values with no spread
    at all (every draft accepted on both) are unchanged if equal, untested if not."""
    if not (a > 0 and b > 0):
        return NAN, NAN, NAN, NAN
    if se_a == 0.0 and se_b == 0.0:
        return (1.0, 1.0, 1.0, 1.0) if a == b else (b / a, NAN, NAN, NAN)
    se_a, df_a = with_between(se_a, df_a, tau2, tau_df)
    se_b, df_b = with_between(se_b, df_b, tau2, tau_df)
    found = difference(math.log(a), se_a, df_a, math.log(b), se_b, df_b)
    return found.change, found.low, found.high, found.p_value


def _verdict(series: str, change: float, called: bool, p_value: float) -> str:
    if not math.isfinite(p_value):
        return "no test"
    if not called:
        return "unchanged"
    worse = change > 1.0 if series in COSTS else change < 1.0
    return "regression" if worse else "improvement"


def _tracked_builds(keys: list[Any], builds: list[Any], orders: list[Any],
                    ranks: list[Any]) -> dict[Any, set[Any]]:
    """Per key, its builds tracked in commit order: walking its builds in the order they
    were tracked (``ranks``), each that is newer (in commit ``orders``) than every one
    kept before it."""
    seen: dict[Any, dict[Any, tuple[Any, Any]]] = {}
    for key, build, order, rank in zip(keys, builds, orders, ranks, strict=True):
        seen.setdefault(key, {}).setdefault(build, (rank, order))
    kept: dict[Any, set[Any]] = {}
    for key, found in seen.items():
        newest = -math.inf
        kept[key] = set()
        for build, (_, order) in sorted(found.items(), key=lambda item: item[1]):
            if order > newest:
                kept[key].add(build)
                newest = order
    return kept


def _transitions(builds: list[Any], tracked: set[Any]) -> list[tuple[int, int, str]]:
    """One series' transitions (positions in ``builds``, in commit order): between
    consecutive tracked builds, then between consecutive builds of which one is out of
    order."""
    main = [i for i, build in enumerate(builds) if build in tracked]
    found = [(a, b, TRACKED) for a, b in itertools.pairwise(main)]
    found += [(a, a + 1, OUT_OF_ORDER) for a in range(len(builds) - 1)
              if builds[a] not in tracked or builds[a + 1] not in tracked]
    return found


def _series_rows(key: Any, series: str, point: Mapping[str, Any], tracked: set[Any],
                 measured: Mapping[tuple[Any, ...], Mapping[str, Any]], newest_only: bool
                 ) -> list[dict[str, Any]]:
    """The rows of one series' transitions (``newest_only``: its newest tracked one), from
    its points in commit order (``point``: a column name to its values). A tracked
    transition allows for the between-build variance of the unpaired tracked transitions
    before it, so its test is fixed when it is made; an out-of-order one (listed after
    them) for that of all of them."""
    builds, order, rank = point["build"], point["order"], point["tracked"]
    value, se, df = point["value"], point["log_se"], point["df"]
    found = _transitions(builds, tracked)
    pairs = [measured.get((key, series, builds[a], builds[b])) for a, b, _ in found]
    # The unpaired tracked transitions, in order: their log differences and within variances.
    steps = np.array([[a, b] for (a, b, family), one in zip(found, pairs, strict=True)
                      if family == TRACKED and one is None], dtype=int).reshape(-1, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(value[steps[:, 1]] / value[steps[:, 0]])
    w = se[steps[:, 0]] ** 2 + se[steps[:, 1]] ** 2
    newest = max((i for i, (_, _, family) in enumerate(found) if family == TRACKED),
                 default=-1)
    rows: list[dict[str, Any]] = []
    before = 0  # unpaired tracked transitions before this one
    for i, ((a, b, family), one) in enumerate(zip(found, pairs, strict=True)):
        if not newest_only or i == newest:
            known = before if family == TRACKED else len(d)
            tau2, tau_df = between_build_variance(d[:known], w[:known], series in BETWEEN_JOBS)
            change, low, high, p_value = (
                _test(value[a], se[a], df[a], value[b], se[b], df[b], tau2, tau_df)
                if one is None else
                (one["change"], one["change_low"], one["change_high"], one["p_value"]))
            rows.append({"key": key, "series": series, "build_a": builds[a],
                         "build_b": builds[b], "order_b": order[b], "tracked_b": rank[b],
                         "value_a": value[a], "value_b": value[b],
                         "change": change, "change_low": low, "change_high": high,
                         "p_value": p_value, "paired": one is not None, "family": family})
        before += int(family == TRACKED and one is None)
    return rows


def _tests(points: pd.DataFrame, paired: pd.DataFrame | None, newest_only: bool
           ) -> pd.DataFrame:
    measured: dict[tuple[Any, ...], Mapping[str, Any]] = {} if paired is None else {
        (row["key"], row["series"], row["build_a"], row["build_b"]): {
            str(name): value for name, value in row.items()}
        for row in paired.to_dict(orient="records")}
    keys, series = points["key"].tolist(), points["series"].tolist()
    order = points["order"].to_numpy()
    rank = points["tracked"] if "tracked" in points.columns else points["order"]
    columns = {"build": points["build"].to_numpy(dtype=object), "order": order,
               "tracked": rank.to_numpy(), "value": points["value"].to_numpy(dtype=float),
               "log_se": points["log_se"].to_numpy(dtype=float),
               "df": points["df"].to_numpy(dtype=float)}
    tracked = _tracked_builds(keys, columns["build"].tolist(), order.tolist(),
                              columns["tracked"].tolist())
    groups: dict[tuple[Any, Any], list[int]] = {}
    for position, group in enumerate(zip(keys, series, strict=True)):
        groups.setdefault(group, []).append(position)
    rows = []
    for (key, name), positions in groups.items():
        index = np.asarray(positions)[np.argsort(order[positions], kind="stable")]
        point = {column: values[index] for column, values in columns.items()}
        point["build"] = point["build"].tolist()
        rows += _series_rows(key, str(name), point, tracked[key], measured, newest_only)
    changes = pd.DataFrame(rows, columns=[*CHANGE_COLUMNS[:-4], "tracked_b"])
    changes["level"] = NAN
    changes["q_value"] = NAN
    changes["gate_verdict"] = ""
    return changes


def find_changes(points: pd.DataFrame, rate: float = FDR,
                 paired: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every series of every job (``key``) between consecutive builds (``order``) where it
    has values: the change (after over before) with its 95% interval and p value, its
    ``family`` (tracked or out of order, above), the ``level`` LORD++ gave a tracked test,
    the Benjamini-Hochberg q value of an out-of-order one or of the gate's, the history's
    ``verdict`` ("regression", "improvement", "unchanged", "no test") and, on each key's
    newest tracked transition, the gate's (``gate_verdict``; "" elsewhere), at false
    discovery rate ``rate``. ``paired`` (``PAIRED_COLUMNS``): changes measured in one job
    across the two builds, used instead of the two builds' values where present
    (``paired`` True)."""
    changes = _tests(points, paired, newest_only=False)
    called = pd.Series(False, index=changes.index)
    # Tracked: LORD++ in the order the builds were tracked, a build's tests in series order.
    online = changes[changes["family"] == TRACKED].assign(
        rank=lambda frame: frame["series"].map(series_order)).sort_values(
        ["tracked_b", "order_b", "key", "rank"], kind="stable")
    levels, calls = lord_levels(online["p_value"].astype(float).tolist(), rate)
    changes.loc[online.index, "level"] = levels
    called[online.index] = np.array(calls, dtype=bool)
    late = changes.index[changes["family"] == OUT_OF_ORDER]
    changes.loc[late, "q_value"] = adjusted_p_values(
        changes.loc[late, "p_value"].astype(float).tolist())
    called[late] = changes.loc[late, "q_value"] <= rate
    changes["verdict"] = _verdicts(changes, called)
    _gate(changes, rate)
    return changes.drop(columns="tracked_b")[list(CHANGE_COLUMNS)]


def gate(points: pd.DataFrame, rate: float = FDR, paired: pd.DataFrame | None = None
         ) -> pd.DataFrame:
    """Only the gate's rows of ``find_changes`` (each key's newest tracked transition, every
    series), with its verdicts (``gate_verdict``) and q values: the same calls, without
    testing the rest of the history."""
    changes = _tests(points, paired, newest_only=True)
    changes["verdict"] = ""
    _gate(changes, rate)
    return changes.loc[changes["gate_verdict"] != "", list(CHANGE_COLUMNS)]


def _gate(changes: pd.DataFrame, rate: float) -> None:
    """Each key's newest tracked transition, every series of every key as one family:
    Benjamini-Hochberg over it, into ``q_value`` and ``gate_verdict``."""
    tracked = (changes["family"] == TRACKED).to_numpy()
    keys, order_b = changes["key"].tolist(), changes["order_b"].tolist()
    newest: dict[Any, Any] = {}  # each key's newest tracked transition (missing: none)
    for key, order, one in zip(keys, order_b, tracked, strict=True):
        if one and not (_missing(key) or _missing(order)):
            newest[key] = max(newest.get(key, order), order)
    gated = np.array([bool(one) and order == newest.get(key)
                      for key, order, one in zip(keys, order_b, tracked, strict=True)],
                     dtype=bool)
    p_values = changes["p_value"].to_numpy(dtype=float)
    q_values = adjusted_p_values(p_values[gated].tolist())
    q_column = changes["q_value"].to_numpy(dtype=float, copy=True)
    q_column[gated] = q_values
    verdicts = changes["gate_verdict"].to_numpy(dtype=object, copy=True)
    verdicts[gated] = _verdicts(changes.loc[gated],
                                [math.isfinite(q) and q <= rate for q in q_values])
    changes["q_value"] = q_column
    changes["gate_verdict"] = verdicts


def _missing(value: Any) -> bool:
    """None or NaN: what a pandas group by leaves out."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _verdicts(changes: pd.DataFrame, called: Any) -> list[str]:
    return [_verdict(series, change, bool(call), p)
            for series, change, call, p in zip(changes["series"],
                                               changes["change"].astype(float), called,
                                               changes["p_value"].astype(float), strict=True)]


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
    "engine" when only speeds or costs did. A job's newest transition is told as the gate
    calls it, saying so where the history's running calls differ."""
    rows = []
    for (key, build_a, build_b), group in changes.groupby(["key", "build_a", "build_b"],
                                                           sort=False):
        ordered = group.assign(rank=group["series"].map(series_order)).sort_values("rank")
        gated = bool((ordered["gate_verdict"] != "").all())
        verdict = ordered["gate_verdict"] if gated else ordered["verdict"]
        moved = ordered[verdict.isin(["regression", "improvement"])]
        still = ordered[verdict == "unchanged"]["series"].tolist()
        acceptance = [name for name in ordered["series"] if name.startswith(ACCEPTANCE)]
        parts = [", ".join(_moved(row) for row in moved.to_dict(orient="records"))]
        if still:
            parts.append(", ".join(_unchanged(still, acceptance)) + " unchanged")
        text = f"{_cause(moved['series'].tolist())}: " + "; ".join(part for part in parts
                                                                   if part)
        if gated and (ordered["gate_verdict"] != ordered["verdict"]).any():
            text = f"the gate, newest build alone: {text}"
        rows.append({"key": key, "build_a": build_a, "build_b": build_b,
                     "order_b": group["order_b"].iloc[0], "moved": len(moved), "text": text})
    return pd.DataFrame(rows, columns=["key", "build_a", "build_b", "order_b", "moved", "text"])


def _matches(pattern: str, series: str) -> bool:
    return pattern in ("all", series) or (pattern == "acceptance"
                                          and series.startswith(ACCEPTANCE))


def regression_size(series: str, change: float) -> float:
    """How much worse a change is, as a fraction: a cost's rise, any other series' fall."""
    return change - 1.0 if series in COSTS else 1.0 - change


def beyond(changes: pd.DataFrame, thresholds: Mapping[str, float],
           verdict: str = "verdict") -> pd.DataFrame:
    """The regressions (by the test whose verdict is in column ``verdict``) of series named
    in ``thresholds`` (a series, its family "acceptance", or "all") worse than their
    threshold (a fraction: 0.05 = 5%)."""
    def gated(row: Mapping[Any, Any]) -> bool:
        series, change = str(row["series"]), float(row["change"])
        return row[verdict] == "regression" and any(
            _matches(pattern, series) and regression_size(series, change) > threshold
            for pattern, threshold in thresholds.items())

    if changes.empty:
        return changes
    return changes[[gated(row) for row in changes.to_dict(orient="records")]]
