"""The lines under a table that explain each flag shown in it: what it means, what to do.

A table printer collects the flags its rows show (the texts of a flags column, each a
comma-separated list) and prints ``flag_legend(texts)`` after the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from farm.report.text import JOB_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

# A flag's text starts with its name (a failure's with its class); the order is the
# report's. Where a number or interval follows, the explanation says what it is.
MEANINGS: tuple[tuple[str, str], ...] = (
    ("no drafts", "the variant drafted nothing on these prompts, so its speedup is the cost "
                  "of speculation alone: check its flags, or use prompts that repeat text "
                  "(n-gram drafting copies spans)"),
    ("outputs diverge", "the variant's texts part from the baseline's early, more than the "
                        "baseline's own blocks do: a wrong drafter or template may be "
                        "answering something else; read the texts (`farm export`)"),
    ("drift", "the machine's speed changed over the job's blocks (heat, clocks, other "
              "load); the interval already keeps a linear drift out of the speedup, but "
              "a quiet, cooled machine gives a tighter one"),
    ("target not reachable", "the job ran its max-pairs and its interval is still wider "
                             "than the target (its half-width): the interval holds, but to "
                             "reach the target quiet the machine or raise `max-pairs`"),
    ("faster (decided", "the decision design's answer at its first look that decided: the "
                        "speedup's interval, at the level its looks spend, lay above 1x"),
    ("slower (decided", "the decision design's answer at its first look that decided: the "
                        "speedup's interval, at the level its looks spend, lay below 1x"),
    ("within ±", "the decision design's answer at its first look that decided: the speedup's "
                 "interval lay inside that margin of 1x, so no gain or loss larger than it"),
    ("undecided", "the decision design stopped without an answer (at max pairs, or where "
                  "more pairs would not have decided it): the interval holds, but a quieter "
                  "machine or a larger `max-pairs` may decide it"),
    ("target met", "the precision design stopped at its first look whose interval (adjusted "
                   "for looking after each pair) was within the target"),
    ("busy node", "other processes used the CPU or GPU during some blocks; set `busy-node: "
                  "wait` in the matrix to hold each block until the node is quiet "
                  "(docs/busy-node.md)"),
    ("blocks waited", "blocks held for a quiet node (`busy-node: wait`) this long"),
    ("warm-up short", "each block's first run decoded slower than its later runs (the "
                      "interval is that slowdown): both arms pay it, but it weighs on their "
                      "means; more `repetitions` per block dilute it"),
    ("GPU throttled", "the GPU lowered its clocks (heat or power) during these runs; cool "
                      "it or fix its clocks, then run again"),
    ("weights not all on GPU", "some of the model's layers ran on the CPU; raise -ngl, or "
                               "use a smaller quant"),
    ("runs stopped at another length", "variant runs ended at another token than the "
                                       "baseline's (`stop: natural`): their speeds are per "
                                       "token, their texts differ"),
    ("streams overlapped", "simultaneous streams took turns more than they ran together, so "
                           "the aggregate measures turns; give fewer streams or more slots"),
    ("acceptance low on slot", "these server slots accepted far fewer drafts than the "
                               "others (their rate beside the others')"),
    ("best of", "the fastest of m variants: [low, high] is its interval taken together with "
                "the other m - 1 (Bonferroni), wider because the best-looking of many is "
                "overstated; quote that one"),
)

# A failed job's flag is its failure class (farm.errors).
_FAILED = ("the job failed with this failure class; `farm status` says why, and the "
           "server logs are in `farm paths`' logs")


def flag_legend(flags: Iterable[str]) -> list[str]:
    """One line per distinct flag among ``flags`` (flags-column texts, comma-separated),
    in the order of ``MEANINGS``, an unknown one (a failure class) last."""
    shown = {part.strip() for text in flags for part in _split(text) if part.strip()}
    lines = [f"{name}: {meaning}" for name, meaning in MEANINGS
             if any(_names(flag, name) for flag in shown)]
    failures = sorted(flag for flag in shown
                      if not any(_names(flag, name) for name, _ in MEANINGS))
    return lines + [f"{failure}: {_FAILED}" for failure in failures]


def job_legend(report: pd.DataFrame) -> list[str]:
    """The legend of the per-job table (``farm.report.text.job_table``) of ``report``."""
    column = next(column for column in JOB_COLUMNS if column.header == "flags")
    return flag_legend(column.cell(row) for row in report.to_dict(orient="records"))


def _names(flag: str, name: str) -> bool:
    """Whether ``flag`` is ``name``'s: it starts with it, after a count (``3 runs ...``) or
    a note before it (``busy node: ...; blocks waited``)."""
    return re.search(rf"(^|^\d+ |; ){re.escape(name)}", flag) is not None


def _split(text: str) -> list[str]:
    """A flags cell's flags: split on commas outside brackets (``best of 2: [0.8, 1.5]``,
    ``more in the variant's (1 baseline, 2 variant)``)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]
