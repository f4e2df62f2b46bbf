"""Whether the variant's outputs match the baseline's, against the baseline's own repeats."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import NAN

# A divergence this early is unlikely to be benign floating-point drift between two greedy
# decodes with the same seed: it points at the speculative path changing the output.
EARLY_DIVERGENCE_TOKENS = 16


# Rough characters per token for English BPE text, used only when token ids are missing.
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Agreement:
    """How far the variant's outputs match the baseline's for the same prompt and seed,
    against how far the baseline's own repeated blocks match each other (the control).

    ``early_prompts`` / ``control_early_prompts``: prompts where most comparisons part
    within the early limit, variant-vs-baseline and baseline-vs-baseline. ``applicable`` is
    False when sampling at temperature > 0: outputs are not expected to match.
    """

    identical_share: float
    control_share: float
    first_divergence: dict[str, int | None]
    early_prompts: int
    control_early_prompts: int
    suspect: bool
    applicable: bool
    reason: str


def _has_tokens(value: object) -> bool:
    return isinstance(value, list | tuple | np.ndarray)


def _as_sequence(value: object, use_tokens: bool) -> Sequence[object]:
    if use_tokens:  # a list as it is (only read), else as a list: compared with lists
        return value if isinstance(value, list) else (
            list(value) if isinstance(value, tuple | np.ndarray) else [])
    return value if isinstance(value, str) else ""


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    if a == b:  # the common case, compared in C
        return None
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    # One output a strict prefix of the other: they part where the shorter one ends.
    return None if len(a) == len(b) else min(len(a), len(b))


# One comparison: the prompt, then each measure of the compared run and of its reference.
Compared = list[tuple[object, ...]]


def _compared(runs: pd.DataFrame, measures: Sequence[str] = ("text", "tokens"),
              ) -> tuple[Compared, Compared]:
    """Variant runs, and the baseline's runs of its later blocks, each with the run of the
    baseline's first block with the same prompt and repetition: per comparison its
    prompt, then each of ``measures`` of the run and of that reference. Variant runs in
    their order, baseline runs by block (in their order within one); a run without a
    reference is not compared. Plain Python over column lists: a job compares a few
    hundred runs, where merging frames cost ten times as long."""
    arms, blocks = runs["arm"].tolist(), runs["block"].tolist()
    keys = list(zip(runs["prompt_id"].tolist(), runs["repetition"].tolist(), strict=True))
    values = list(zip(*(runs[name].tolist() for name in measures), strict=True))
    reference: dict[tuple[object, object], int] = {}
    later: list[int] = []
    for index in sorted((index for index, arm in enumerate(arms) if arm == "baseline"),
                        key=blocks.__getitem__):
        if keys[index] in reference:
            later.append(index)
        else:
            reference[keys[index]] = index

    def compared(indexes: Sequence[int]) -> Compared:
        return [(keys[index][0], *values[index], *values[reference[keys[index]]])
                for index in indexes if keys[index] in reference]

    return (compared([index for index, arm in enumerate(arms) if arm == "variant"]),
            compared(later))


def _divergences(compared: Compared, use_tokens: bool) -> list[int | None]:
    """Where each comparison's run first parts from its reference (``_compared`` of
    text and tokens)."""
    at = 2 if use_tokens else 1
    return [_first_difference(_as_sequence(row[at], use_tokens),
                              _as_sequence(row[at + 2], use_tokens)) for row in compared]


def _early_prompts(compared: Compared, positions: list[int | None], early: int) -> int:
    # A prompt counts when most of its comparisons part early: one benign flip in one run
    # (floating-point order) does not make it, a change in the decoding path does.
    counts: dict[object, list[int]] = {}
    for row, position in zip(compared, positions, strict=True):
        count = counts.setdefault(row[0], [0, 0])
        count[0] += position is not None and position < early
        count[1] += 1
    return sum(parted / total > 0.5 for parted, total in counts.values())


def _agreement_reason(divergence: dict[str, int | None], share: float, control_share: float,
                      use_tokens: bool, early: int, early_prompts: tuple[int, int]) -> str:
    unit = "token" if use_tokens else "character"
    parts = [] if use_tokens else [f"no token ids on every run: compared characters "
                                   f"(early = first {early} characters)"]
    control = ("no repeated baseline block to compare" if math.isnan(control_share) else
               f"baseline vs itself: {1 - control_share:.0%} differ")
    differing = {p: d for p, d in divergence.items() if d is not None}
    if not differing:
        return "; ".join([*parts, "every variant output matches the baseline", control])
    first = min(differing, key=lambda p: (differing[p], p))
    parts.append(f"{1 - share:.0%} of outputs differ, {len(differing)} of {len(divergence)} "
                 f"prompts; earliest at {unit} {differing[first]} ({first})")
    parts.append(control)
    variant_early, control_early = early_prompts
    parts.append(f"prompts parting within the first {early} {unit}s: {variant_early} "
                 f"(variant) vs {control_early} (baseline control)")
    return "; ".join(parts)


def agreement(runs: pd.DataFrame, *, not_applicable: str | None = None) -> Agreement:
    """Compare each variant output with the baseline's for the same prompt and repetition,
    and the baseline's later blocks with its first (the control).

    Seeds are fixed, so speculative decoding should reproduce the baseline's output; it may
    part late through floating-point order, as the baseline may from itself. The job is
    suspect only when more prompts part early (most of their comparisons within the first
    16 tokens) variant-vs-baseline than baseline-vs-baseline. Token ids are compared when
    every compared run has them; otherwise characters (the reason says so), the early limit
    scaled to characters. ``not_applicable`` says why outputs need not match (sampling
    at temperature > 0, synthetic acceptance): nothing compared, never suspect.
    """
    if not_applicable:
        return Agreement(NAN, NAN, {}, 0, 0, False, False, f"not applicable: {not_applicable}")
    compared, control = _compared(runs)
    if not compared:
        return Agreement(NAN, NAN, {}, 0, 0, False, True,
                         "no variant run has a baseline run to compare with")
    use_tokens = all(_has_tokens(row[2]) and _has_tokens(row[4]) for row in (*compared, *control))
    early = EARLY_DIVERGENCE_TOKENS * (1 if use_tokens else CHARS_PER_TOKEN)
    positions = _divergences(compared, use_tokens)
    control_positions = _divergences(control, use_tokens)
    divergence: dict[str, int | None] = {}
    for row, position in zip(compared, positions, strict=True):
        # A prompt's divergence is its earliest over repetitions; None only if all match.
        prompt = str(row[0])
        found = [d for d in (divergence.get(prompt), position) if d is not None]
        divergence[prompt] = min(found) if found else None
    share = sum(p is None for p in positions) / len(positions)
    control_share = (sum(p is None for p in control_positions) / len(control_positions)
                     if control_positions else NAN)
    early_prompts = _early_prompts(compared, positions, early)
    control_early = _early_prompts(control, control_positions, early) if control else 0
    return Agreement(share, control_share, divergence, early_prompts, control_early,
                     early_prompts > control_early, True,
                     _agreement_reason(divergence, share, control_share, use_tokens, early,
                                       (early_prompts, control_early)))


def stop_mismatches(runs: pd.DataFrame) -> int:
    """How many variant runs generated another number of tokens than the baseline's run of
    the same prompt and repetition (in its first block).

    None can under ``stop: fixed`` (every run generates n-predict tokens). Under ``natural``
    at temperature 0 both arms should stop at the same end of the same output: a mismatch
    means the arms did different work, so their decode tok/s compare unlike runs. At
    temperature > 0 lengths differ by chance. Runs without a count are not compared.
    """
    compared, _ = _compared(runs, ("generated_tokens",))
    return sum(not _missing(run) and not _missing(base) and run != base
               for _, run, base in compared)


def _missing(count: object) -> bool:
    return count is None or (isinstance(count, float) and math.isnan(count))
