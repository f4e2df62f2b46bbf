"""Report plots as PNG bytes (matplotlib, Agg canvas; never touches a display).

Every function takes pandas frames and returns PNG bytes; pass ``path`` to also write
the file. Figures are 900x500 px (``speedup_intervals`` grows taller with many rows so
labels stay legible); an empty or unusable frame gives a PNG that says "no data".

Jobs frame columns: job_key, model, variant, varying_flags, spec_type, draft_n_max,
speedup, ci_low, ci_high, pairs, acceptance_rate, agreement, agreement_suspect,
drift_flag, stop_reason. Runs frame columns: job_key, arm, block, decode_tok_s.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from farm.report import cells
from farm.report.sheet import shorten

WIDTH_PX, HEIGHT_PX, DPI = 900, 500, 100
MAX_FACETS = 12

PLOT_NAMES = ("speedup_intervals", "speedup_vs_draft_length", "acceptance_vs_speedup",
              "tok_s_over_blocks")

# (colour, marker, legend label) per flag state of a job.
_FLAG_STYLE: dict[tuple[bool, bool], tuple[str, str, str]] = {
    (False, False): ("tab:blue", "o", "ok"),
    (True, False): ("tab:red", "D", "agreement suspect"),
    (False, True): ("tab:orange", "s", "drift"),
    (True, True): ("tab:purple", "X", "suspect + drift"),
}
_ARM_STYLE = {"baseline": ("tab:blue", "-"), "variant": ("tab:orange", "--")}


# --------------------------------------------------------------------------- helpers

def _figure(height_px: int = HEIGHT_PX) -> Figure:
    fig = Figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _flagged_png(fig: Figure, ax: Axes, present: set[tuple[bool, bool]],
                 path: Path | str | None) -> bytes:
    """``_png`` of a plot whose points are styled by flags, a legend of those ``present``."""
    handles = [Line2D([], [], color=color, marker=marker, linestyle="", label=label)
               for state, (color, marker, label) in _FLAG_STYLE.items() if state in present]
    ax.legend(handles=handles, loc="best", fontsize=8)
    fig.tight_layout()
    return _png(fig, path)


def _png(fig: Figure, path: Path | str | None) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    data = buffer.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def _no_data(title: str, path: Path | str | None, reason: str = "no data") -> bytes:
    fig = _figure()
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, reason, ha="center", va="center", fontsize=18, color="grey",
            transform=ax.transAxes)
    return _png(fig, path)


def _has(frame: pd.DataFrame, *columns: str) -> bool:
    return not frame.empty and all(column in frame.columns for column in columns)


def job_label(row: Mapping[Any, Any]) -> str:
    """``model · variant · varying_flags`` (empty parts left out)."""
    parts = (cells.text(row.get(key)) for key in ("model", "variant", "varying_flags"))
    return " · ".join(part for part in parts if part)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _error_bars(frame: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.float64]]:
    """2xN array of (lower, upper) error lengths; NaN CI -> zero-length bars."""
    speedup = frame["speedup"].astype(float).to_numpy()
    low = frame["ci_low"].astype(float).to_numpy() if "ci_low" in frame else speedup
    high = frame["ci_high"].astype(float).to_numpy() if "ci_high" in frame else speedup
    lower = np.where(np.isnan(low), 0.0, np.clip(speedup - low, 0.0, None))
    upper = np.where(np.isnan(high), 0.0, np.clip(high - speedup, 0.0, None))
    return np.vstack([lower, upper])


# --------------------------------------------------------------------------- plots

def speedup_intervals(jobs: pd.DataFrame, path: Path | str | None = None) -> bytes:
    """One row per configuration: speedup point with its interval, line at 1.0."""
    title = "Speedup per configuration (variant / baseline decode tok/s)"
    if not _has(jobs, "speedup"):
        return _no_data(title, path)
    frame = jobs[jobs["speedup"].astype(float).notna()].copy()
    if frame.empty:
        return _no_data(title, path)
    frame = frame.sort_values("speedup", kind="stable").reset_index(drop=True)
    rows = len(frame)
    # Whole labels, wrapped at spaces only (tight_layout makes room beside them, the height
    # grows with their lines): a cut name could be any of a sweep's.
    labels = [textwrap.fill(job_label(row), 48, break_long_words=False,
                            break_on_hyphens=False) for row in frame.to_dict(orient="records")]
    lines = max(label.count("\n") + 1 for label in labels)
    fig = _figure(max(HEIGHT_PX, 90 + (12 + 12 * lines) * rows))
    ax = fig.add_subplot()
    errors = _error_bars(frame)
    present: set[tuple[bool, bool]] = set()
    for index, row in enumerate(frame.to_dict(orient="records")):
        state = (cells.flag(row.get("agreement_suspect")), cells.flag(row.get("drift_flag")))
        present.add(state)
        colour, marker, _ = _FLAG_STYLE[state]
        ax.errorbar([float(row["speedup"])], [index], xerr=errors[:, index:index + 1],
                    fmt=marker, color=colour, ecolor=colour, elinewidth=2, capsize=4,
                    markersize=7)
    ax.axvline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_yticks(range(rows))
    ax.set_yticklabels(labels, fontsize=8 if rows <= 25 else 6)
    ax.set_ylim(-0.7, rows - 0.3)
    ax.set_xlabel("speedup (\u00d7), bars = confidence interval")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    return _flagged_png(fig, ax, present, path)


def speedup_vs_draft_length(jobs: pd.DataFrame, path: Path | str | None = None) -> bytes:
    """Speedup (with interval) against the draft length each job ran with (``draft_n_max``:
    its spec type's length flag, else that flag's default), one line per (model, spec_type)."""
    title = "Speedup vs draft length"
    if not _has(jobs, "speedup", "draft_n_max"):
        return _no_data(title, path)
    frame = jobs[jobs["draft_n_max"].astype(float).notna()
                 & jobs["speedup"].astype(float).notna()].copy()
    if frame.empty:
        return _no_data(title, path, "no jobs with a draft length")
    frame["draft_n_max"] = frame["draft_n_max"].astype(float).astype(int)
    for column in ("model", "spec_type"):
        frame[column] = frame[column].map(cells.text) if column in frame else ""
    fig = _figure()
    ax = fig.add_subplot()
    colours = [f"C{i}" for i in range(10)]
    for number, ((model, spec), group) in enumerate(
            frame.groupby(["model", "spec_type"], sort=True)):
        group = group.sort_values("draft_n_max", kind="stable")
        colour = colours[number % len(colours)]
        ax.errorbar(group["draft_n_max"], group["speedup"].astype(float),
                    yerr=_error_bars(group), fmt="o", color=colour, capsize=3, alpha=0.8)
        logs = group.assign(log_speedup=np.log(group["speedup"].astype(float)))
        trend = np.exp(logs.groupby("draft_n_max")["log_speedup"].mean())
        ax.plot(trend.index, trend.to_numpy(), "-", color=colour,
                label=_short(" · ".join(p for p in (str(model), str(spec)) if p) or "?", 50))
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("draft length: most tokens drafted per step (its spec type's length flag, else "
                  "its default)")
    ax.set_ylabel("speedup (\u00d7)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _png(fig, path)


def acceptance_vs_speedup(jobs: pd.DataFrame, path: Path | str | None = None) -> bytes:
    """Scatter of draft acceptance rate against speedup, each point labelled."""
    title = "Draft acceptance vs speedup"
    if not _has(jobs, "speedup", "acceptance_rate"):
        return _no_data(title, path)
    frame = jobs[jobs["acceptance_rate"].astype(float).notna()
                 & jobs["speedup"].astype(float).notna()]
    if frame.empty:
        return _no_data(title, path, "no jobs with acceptance counters")
    fig = _figure()
    ax = fig.add_subplot()
    present: set[tuple[bool, bool]] = set()
    for row in frame.to_dict(orient="records"):
        state = (cells.flag(row.get("agreement_suspect")), cells.flag(row.get("drift_flag")))
        present.add(state)
        colour, marker, _ = _FLAG_STYLE[state]
        x, y = 100.0 * float(row["acceptance_rate"]), float(row["speedup"])
        ax.scatter([x], [y], color=colour, marker=marker, s=40, zorder=3)
        # Shortened in the middle: a sweep's varying value at the end stays readable.
        label = shorten(" · ".join(p for p in (cells.text(row.get("model")),
                                               cells.text(row.get("variant"))) if p), 20)
        ax.annotate(label, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=7)
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
    # The axis spans the data (with a margin), not 0-100% for a few points.
    rates = 100.0 * frame["acceptance_rate"].astype(float)
    margin = max(2.0, 0.1 * float(rates.max() - rates.min()))
    ax.set_xlim(max(0.0, float(rates.min()) - margin), min(100.0, float(rates.max()) + margin))
    ax.set_xlabel("acceptance rate (% of drafted tokens accepted)")
    ax.set_ylabel("speedup (\u00d7)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _flagged_png(fig, ax, present, path)


def _block_medians(runs: pd.DataFrame) -> pd.DataFrame:
    frame = runs[["job_key", "arm", "block", "decode_tok_s"]].copy()
    frame["decode_tok_s"] = frame["decode_tok_s"].astype(float)
    frame = frame[frame["decode_tok_s"].notna() & frame["block"].notna()]
    frame["block"] = frame["block"].astype(int)
    frame["job_key"] = frame["job_key"].map(str)
    frame["arm"] = frame["arm"].map(str)
    return (frame.groupby(["job_key", "arm", "block"], sort=True)["decode_tok_s"]
            .median().reset_index())


def _arm_lines(ax: Axes, medians: pd.DataFrame, relative: bool, alpha: float) -> None:
    for (_, arm), group in medians.groupby(["job_key", "arm"], sort=True):
        colour, style = _ARM_STYLE.get(str(arm), ("tab:grey", ":"))
        values = group["decode_tok_s"].to_numpy(dtype=float)
        if relative:
            values = 100.0 * (values / float(np.mean(values)) - 1.0)
        ax.plot(group["block"], values, style, color=colour, marker=".", alpha=alpha)


def _facets(fig: Figure, medians: pd.DataFrame, labels: Mapping[str, str]) -> None:
    keys = list(dict.fromkeys(medians["job_key"]))
    cols = min(len(keys), 4 if len(keys) > 6 else 3 if len(keys) > 2 else len(keys))
    nrows = math.ceil(len(keys) / cols)
    for number, key in enumerate(keys):
        ax = fig.add_subplot(nrows, cols, number + 1)
        _arm_lines(ax, medians[medians["job_key"] == key], relative=False, alpha=1.0)
        ax.set_title(_short(labels.get(key, key[:12]), 40), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if number % cols == 0:
            ax.set_ylabel("tok/s", fontsize=8)
        if number >= len(keys) - cols:
            ax.set_xlabel("block", fontsize=8)


def tok_s_over_blocks(runs: pd.DataFrame, path: Path | str | None = None,
                      labels: Mapping[str, str] | None = None) -> bytes:
    """Median decode tok/s per block, baseline vs variant, to show drift.

    Up to ``MAX_FACETS`` jobs get one panel each (absolute tok/s); with more jobs all
    arms share one panel as % deviation from the arm's own mean. ``labels`` maps job_key
    to a readable title.
    """
    title = "Median decode tok/s per block (baseline: blue solid, variant: orange dashed)"
    if not _has(runs, "job_key", "arm", "block", "decode_tok_s"):
        return _no_data(title, path)
    medians = _block_medians(runs)
    if medians.empty:
        return _no_data(title, path)
    fig = _figure()
    jobs = medians["job_key"].nunique()
    if jobs <= MAX_FACETS:
        _facets(fig, medians, labels or {})
    else:
        ax = fig.add_subplot()
        _arm_lines(ax, medians, relative=True, alpha=0.5)
        ax.axhline(0.0, color="black", linestyle=":", linewidth=1)
        ax.set_xlabel("block")
        ax.set_ylabel("% from the arm's mean tok/s")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        title = (f"Decode tok/s drift per block, {jobs} jobs "
                 "(baseline: blue solid, variant: orange dashed)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _png(fig, path)


def engine_curve(points: pd.DataFrame, fits: pd.DataFrame,
                 path: Path | str | None = None) -> bytes:
    """Speedup against mean acceptance length (``farm.results.curve.curve_points``), one
    panel per engine and one line per draft length: the jobs with their intervals, the
    fit (a line or a curve) over lengths 1 to n-max + 1, and the break-even length on the line
    speedup = 1 with its interval, an open end where the data cannot bound it
    (``farm.results.curve.curve_fits``)."""
    title = "Engine cost curve: speedup vs acceptance length (synthetic acceptance)"
    if points.empty:
        return _no_data(title, path, "no synthetic-acceptance jobs with a speedup")
    keys = ["model", "gpu_class", "build", "spec_type"]
    lines = {tuple(row[:len(keys) + 1]): row[len(keys) + 1:] for row in
             fits[[*keys, "draft_n_max", "intercept", "slope", "curvature", "break_even",
                   "break_even_low", "break_even_high"]].itertuples(index=False, name=None)}
    engines = list(points.dropna(subset=["draft_n_max"]).groupby(
        keys, sort=True, dropna=False))[:MAX_FACETS]
    columns = min(len(engines), 2)
    rows = math.ceil(len(engines) / columns)
    fig = _figure(max(HEIGHT_PX, 420 * rows))
    for panel, (engine, engine_points) in enumerate(engines, start=1):
        ax = fig.add_subplot(rows, columns, panel)
        for number, (n_max, mine) in enumerate(engine_points.groupby("draft_n_max")):
            intercept, slope, curvature, even, low, high = lines[(*engine, n_max)]
            draft = int(cast(float, n_max))
            colour, top = f"C{number % 10}", draft + 1.0
            ax.errorbar(mine["acceptance_length"], mine["speedup"], yerr=_error_bars(mine),
                        fmt="o", color=colour, capsize=3, label=f"n-max {draft}")
            if math.isfinite(slope):
                xs = np.linspace(1.0, top, 50)
                ax.plot(xs, intercept + slope * xs + curvature * xs * xs, "-", color=colour,
                        alpha=0.7)
            if math.isfinite(even):
                left = even - low if math.isfinite(low) else even - 1.0
                right = high - even if math.isfinite(high) else top - even
                ax.errorbar([even], [1.0], xerr=[[max(left, 0.0)], [max(right, 0.0)]],
                            fmt="|", color=colour, markersize=14, capsize=5, elinewidth=2)
        ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
        ax.set_xlabel("mean acceptance length (tokens per step, target included)")
        ax.set_ylabel("speedup (\u00d7)")
        ax.set_title(_short(" · ".join(cells.text(part) for part in engine if cells.text(part)),
                            70), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{title}; | on 1\u00d7 = break-even with its interval", fontsize=10)
    fig.tight_layout()
    return _png(fig, path)


def recommendation(candidates: pd.DataFrame, path: Path | str | None = None) -> bytes:
    """``farm recommend``'s evidence, one row of panels per GPU class x model x build: the
    drafter's measured acceptance per position (one line per category) and the predicted
    speedup per draft length with its interval, the recommended point starred."""
    title = "Recommendation: acceptance profile and predicted speedup per draft length"
    if candidates.empty:
        return _no_data(title, path, "nothing to recommend from")
    engines = list(candidates.groupby(["gpu_class", "model", "build"], sort=True))[:MAX_FACETS]
    fig = _figure(max(HEIGHT_PX, 380 * len(engines)))
    for row, (engine, frame) in enumerate(engines):
        profile_ax = fig.add_subplot(len(engines), 2, 2 * row + 1)
        speed_ax = fig.add_subplot(len(engines), 2, 2 * row + 2)
        for number, (category, group) in enumerate(frame.groupby("category", sort=True)):
            colour = f"C{number % 10}"
            rates = group.iloc[0]["rates"]
            profile_ax.plot(range(1, len(rates) + 1), rates, "o-", color=colour,
                            label=str(category))
            group = group.sort_values("draft_n_max")
            errors = np.vstack([(group["speedup"] - group["low"]).clip(lower=0).fillna(0),
                                (group["high"] - group["speedup"]).clip(lower=0).fillna(0)])
            speed_ax.errorbar(group["draft_n_max"], group["speedup"], yerr=errors, fmt="o-",
                              color=colour, capsize=3, label=str(category))
            # No rank 1 where nothing was predicted (insufficient data): no star.
            for _, best in group[group["rank"] == 1].iterrows():
                speed_ax.plot([best["draft_n_max"]], [best["speedup"]], "*", color=colour,
                              markersize=16)
        label = " · ".join(cells.text(part) for part in engine)
        profile_ax.set_title(f"{_short(label, 50)}: accepted per draft", fontsize=9)
        profile_ax.set_xlabel("draft position")
        profile_ax.set_ylim(0, 1.05)
        profile_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        profile_ax.grid(alpha=0.3)
        profile_ax.legend(fontsize=8)
        speed_ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
        speed_ax.set_title("predicted speedup (\u2605 recommended)", fontsize=9)
        speed_ax.set_xlabel("draft length (spec-draft-n-max)")
        speed_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        speed_ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _png(fig, path)


def speedup_vs_traffic(jobs: pd.DataFrame, axis: str, path: Path | str | None = None) -> bytes:
    """Speedup (with interval) against ``axis``, "concurrency" (streams at once; the
    aggregate tok/s speedup dashed beside the per-request one) or "prompt_tokens" (the
    prompts' median length), one line per model and variant with the other settings equal."""
    title = ("Speedup vs concurrency (solid: per request, dashed: aggregate)"
             if axis == "concurrency" else "Speedup vs prompt length")
    if not _has(jobs, "speedup", axis):
        return _no_data(title, path)
    frame = jobs[jobs[axis].astype(float).notna() & jobs["speedup"].astype(float).notna()
                 & (jobs["kind"] == "variant")].copy()
    if frame.empty:
        return _no_data(title, path)
    swept = "concurrency" if axis == "concurrency" else "prompt-length"
    frame["line"] = [" · ".join(part for part in (
        cells.text(row["model"]), cells.text(row["variant"]),
        " ".join(f"{name}={value}" for name, value in (row["varying"] or {}).items()
                 if name != swept)) if part) for row in frame.to_dict(orient="records")]
    fig = _figure()
    ax = fig.add_subplot()
    for number, (line, group) in enumerate(frame.groupby("line", sort=True)):
        group = group.sort_values(axis, kind="stable")
        colour = f"C{number % 10}"
        x = group[axis].astype(float)
        ax.errorbar(x, group["speedup"].astype(float), yerr=_error_bars(group), fmt="o-",
                    color=colour, capsize=3, label=_short(str(line), 60))
        if axis == "concurrency" and group["aggregate_speedup"].astype(float).notna().any():
            # One stream's aggregate is its own speed: the per-request point.
            aggregate = pd.DataFrame({
                name: group[f"aggregate_{name}"].astype(float).fillna(group[name].astype(float))
                for name in ("speedup", "ci_low", "ci_high")})
            ax.errorbar(x, aggregate["speedup"].astype(float), yerr=_error_bars(aggregate),
                        fmt="s--", color=colour, capsize=3, alpha=0.7)
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1)
    ax.set_xlabel("simultaneous streams (server slots)" if axis == "concurrency"
                  else "prompt tokens (median per run)")
    if axis == "concurrency":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("speedup (\u00d7)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _png(fig, path)


# --------------------------------------------------------------------------- the page's

def draft_lengths(jobs: pd.DataFrame) -> int:
    """How many draft lengths ``speedup_vs_draft_length`` would place jobs at."""
    if not _has(jobs, "speedup", "draft_n_max"):
        return 0
    placed = jobs["speedup"].astype(float).notna()
    return int(jobs["draft_n_max"][placed].astype(float).dropna().nunique())


def render_all(jobs: pd.DataFrame, runs: pd.DataFrame) -> dict[str, bytes]:
    """The plots of ``PLOT_NAMES`` that have something to show, as ``{name: png_bytes}``
    in that order: speedup against draft length only where jobs ran at two lengths or
    more (at one, it is the interval plot's points in a column)."""
    labels = ({str(row["job_key"]): job_label(row) for row in jobs.to_dict(orient="records")}
              if _has(jobs, "job_key") else {})
    makers: dict[str, Callable[[], bytes]] = {
        "speedup_intervals": lambda: speedup_intervals(jobs),
        "speedup_vs_draft_length": lambda: speedup_vs_draft_length(jobs),
        "acceptance_vs_speedup": lambda: acceptance_vs_speedup(jobs),
        "tok_s_over_blocks": lambda: tok_s_over_blocks(runs, labels=labels),
    }
    shown = [name for name in PLOT_NAMES
             if name != "speedup_vs_draft_length" or draft_lengths(jobs) >= 2]
    return {name: makers[name]() for name in shown}

