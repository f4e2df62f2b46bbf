"""The board site's plot: speedup against draft length, one line per GPU, each point with
its 95% interval as a bar, drawn as inline SVG (no script, no external resource; it scales
with the page).

Settings of one GPU that share a draft length (another p-min, another cache type) are each
a point at that length; the line joins the highest at each length. Points of different
GPUs at one length are set a few pixels apart so that their bars do not hide each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from farm.report.board import escape

# Okabe-Ito: told apart with the common colour-vision deficiencies; yellow left out (too
# pale on white).
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")

_WIDTH, _HEIGHT = 760, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 18, 14, 46
_DODGE = 5.0  # pixels between GPUs' points at one draft length


@dataclass(frozen=True)
class Point:
    """One setting: its draft length, speedup and interval (NaN: none), and what its
    tooltip says."""

    draft: float
    speedup: float
    low: float
    high: float
    label: str


@dataclass(frozen=True)
class Line:
    """One GPU's points, its name and colour."""

    name: str
    colour: str
    points: Sequence[Point]


@dataclass(frozen=True)
class _Scale:
    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)


def colour(index: int) -> str:
    """The ``index``-th line's colour."""
    return COLOURS[index % len(COLOURS)]


def speedup_svg(lines: Sequence[Line], title: str) -> str:
    """The plot as an ``<svg>`` element; empty when no line has a point."""
    points = [point for line in lines for point in line.points]
    if not points:
        return ""
    drafts = sorted({point.draft for point in points})
    values = [v for point in points for v in (point.speedup, point.low, point.high)
              if math.isfinite(v)] + [1.0]
    pad = max(0.05 * (max(values) - min(values)), 0.02)
    x = _Scale(drafts[0] - 0.5, drafts[-1] + 0.5, _LEFT, _WIDTH - _RIGHT)
    y = _Scale(min(values) - pad, max(values) + pad, _HEIGHT - _BOTTOM, _TOP)
    parts = [*_axes(x, y, drafts), *(_line(line, n, len(lines), x, y)
                                     for n, line in enumerate(lines))]
    return (f'<svg viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
            f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{escape(title)}</title>{''.join(parts)}</svg>")


def _axes(x: _Scale, y: _Scale, drafts: Sequence[float]) -> list[str]:
    """The frame, ticks and labels, and the dotted line of no change (1\u00d7)."""
    left, right, bottom, top = _LEFT, _WIDTH - _RIGHT, _HEIGHT - _BOTTOM, _TOP
    out = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
           'fill="none" stroke="#bbb"/>']
    for tick in _ticks(y.low, y.high):
        at = y(tick)
        out.append(f'<line x1="{left}" x2="{right}" y1="{at:.1f}" y2="{at:.1f}" '
                   'stroke="#eee"/>'
                   f'<text x="{left - 6}" y="{at + 4:.1f}" text-anchor="end" font-size="12" '
                   f'fill="#444">{tick:.2f}\u00d7</text>')
    shown = drafts if len(drafts) <= 16 else drafts[::math.ceil(len(drafts) / 16)]
    for draft in shown:
        at = x(draft)
        out.append(f'<text x="{at:.1f}" y="{bottom + 17}" text-anchor="middle" '
                   f'font-size="12" fill="#444">{draft:g}</text>')
    one = y(1.0)
    out.append(f'<line x1="{left}" x2="{right}" y1="{one:.1f}" y2="{one:.1f}" '
               'stroke="#888" stroke-dasharray="4 4"/>')
    out.append(f'<text x="{(left + right) / 2:.0f}" y="{_HEIGHT - 6}" text-anchor="middle" '
               'font-size="13" fill="#222">draft length (--spec-draft-n-max)</text>')
    out.append(f'<text transform="translate(14 {(top + bottom) / 2:.0f}) rotate(-90)" '
               'text-anchor="middle" font-size="13" fill="#222">speedup</text>')
    return out


def _ticks(low: float, high: float) -> list[float]:
    """About five round values between ``low`` and ``high``."""
    raw = (high - low) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _line(line: Line, index: int, lines: int, x: _Scale, y: _Scale) -> str:
    """A GPU's line through its best point at each draft length, and every point with
    its interval bar and a tooltip."""
    shift = (index - (lines - 1) / 2) * _DODGE
    best: dict[float, float] = {}
    for point in line.points:
        if math.isfinite(point.speedup):
            best[point.draft] = max(best.get(point.draft, -math.inf), point.speedup)
    path = " ".join(f"{x(draft) + shift:.1f},{y(value):.1f}"
                    for draft, value in sorted(best.items()))
    out = [f'<g stroke="{line.colour}" fill="{line.colour}">'
           f'<polyline points="{path}" fill="none" stroke-width="2"/>']
    for point in line.points:
        if not math.isfinite(point.speedup):
            continue
        at = x(point.draft) + shift
        if math.isfinite(point.low) and math.isfinite(point.high):
            out.append(f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{y(point.low):.1f}" '
                       f'y2="{y(point.high):.1f}" stroke-width="1.5"/>')
            out += [f'<line x1="{at - 3:.1f}" x2="{at + 3:.1f}" y1="{y(end):.1f}" '
                    f'y2="{y(end):.1f}" stroke-width="1.5"/>' for end in (point.low, point.high)]
        out.append(f'<circle cx="{at:.1f}" cy="{y(point.speedup):.1f}" r="4">'
                   f"<title>{escape(line.name)}: {escape(point.label)}</title></circle>")
    return "".join(out) + "</g>"
