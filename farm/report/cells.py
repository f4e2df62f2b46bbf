"""How one value reads in a report cell: the same in the terminal, the HTML page and plots.

A frame marks "not measured" as None, NaN or pandas' NA, depending on the column's dtype
and on the database it came from; ``missing`` knows all three and every formatter here
writes ``MISSING`` for them.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from typing import Any

MISSING = "\u2013"  # en dash
TIMES = "\u00d7"  # multiplication sign, as in "1.42\u00d7"


# What a terminal acts on rather than shows: C0 controls (ESC starts a sequence that can
# clear the screen, set the title or forge a link), DEL, C1 controls (0x9b is a one-byte
# CSI) and the bidirectional overrides and isolates that reorder what follows them.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(value: str) -> str:
    """``value`` with every control character removed, so that a stranger's text (a GPU
    name, a flag, a model name in a bundle) reads as what it is on any terminal; every
    table cell, title and caption passes through it (``farm.report.sheet``)."""
    return _CONTROLS.sub("", value)


def clean_lines(value: str) -> str:
    """``value``'s lines each ``clean``: a message of several lines keeps its line breaks."""
    return "\n".join(clean(line) for line in value.split("\n"))


def missing(value: Any) -> bool:
    """None, NaN or pandas' NA."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    # Only a frame holds NA, so pandas is loaded when it can occur: rows printed without
    # pandas (``farm report --format json``) do not load it for this test.
    pandas = sys.modules.get("pandas")
    return pandas is not None and value is pandas.NA


def as_float(value: Any) -> float:
    """The value as a float; NaN when it is missing or not a number."""
    if missing(value):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def text(value: Any) -> str:
    """The value as text; empty when missing."""
    return "" if missing(value) else str(value)


def flag(value: Any) -> bool:
    """The value as a flag; a missing flag is not raised."""
    return False if missing(value) else bool(value)


def number(value: Any, digits: int = 1) -> str:
    """``50.1``."""
    x = as_float(value)
    return MISSING if math.isnan(x) else f"{x:.{digits}f}"


def percent(value: Any, digits: int = 1) -> str:
    """``81.0%`` for 0.81."""
    x = as_float(value)
    return MISSING if math.isnan(x) else f"{100.0 * x:.{digits}f}%"


def count(value: Any) -> str:
    """``8``."""
    x = as_float(value)
    return MISSING if math.isnan(x) else str(int(x))


def time_split(draft: Any, verify: Any) -> str:
    """``0.105 / 6.840``: ms per token drafting and verifying; missing when neither is known."""
    if missing(draft) and missing(verify):
        return MISSING
    return f"{number(draft, 3)} / {number(verify, 3)}"


def pair(baseline: Any, variant: Any, digits: int = 1) -> str:
    """``12.3 / 8.1``: a figure of each arm, the baseline's first; missing when neither is
    known."""
    if missing(baseline) and missing(variant):
        return MISSING
    return f"{number(baseline, digits)} / {number(variant, digits)}"


def memory_cost(extra: Any, draft_context: Any) -> str:
    """``+22.3 (ctx 2.1)``: MiB the variant's server holds beyond the baseline's at their
    peaks, and the draft context its log reported; missing when neither is known."""
    if missing(extra) and missing(draft_context):
        return MISSING
    shown = MISSING if missing(extra) else f"{as_float(extra):+.1f}"
    return shown if missing(draft_context) else f"{shown} (ctx {number(draft_context)})"


def ratio(value: Any) -> str:
    """``1.42\u00d7``."""
    x = as_float(value)
    return MISSING if math.isnan(x) else f"{x:.2f}{TIMES}"


def bracket(low: Any, high: Any) -> str:
    """``[1.35, 1.50]``."""
    lo, hi = as_float(low), as_float(high)
    return MISSING if math.isnan(lo) or math.isnan(hi) else f"[{lo:.2f}, {hi:.2f}]"


# The colours of a ratio clearly above 1 and clearly below it, in a terminal.
FASTER, SLOWER = "green", "red"


def tone(low: Any, high: Any) -> str | None:
    """The colour of a ratio whose 95% interval is [``low``, ``high``]: ``FASTER`` where it
    lies above 1, ``SLOWER`` below 1; None where it holds 1 or is unknown."""
    lo, hi = as_float(low), as_float(high)
    if lo > 1:
        return FASTER
    return SLOWER if hi < 1 else None


def interval(estimate: Any, low: Any, high: Any) -> str:
    """``1.42\u00d7 [1.35, 1.50]``; the bracket is left out when the interval is unknown."""
    known = bracket(low, high)
    if missing(estimate) or known == MISSING:
        return ratio(estimate)
    return f"{ratio(estimate)} {known}"


# How a job that is not a setting to pick is named beside its variant.
KIND_LABELS = {"control": "control (A/A)", "synthetic": "synthetic (engine cost)",
               "builds": "newer build over older"}


def labelled(value: object, kind: object) -> str:
    """``value`` (a variant, a group), and what its jobs are when not settings to pick."""
    label = KIND_LABELS.get(str(kind))
    return f"{value} · {label}" if label else str(value)


def variant(row: Mapping[Any, Any]) -> str:
    """The variant's name, and what the job is when it is not a setting to pick."""
    return labelled(row["variant"], row.get("kind"))


def warmup(row: Mapping[Any, Any]) -> str:
    """``warm-up short: first runs 8% slower [-12%, -4%]`` for a job whose blocks' first runs
    were slower than their later ones (``warmup_flag``); empty otherwise."""
    if not flag(row.get("warmup_flag")):
        return ""
    effect, low, high = (as_float(row.get(name)) * 100.0
                         for name in ("warmup_effect", "warmup_low", "warmup_high"))
    return f"warm-up short: first runs {-effect:.0f}% slower [{low:+.0f}%, {high:+.0f}%]"


def busy_node(row: Mapping[Any, Any]) -> str:
    """``busy node: other processes used 0.9 of a core during 3 of 12 blocks``, with the arm
    that had more of them (that biases the speedup) and the wait for quiet; empty for a job
    whose blocks were all quiet or not measured."""
    busy, measured = as_float(row.get("busy_blocks")), as_float(row.get("measured_blocks"))
    waited = as_float(row.get("busy_wait_s"))
    parts = []
    if busy > 0:
        cores = as_float(row.get("busy_cores"))
        used = f"used {cores:.1f} of a core" if cores >= 0.05 else "shared the GPU"
        parts.append(f"busy node: other processes {used} during {int(busy)} of "
                     f"{int(measured)} blocks")
        base, var = as_float(row.get("busy_blocks_baseline")), as_float(
            row.get("busy_blocks_variant"))
        if base != var:
            more = "baseline" if base > var else "variant"
            parts.append(f"more in the {more}'s ({int(base)} baseline, {int(var)} variant): "
                         "the speedup is biased")
    if waited >= 1:
        parts.append(f"blocks waited {waited:.0f} s for quiet")
    return "; ".join(parts)


def block_notes(row: Mapping[Any, Any]) -> list[str]:
    """What to doubt about the job's blocks: a busy node (``busy_node``), a short warm-up
    (``warmup``); those that apply."""
    return [note for note in (busy_node(row), warmup(row)) if note]
