"""What a dry run prints: the expanded jobs, then the exact argv of each arm."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

from farm.matrix.spec import ArmRole, JobSpec
from farm.report.sheet import plain_sheet, table_text, terminal_width
from farm.results.runs import ArmCost
from farm.runner import Preflight, WorkerCheck, arm_command, pair_range, run_range
from farm.words import plural


def build_line(spec: JobSpec, role: ArmRole) -> str | None:
    """Where a source build comes from: its git source, the ref and the commit it named
    when the matrix was read, backend and cmake options; None for a build by name."""
    source = spec.arm(role).build.source
    if source is None:
        return None
    made = "" if spec.arm(role).build.path else " (made when the job runs)"
    return (f"{spec.arm(role).build.name}: {source.git} {source.ref} = commit {source.commit}, "
            f"{source.backend}{' ' + ' '.join(source.cmake) if source.cmake else ''}{made}")


def print_dry_run(jobs: Sequence[tuple[JobSpec, Preflight | None]], console: Console,
                  costs: Mapping[tuple[str, str], ArmCost] | None = None) -> None:
    """The expanded jobs as a table, then the exact argv of each arm (copy-pasteable), then
    how many runs they make and, from ``costs`` (a run's and a block start's mean seconds
    by build and model file, measured in the store), about how long."""
    console.file.write(table_text([plain_sheet(
        plural(len(jobs), "job"), ("job key", "class", "model", "variant", "varying flags",
                              "pairs", "runs"),
        [(spec.job_key[:12], spec.gpu_class, spec.model.name, spec.variant.name,
          spec.varying_text, _span(*pair_range(spec)), _span(*run_range(spec)))
         for spec, _ in jobs])], terminal_width()))
    for spec, checked in jobs:
        console.print(f"\njob {spec.job_key[:12]} ({spec.model.name}, {spec.variant.name})",
                      markup=False)
        for role in ("baseline", "variant"):
            console.print(f"  {role:9}{shlex.join(arm_command(spec, role, checked))}",
                          markup=False, soft_wrap=True)
        for line in dict.fromkeys(filter(None, (build_line(spec, "baseline"),
                                                build_line(spec, "variant")))):
            console.print(f"  build    {line}", markup=False, soft_wrap=True)
    console.print("\n" + design_totals([spec for spec, _ in jobs], costs or {}),
                  markup=False, soft_wrap=True)


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def design_totals(specs: Sequence[JobSpec], costs: Mapping[tuple[str, str], ArmCost]) -> str:
    """How many runs the jobs make and, where the store measured each arm's build on its
    model, about how long they take, and the server starts' and warm-ups' share of it
    where the store kept them (the dry run's last line, ``farm run``'s first)."""
    least = sum(run_range(spec)[0] for spec in specs)
    most = sum(run_range(spec)[1] for spec in specs)
    line = f"{_span(least, most)} runs in {plural(len(specs), 'job')}"
    arms = [(spec, costs.get((spec.arm(role).build.name,
                              Path(spec.model.path or spec.model.file or "").name)))
            for spec in specs for role in ("baseline", "variant")]
    measured = [(spec, cost) for spec, cost in arms if cost is not None]
    if not specs or len(measured) < len(arms):
        return line + "; no time estimate: the store has no run of every build on its model"
    # Each arm makes half a job's runs, in one block a pair.
    low, high = (sum(cost.run_s * run_range(spec)[end] / 2 for spec, cost in measured)
                 for end in (0, 1))
    starts = [(cost.start_s, spec) for spec, cost in measured]
    if any(start is None for start, _ in starts):
        return (line + _about(low, high) + " of generation, from the store's runs of the same "
                "builds and models")
    fewest_s, most_s = (sum((start or 0.0) * pair_range(spec)[end] for start, spec in starts)
                        for end in (0, 1))
    return (line + _about(low + fewest_s, high + most_s) + ", server starts and warm-ups "
            f"{most_s / (high + most_s):.0%} of it, from the store's runs of the same builds and "
            "models")


def _about(low: float, high: float) -> str:
    return f"; about {_minutes(low)}" + ("" if high == low else f" to {_minutes(high)}")


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def print_worker_check(found: WorkerCheck, console: Console) -> None:
    """``farm submit --dry-run``: the jobs as a worker checks them, and what was not."""
    print_dry_run(found.shown, console)
    for line in found.unchecked:
        console.print(line, markup=False, soft_wrap=True)
