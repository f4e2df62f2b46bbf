"""What ``farm bisect`` prints: its answer (a plain dict, as ``--format json`` writes it)
as text or markdown: per series the answer, then the evidence of each step, then the
cost; and ``--dry-run``'s plan."""

from __future__ import annotations

import math
from typing import Any

from farm.words import plural

STEP_COLUMNS = ("commit", "subject", "value [95%]", "vs good", "decision", "error ≤", "p",
                "rounds", "pairs", "build s")


def _number(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}"


def _percent(value: Any) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{(value - 1.0) * 100:+.0f}%"


def _step_cells(step: dict[str, Any]) -> list[str]:
    value = (f"{_number(step['value'])} [{_number(step['low'])}, {_number(step['high'])}]"
             if step.get("value") is not None else "-")
    change = (f"{_percent(step['change'])} [{_percent(step['change_low'])}, "
              f"{_percent(step['change_high'])}]" if step.get("change") is not None else "-")
    return [step["commit"][:12], step["subject"][:40], value, change, step["verdict"],
            f"{step['level']:.4f}" if step["level"] else "-", _number(step["p_value"], 2),
            str(step["rounds"]), str(step["pairs"]), f"{step['build_seconds']:.0f}"]


def answer_line(result: dict[str, Any]) -> str:
    """One sentence: the first bad commit, or why there is none."""
    label, answer = result["label"], result["answer"]
    if answer == "found":
        first = result["first_bad"]
        return f"{label}: first bad commit {first['commit'][:12]} {first['subject']!r}"
    left = ", ".join(commit[:12] for commit in result["range"])
    if answer == "no difference":
        return f"{label}: no difference between good and bad by the test; nothing to bisect"
    if answer == "no test":
        return f"{label}: good and bad have no interval to test (no spread, no values)"
    if answer == "neither":
        return (f"{label}: {result['steps'][-1]['commit'][:12]} is neither like good nor like "
                f"bad (the series changed more than once, or by another amount); the change "
                f"is among {left}")
    if answer == "skipped":
        return (f"{label}: only commits that cannot be measured are left; the first bad is "
                f"one of {left}")
    return (f"{label}: {result['steps'][-1]['commit'][:12]} is too close to call after "
            f"{result['steps'][-1]['rounds']} rounds; the first bad is one of {left}")


def _table_text(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                        strict=True)).rstrip()
                     for row in rows)


def _cost(cost: dict[str, Any]) -> str:
    skipped = "".join(f"\nskipped {commit[:12]}: {why}" for commit, why in
                      cost["skipped"].items())
    return (f"cost: {plural(cost['builds'], 'build')} ({cost['build_seconds']:.0f} s this "
            f"call), {plural(cost['jobs'], 'job')}, {plural(cost['pairs'], 'pair')}, "
            f"{cost['minutes']:.1f} minutes measuring{skipped}")


def bisect_text(answer: dict[str, Any]) -> str:
    """The answer as plain text."""
    lines = [f"bisect {answer['good'][:12]}..{answer['bad'][:12]}: {answer['commits']} "
             f"commits, job {answer['job'][:12]} ({answer['job_label']}), error rate of the "
             f"whole search ≤ {answer['alpha']:.0%} per series", ""]
    for result in answer["series"]:
        lines += [answer_line(result),
                  f"  ({result['design']}; error rate spent {result['spent']:.4f})",
                  _table_text([list(STEP_COLUMNS)] + [_step_cells(step)
                                                      for step in result["steps"]]), ""]
    lines.append(_cost(answer["cost"]))
    return "\n".join(lines)


def bisect_markdown(answer: dict[str, Any]) -> str:
    """The answer as markdown (an issue or a PR)."""
    lines = [f"## bisect {answer['good'][:12]}..{answer['bad'][:12]}", "",
             f"{answer['commits']} commits, job `{answer['job'][:12]}` ({answer['job_label']}); "
             f"error rate of each series' whole search ≤ {answer['alpha']:.0%}.", ""]
    for result in answer["series"]:
        lines += [f"**{answer_line(result)}** ({result['design']}; spent "
                  f"{result['spent']:.4f})", "", "| " + " | ".join(STEP_COLUMNS) + " |",
                  "|" + "---|" * len(STEP_COLUMNS)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in _step_cells(step))
                  + " |" for step in result["steps"]]
        lines.append("")
    lines.append(_cost(answer["cost"]))
    return "\n".join(lines)


def plan_text(plan: dict[str, Any]) -> str:
    """``--dry-run``: the commits, the error rate of each step and the expected cost."""
    lines = [f"bisect {plan['good'][:12]}..{plan['bad'][:12]} of {plan['matrix']}: "
             f"{plan['commits']} commits (first parent), job {plan['job'][:12]} "
             f"({plan['job_label']})"]
    lines += [f"  {commit[:12]} {subject}" for commit, subject in plan["list"]]
    lines += [f"series: {', '.join(plan['series'])}",
              f"error rate: {plan['alpha']:.0%} for each series' search: the ends "
              f"{plan['share']:.4f}, {plan['decisions']} decisions {plan['share']:.4f} each, "
              f"{plan['share']:.4f} kept for skips; each step looks at most {plan['rounds']} "
              f"times, at {plan['share'] / plan['rounds']:.4f} a look",
              f"expected cost: {plan['builds']} builds, {plan['jobs'][0]} to {plan['jobs'][1]} "
              f"jobs of {plan['pairs'][0]} to {plan['pairs'][1]} pairs each"
              + (f", about {plan['minutes'][0]:.0f} to {plan['minutes'][1]:.0f} minutes "
                 "measuring (as long as this job's latest run)" if plan.get("minutes") else "")
              + (f"; {plan['stored']}" if plan.get("stored") else "")]
    return "\n".join(lines)
