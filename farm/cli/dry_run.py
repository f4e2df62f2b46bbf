"""What a dry run prints: the expanded jobs, then the exact argv of each arm."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console

from farm.matrix.spec import ArmRole, JobSpec
from farm.report.sheet import plain_sheet, table_text, terminal_width
from farm.runner import WorkerCheck
from workers.job.runtime.server import HOST
from workers.paths import downloaded_files, hub_file


def _model_place(spec: JobSpec) -> str:
    """Where the arm's model will be on the node: in the models dir, a download where
    downloads go (a Hub model not yet pinned: under the commit its revision names then)."""
    model, root = spec.model, Path("MODELS_DIR")
    if model.remote and model.pinned:
        return str(downloaded_files(model, root)[0][1])
    if model.hf is not None:
        return str(hub_file(root, model.hf, f"COMMIT-OF-{model.revision}", model.file or ""))
    return str(root / (model.file or f"{model.name}.gguf"))


def arm_command(spec: JobSpec, role: ArmRole) -> list[str]:
    """The exact argv of an arm, with the port the farm picks shown as ``PORT``."""
    model = spec.model.path or _model_place(spec)
    farm_flags = ["--model", model, "--host", HOST, "--port", "PORT", "--parallel", "1",
                  "--metrics"]
    arm = spec.arm(role)
    return [arm.build.path or f"<build {arm.build.name}>", *farm_flags, *arm.argv]


def build_line(spec: JobSpec, role: ArmRole) -> str | None:
    """Where a source build comes from: its git source, the ref and the commit it named
    when the matrix was read, backend and cmake options; None for a build by name."""
    source = spec.arm(role).build.source
    if source is None:
        return None
    made = "" if spec.arm(role).build.path else " (made when the job runs)"
    return (f"{spec.arm(role).build.name}: {source.git} {source.ref} = commit {source.commit}, "
            f"{source.backend}{' ' + ' '.join(source.cmake) if source.cmake else ''}{made}")


def print_dry_run(specs: list[JobSpec], console: Console) -> None:
    """The expanded jobs as a table, then the exact argv of each arm (copy-pasteable)."""
    console.file.write(table_text([plain_sheet(
        f"{len(specs)} jobs", ("job key", "class", "model", "variant", "varying flags"),
        [(spec.job_key[:12], spec.gpu_class, spec.model.name, spec.variant.name,
          spec.varying_text) for spec in specs])], terminal_width()))
    for spec in specs:
        console.print(f"\njob {spec.job_key[:12]} ({spec.model.name}, {spec.variant.name})",
                      markup=False)
        for role in ("baseline", "variant"):
            console.print(f"  {role:9}{shlex.join(arm_command(spec, role))}", markup=False,
                          soft_wrap=True)
        for line in dict.fromkeys(filter(None, (build_line(spec, "baseline"),
                                                build_line(spec, "variant")))):
            console.print(f"  build    {line}", markup=False, soft_wrap=True)


def print_worker_check(found: WorkerCheck, console: Console) -> None:
    """``farm submit --dry-run``: the jobs as a worker checks them, and what was not."""
    print_dry_run(found.shown, console)
    for line in found.unchecked:
        console.print(line, markup=False, soft_wrap=True)
