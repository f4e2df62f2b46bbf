"""Predicting a drafter's speedup from its acceptance profile and the engine's cost curve."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from farm.stats.acceptance import cluster_ratio
from farm.stats.curve import CostCurve
from farm.stats.frame import NAN
from farm.stats.intervals import t_margin


@dataclass(frozen=True)
class Profile:
    """What a drafter's runs say about its acceptance, prompts as clusters: per prompt (its
    runs summed), its drafts, its accepted drafts per position (``accepted[r][i]``: prompt
    r, draft position i) and its plain steps (tokens generated without a draft). At
    temperature 0 a prompt's repetitions draft the same text, so they are one cluster,
    not several (``farm.stats.acceptance.rate_interval``).

    ``positions`` is how many positions were measured (the arm's draft length); beyond
    them a profile is extrapolated.
    """

    drafts: npt.NDArray[np.float64]
    accepted: npt.NDArray[np.float64]  # prompts x positions
    plain_steps: npt.NDArray[np.float64]

    @property
    def positions(self) -> int:
        """How many draft positions were measured."""
        return int(self.accepted.shape[1])

    @property
    def rates(self) -> list[float]:
        """Accepted per draft at each measured position (unconditional)."""
        total = float(self.drafts.sum())
        return [float(x) / total if total > 0 else NAN for x in self.accepted.sum(axis=0)]

    @property
    def draft_share(self) -> float:
        """The share of decode steps that drafted (1 for MTP; less for n-gram lookups)."""
        steps = float(self.drafts.sum() + self.plain_steps.sum())
        return float(self.drafts.sum()) / steps if steps > 0 else NAN

    def accepted_within(self, draft_n_max: int) -> npt.NDArray[np.float64]:
        """Per run: accepted drafts within the first ``draft_n_max`` positions, positions
        beyond the measured ones extrapolated geometrically from the last two rates."""
        within: npt.NDArray[np.float64] = self.accepted[:, :draft_n_max].sum(axis=1)
        if draft_n_max <= self.positions:
            return within
        rates = self.rates
        ratio = (rates[-1] / rates[-2] if self.positions >= 2 and rates[-2] > 0
                 else rates[-1] if rates else 0.0)
        ratio = min(max(ratio, 0.0), 1.0)
        last: npt.NDArray[np.float64] = self.accepted[:, -1]
        extra = sum(ratio**step for step in range(1, draft_n_max - self.positions + 1))
        return within + last * extra


def acceptance_length(profile: Profile, draft_n_max: int) -> tuple[float, float, int]:
    """The mean acceptance length at ``draft_n_max`` (1 + accepted per draft within the
    first positions), its standard error with the profile's prompts as clusters (the ratio
    estimator's linearisation, as ``rate_interval``) and its df (prompts - 1)."""
    rate, se, df = cluster_ratio(profile.accepted_within(draft_n_max), profile.drafts)
    return 1.0 + rate, se, df


# A prediction's note where L's error or the curve's is unknown (below two prompts, or a
# curve of fewer than three points): no interval, and no point without one.
INSUFFICIENT = "insufficient data"


@dataclass(frozen=True)
class Prediction:
    """A drafter's predicted speedup at one draft length, with its interval; ``length`` is
    the acceptance length it used, ``extrapolated`` says what was outside the measurements
    ("" when nothing was)."""

    draft_n_max: int
    length: float
    speedup: float
    low: float
    high: float
    df: float
    extrapolated: str


def predict_speedup(profile: Profile, curve: CostCurve, level: float = 0.95) -> Prediction:
    """The speedup a drafter with ``profile`` would get from the engine of ``curve`` at the
    curve's draft length k.

    A drafting step yields L(k) tokens (``acceptance_length``) in the time the curve gives
    for it, L / s_k(L) plain steps; a step without a draft (an n-gram lookup that found
    nothing) yields one token in one plain step. With a share f of drafting steps:

        speedup = (f L + 1 - f) / (f L / s_k(L) + 1 - f).

    Its interval carries both sources: the curve's line at L (its covariance, df points - 2,
    plus the spread tau the line leaves, as for a new point) and L's own error (the
    profile's rows, prompts, as clusters, df prompts - 1), combined on the log scale by the
    delta method with Welch-Satterthwaite df. The draft share is taken as known (thousands
    of steps). Without L's error (one prompt) or the curve's: ``INSUFFICIENT``, no point.
    """
    k = curve.draft_n_max
    length, length_se, length_df = acceptance_length(profile, k)
    share = profile.draft_share
    line = curve.speedup(length, level)[0]
    notes = []
    if k > profile.positions:
        notes.append(f"acceptance beyond position {profile.positions} extrapolated")
    low_len, high_len = curve.lengths
    if not low_len - 1e-9 <= length <= high_len + 1e-9:
        notes.append(f"length {length:.2f} outside the curve's {low_len:.2f}-{high_len:.2f}")
    if not (math.isfinite(line) and line > 0 and math.isfinite(share)):
        return Prediction(k, length, NAN, NAN, NAN, NAN, "; ".join(notes))
    steps = share * length / line + (1.0 - share)
    tokens = share * length + (1.0 - share)
    value = tokens / steps
    # d log(value) / d log(line) and / d length, for the delta method.
    by_line = (share * length / line) / steps
    by_length = share / tokens - (share / line) / steps + (by_line * curve.gradient(length) / line)
    line_se = curve.standard_error(length) / line
    # A drafter's profile is not the geometric one synthetic acceptance forced, so its
    # point may sit off the line by the spread the line leaves (tau), like a new point.
    var_line = by_line**2 * (line_se**2 + (curve.tau / line) ** 2)
    var_length = (by_length * length_se) ** 2
    variance = var_line + var_length
    if not (math.isfinite(variance) and variance > 0.0 and curve.df >= 1 and length_df >= 1):
        # Too few prompts for L's error (or a curve without one): no point either.
        notes.append(INSUFFICIENT)
        return Prediction(k, length, NAN, NAN, NAN, NAN, "; ".join(notes))
    df_parts = [(var_line, curve.df), (var_length, length_df)]
    spread = sum(v**2 / d for v, d in df_parts if v > 0 and d >= 1)
    df = variance**2 / spread if spread > 0 else float(curve.df)
    margin = t_margin(math.sqrt(variance), df, level)
    return Prediction(k, length, value, value * math.exp(-margin), value * math.exp(margin),
                      df, "; ".join(notes))
