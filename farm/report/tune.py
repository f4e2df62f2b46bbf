"""What ``farm tune`` prints: its answer (a plain dict, as ``--format json`` writes it) as
text or markdown: the setting named with its speedup, why the race stopped, the survivors,
each dropped candidate with the deficit that dropped it, and the cost against the grid;
and ``--dry-run``'s space."""

from __future__ import annotations

from typing import Any

from farm.report.cells import clean
from farm.report.sheet import Column, Row, Sheet, markdown, table_text
from farm.words import plural

STOPS = {"one-left": "one candidate left",
         "leader-within": "the leader is within ε of the fastest (no survivor can be more "
                          "than ε faster)",
         "fair-choice": "every survivor is within ε of the leader: any is a fair choice",
         "budget": "the budget (or every open candidate's max pairs) ran out: the leader is "
                   "the best so far, without the race's guarantee"}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _deficit(row: dict[str, Any]) -> str:
    if row["vs_leader_low"] == row["vs_leader_high"] == 1.0:
        return "leader"
    return (f"{(row['vs_leader'] - 1) * 100:+.1f}% [{(row['vs_leader_low'] - 1) * 100:+.1f}%, "
            f"{(row['vs_leader_high'] - 1) * 100:+.1f}%]")


def _speedup(row: dict[str, Any]) -> str:
    return f"{_ratio(row['speedup'])}x [{_ratio(row['low'])}, {_ratio(row['high'])}]"


def answer_lines(answer: dict[str, Any]) -> list[str]:
    """The answer in sentences: the setting, why the race stopped, the cost."""
    named = answer["named"]
    saving = (f" ({answer['pairs'] / answer['grid_pairs']:.0%} of it)"
              if answer["grid_pairs"] else "")
    return [f"best: {clean(named['candidate'])}: speedup {_speedup(named)} against the "
            f"baseline after {plural(named['pairs'], 'pair')}",
            f"stopped: {STOPS[answer['stop']]} (ε = {answer['epsilon']:.0%}, "
            f"{plural(answer['looks'], 'look')} at {answer['look_level']:.0%} each)",
            f"cost: {plural(answer['pairs'], 'pair')} in {answer['seconds']:.0f} s; every "
            f"candidate to ±3% about {answer['grid_pairs']:.0f} pairs, "
            f"{answer['grid_seconds']:.0f} s{saving}",
            f"campaigns: {', '.join(answer['round_campaigns'])}"]


def _column(header: str, key: str, numeric: bool = False) -> Column:
    return Column(header, lambda row: str(row[key]), numeric=numeric)


def _sheets(answer: dict[str, Any]) -> list[Sheet]:
    survivors: list[Row] = [{"candidate": row["candidate"], "speedup": _speedup(row),
                  "deficit": _deficit(row), "pairs": row["pairs"]}
                 for row in answer["survivors"]]
    sheets = [Sheet(f"{answer['campaign']}: survivors, leader first",
                    [_column("candidate", "candidate"), _column("speedup [CI]", "speedup"),
                     _column("vs leader [CI]", "deficit"),
                     _column("pairs", "pairs", True)], survivors)]
    dropped: list[Row] = [{"candidate": row["candidate"], "deficit": _deficit(row),
                "leader": row["leader"], "look": row["look"], "spent": row["spent"],
                "pairs": row["pairs"]} for row in answer["dropped"]]
    if dropped:
        sheets.append(Sheet(f"{answer['campaign']}: dropped, slower than the leader by more "
                            "than ε", [_column("candidate", "candidate"),
                                       _column("vs leader [CI]", "deficit"),
                                       _column("leader then", "leader"),
                                       _column("at look", "look", True),
                                       _column("pairs run by then", "spent", True),
                                       _column("its pairs", "pairs", True)], dropped))
    return sheets


def tune_text(answer: dict[str, Any], width: int | None) -> str:
    """The answer as terminal text."""
    return "\n".join(answer_lines(answer)) + "\n\n" + table_text(_sheets(answer), width)


def tune_markdown(answer: dict[str, Any]) -> str:
    """The answer as markdown."""
    return "".join(f"- {line}\n" for line in answer_lines(answer)) + "\n" + markdown(
        _sheets(answer))


def space_text(space: dict[str, Any]) -> str:
    """``--dry-run``: the candidates and what the race may spend."""
    lines = [f"{space['campaign']}: {plural(space['size'], 'candidate')}, ε = "
             f"{space['epsilon']:.0%}; the first round runs {space['first_round']} pairs each "
             f"({space['first_round_pairs']} in all), the race at most {space['most_pairs']}; "
             f"every candidate to ±3% takes up to {space['grid_most_pairs']}"]
    return "\n".join(lines + [f"  {clean(name)}" for name in space["candidates"]]) + "\n"
