"""A validated matrix expanded into its jobs, deterministically and purely: GPU class x
build x model x baseline x concurrency x prompt length x variant, each list value of a
flag swept (a cartesian product), every flag canonical and on the allow-list
(``farm.matrix.options``), each job's ``varying`` naming what sets it apart, and a job
given twice refused."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from farm.errors import ConfigError
from farm.matrix.build_refs import Commits, build_ref
from farm.matrix.flags import FlagMap, FlagValue, parse_args, scalar
from farm.matrix.model_refs import draft_refs, drafts_named, model_refs
from farm.matrix.options import admit_name, canonical, check_flag
from farm.matrix.prompts import matrix_prompts, tier
from farm.matrix.schema import FlagSpec, Matrix, Variant
from farm.matrix.spec import Arm, JobSpec


def _flag_choices(spec: FlagSpec, args: str | None, prefix: str,
                  allow: frozenset[str]) -> list[FlagMap]:
    """All flag maps a spec expands to: each list value sweeps its flag (cartesian product).
    Every flag is canonical and allowed, every value of the shape its option takes
    (``farm.matrix.options``)."""
    axes: list[list[tuple[str, FlagValue | None]]] = []
    seen: dict[str, str] = {}
    for raw, value in spec.items():
        key = f"{prefix}flags.{raw}"
        name = admit_name(raw, key, allow)
        if name in seen:
            raise ConfigError(f"{key}: same flag as {seen[name]}; give it once")
        seen[name] = key
        if isinstance(value, list):
            if not value:
                raise ConfigError(f"{key}: an empty list sweeps nothing; give values or remove it")
            axes.append([_checked(raw, scalar(item, f"{key}[{i}]"), f"{key}[{i}]", allow)
                         for i, item in enumerate(value)])
        else:
            axes.append([_checked(raw, scalar(value, key), key, allow)])
    for raw, value in parse_args(args, f"{prefix}args") if args else []:
        name, checked = check_flag(raw, value, f"{prefix}args", allow)
        if name in seen:
            raise ConfigError(f"{prefix}args: --{name} is also set in {seen[name]}; give it once")
        seen[name] = f"{prefix}args"
        axes.append([(name, checked)])
    return [dict(combo) for combo in itertools.product(*axes)]


def _checked(raw: str, value: FlagValue | None, where: str,
             allow: frozenset[str]) -> tuple[str, FlagValue | None]:
    """A flag of a matrix: null (a variant removing a baseline flag) needs no check."""
    if value is None:
        return admit_name(raw, where, allow), None
    return check_flag(raw, value, where, allow)


def _swept(spec: FlagSpec) -> list[str]:
    return [canonical(raw, raw) for raw, value in spec.items() if isinstance(value, list)]


def _apply(baseline: FlagMap, changes: FlagMap, where: str) -> FlagMap:
    merged = dict(baseline)
    for name, value in changes.items():
        if value is None and name not in baseline:
            raise ConfigError(f"{where}flags.{name}: null removes a baseline flag, but the "
                              "baseline does not set it")
        merged[name] = value
    return merged


def _arm_flags(flags: FlagMap) -> tuple[tuple[str, FlagValue], ...]:
    # False stays (it is checked against the build, and omitted from argv) so that a
    # YAML `off` given to a value-taking flag can be reported instead of silently dropped.
    return tuple((name, value) for name, value in flags.items() if value is not None)


def _varying(baseline: FlagMap, variant: FlagMap, swept: set[str]) -> dict[str, str | None]:
    base, var = dict(_arm_flags(baseline)), dict(_arm_flags(variant))
    changed = {name: _text(var.get(name)) for name in [*base, *var]
               if base.get(name) != var.get(name)}
    for name in sorted(swept):
        changed.setdefault(name, _text(base.get(name)))
    return changed


def _text(value: FlagValue | None) -> str | None:
    if value is None or value is False:
        return None
    return "on" if value is True else value


def _variant_arms(variant: Variant, prefix: str, baseline: FlagMap, allow: frozenset[str],
                  ) -> Iterator[tuple[str, FlagMap]]:
    swept = _swept(variant.flags)
    for changes in _flag_choices(variant.flags, variant.args, prefix, allow):
        merged = _apply(baseline, changes, prefix)
        suffix = ",".join(f"{name}={_text(changes[name])}" for name in swept)
        yield (f"{variant.name}[{suffix}]" if suffix else variant.name), merged


# Matrix keys swept like a flag, the same in both arms: a job's `varying` names them when
# the matrix lists more than one value.
_AXES = ("concurrency", "prompt-length")


def _axes(values: dict[str, tuple[int, list[int]]]) -> dict[str, str | None]:
    """The swept axes' values of one job, for its ``varying``: those with several values."""
    return {name: str(value) for name, (value, choices) in values.items() if len(choices) > 1}


def expand(matrix: Matrix, path: Path, allow: frozenset[str] = frozenset(),
           commits: Commits | None = None) -> list[JobSpec]:
    """Every job of the matrix, deterministically: GPU class x build x model x baseline x
    concurrency x prompt length x variant. ``allow``: options beyond the allow-list an
    operator lets this node pass (``farm.matrix.options``).

    Pure: builds and models stay as the matrix names them, a source build at the commit
    ``commits`` gives its ref (``farm.matrix.build_refs.resolve_refs``); the node that runs
    a job resolves them to files (``workers.job.resolve.resolve``).
    """
    commits = commits or {}
    prompts = matrix_prompts(matrix, path)
    models = model_refs(matrix, path)
    drafts = draft_refs(matrix, path)
    builds = [build_ref(entry, path.parent, commits) for entry in matrix.build_entries()]
    baselines = _flag_choices(matrix.flags, matrix.args, f"{path}: ", allow)
    swept = set(_swept(matrix.flags))
    sampling = matrix.sampling.request_fields()  # once: each JobSpec validates its own copy
    concurrencies, lengths = matrix.concurrencies(), matrix.prompt_lengths()
    tiers = {length: tier(prompts, length, path) for length in lengths}
    jobs: dict[str, JobSpec] = {}
    for gpu_class, build, model, baseline, streams, length in itertools.product(
            matrix.gpu_classes, builds, models, baselines, concurrencies, lengths):
        for index, variant in enumerate(matrix.all_variants()):
            where = (f"variants[{index}]" if index < len(matrix.variants)
                     else f"engine-curve ({variant.name})")
            variant_build = (build if variant.build is None
                             else build_ref(variant.build, path.parent, commits))
            for name, flags in _variant_arms(variant, f"{path}: {where}.", baseline, allow):
                varying = _varying(baseline, flags, swept)
                if variant_build.name != build.name:
                    varying["build"] = variant_build.name
                elif len(builds) > 1:
                    varying.setdefault("build", build.name)
                varying |= _axes({"concurrency": (streams, concurrencies),
                                  "prompt-length": (length, lengths)})
                same = (not set(varying) - swept - {"build", *_AXES}
                        and variant_build.name == build.name)
                if variant.control and not same:
                    raise ConfigError(f"{path}: {where} ({variant.name}): a control arm runs "
                                      "the baseline again; remove its `flags`, `args` and "
                                      "`build`, or drop `control: true`")
                if same and not variant.control:
                    raise ConfigError(f"{path}: {where} ({variant.name}): changes no flag of "
                                      "the baseline; give `flags` or `args` that differ, or "
                                      "set `control: true` for an A/A arm (the noise floor)")
                job = JobSpec(
                    campaign=matrix.campaign, gpu_class=gpu_class, model=model,
                    baseline=Arm(role="baseline", name="baseline", build=build,
                                 flags=_arm_flags(baseline)),
                    variant=Arm(role="variant", name=name, build=variant_build,
                                flags=_arm_flags(flags)),
                    varying=varying, prompt_mode=matrix.prompt_mode, prompts=tiers[length],
                    n_predict=matrix.n_predict, sampling=sampling,
                    repetitions=matrix.repetitions, pairs=matrix.pairs,
                    max_pairs=matrix.most_pairs, target_ci=matrix.target_ci,
                    target_assurance=matrix.target_assurance, stop_rule=matrix.stop_rule,
                    control=variant.control, stop=matrix.stop, concurrency=streams,
                    prompt_length=length, draft_models=drafts_named(drafts, baseline, flags),
                    busy_node=matrix.busy_node, busy_wait=matrix.busy_wait)
                if job.job_key in jobs:
                    raise ConfigError(f"{path}: {where} ({name}): same job as variant "
                                      f"{jobs[job.job_key].variant.name!r}; remove one")
                jobs[job.job_key] = job
    return list(jobs.values())
