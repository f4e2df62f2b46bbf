"""Jobs across builds: one arm's flags on an older and a newer commit of its build in one
paired job (the baseline arm on the older commit, the variant arm on the newer), so that
what changed between the two has the job's crossover interval instead of the difference
of two jobs run minutes or days apart (docs/history.md). ``farm track --paired`` makes
them between consecutive tracked commits; ``farm bisect`` between good and a candidate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from farm.errors import ConfigError
from farm.matrix.spec import Arm, ArmRole, BuildRef, BuildSource, JobSpec


def _source(build: BuildRef) -> BuildSource:
    if build.source is None:
        raise ConfigError(f"build {build.name!r} names no source, so it has no other commit "
                          "to compare with; give `build: {name, git, ref}` (docs/builds.md)",
                          role="build")
    return build.source


def at_commit(build: BuildRef, commit: str) -> BuildRef:
    """``build`` made from another commit of its source (its name kept)."""
    source = _source(build).model_copy(update={"commit": commit, "ref": commit})
    return BuildRef(name=build.name, source=source)


def cross_build(spec: JobSpec, role: ArmRole, older: str) -> JobSpec:
    """The job running ``spec``'s ``role`` arm on commit ``older`` (baseline) and on the
    commit ``spec`` names (variant): its speedup is the newer build over the older."""
    arm = spec.arm(role)
    newer = _source(arm.build).commit
    data = spec.model_dump()
    data.update(
        baseline=Arm(role="baseline", name=f"{arm.name}@{older[:12]}",
                     build=at_commit(arm.build, older), flags=arm.flags).model_dump(),
        variant=Arm(role="variant", name=f"{arm.name}@{newer[:12]}", build=arm.build,
                    flags=arm.flags).model_dump(),
        varying={"build": f"{older[:12]}..{newer[:12]}", "arm": arm.name}, control=False)
    return JobSpec.model_validate(data)


def cross_build_specs(specs: Iterable[JobSpec], older: str,
                      roles: Sequence[ArmRole] = ("baseline", "variant")) -> list[JobSpec]:
    """For every job and each of ``roles``, its arm on ``older`` against the commit the job
    names, once per distinct arm (jobs sharing a baseline share its cross job); none for an
    arm already at ``older``."""
    found: dict[str, JobSpec] = {}
    for spec in specs:
        for role in roles:
            if _source(spec.arm(role).build).commit == older:
                continue
            cross = cross_build(spec, role, older)
            found.setdefault(cross.job_key, cross)
    return list(found.values())
