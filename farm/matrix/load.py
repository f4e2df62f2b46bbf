"""Read a matrix file: YAML -> validated ``Matrix`` -> deterministic list of ``JobSpec``.

Every problem is a ``ConfigError`` naming the file, the key path and the fix, raised
before anything runs or is written.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ValidationError

from farm.errors import ConfigError
from farm.matrix.files import relative_file
from farm.matrix.flags import FlagMap, FlagValue, parse_args, scalar
from farm.matrix.options import FILE_TYPES, admit_name, canonical, check_flag, value_type
from farm.matrix.schema import BuildEntry, FlagSpec, Matrix, ModelEntry, PromptEntry, Variant
from farm.matrix.sources import (
    REF_PATTERN,
    check_cmake_option,
    resolve_commit,
    source_location,
)
from farm.matrix.spec import Arm, BuildRef, BuildSource, JobSpec, ModelRef, Prompt, RemoteFile
from farm.prompts import document_text, document_tokens, load_suite, with_document


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, first: int, second: int) -> None:
        super().__init__(f"key {key!r} is given twice, on lines {first} and {second}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping, where YAML would silently
    keep the last value (`n-predict` set twice: the first one is lost)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys of a `<<: *anchor` merge may be overridden here
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base constructor explains an unhashable key
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(key, seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def matrix_yaml(matrix: Mapping[str, Any]) -> str:
    """A matrix as the farm writes it (`farm ab`, `farm recommend --write-matrix`, the
    selftest's): its keys in their order, one line a value (a long model path is not
    folded at 80 columns; YAML would read it back the same, a reader's grep would not)."""
    return yaml.safe_dump(dict(matrix), sort_keys=False, width=1_000_000)


def read_yaml(path: Path) -> Any:
    """Parse YAML, turning syntax errors and duplicate keys into messages with the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # safe: a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: {exc}; give it once (YAML would silently keep the last "
                          "one)") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: YAML syntax error: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {exc}") from exc
    if data is None:
        raise ConfigError(f"{path}: the file is empty; a matrix needs at least `campaign`, "
                          "`models`, `prompts` and `variants` (see examples/)")
    return data


def _key_path(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``loc`` (to list the allowed keys)."""
    model: type[BaseModel] | None = Matrix
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        field = next((f for f in model.model_fields.values() if f.alias == part), None)
        model = _inner_model(field.annotation) if field else None
    return model


def unknown_key(loc: Sequence[int | str]) -> str:
    """What to say of an unknown key: the near keys it may be a typo of, or where the keys
    are listed (``farm schema``, docs/matrix.md)."""
    owner = _model_at(loc)
    allowed = [f.alias or n for n, f in owner.model_fields.items()] if owner else []
    near = difflib.get_close_matches(str(loc[-1]) if loc else "", allowed, n=3, cutoff=0.6)
    if near:
        return f"unknown key; did you mean {' or '.join(f'`{key}`' for key in near)}?"
    return ("unknown key; the keys allowed here are in `farm schema` and docs/matrix.md"
            if len(allowed) > 8 else f"unknown key; allowed here: {', '.join(sorted(allowed))}")


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found:
            return found
    return None


# Errors of a union's other branches ("not a string" beside the real error of a mapping).
_BRANCH_TYPES = frozenset({"string_type", "model_type", "dict_type", "list_type"})


def _plain_loc(loc: Sequence[int | str]) -> list[int | str]:
    """A key path without pydantic's names for union branches and validators."""
    return [part for part in loc if part not in ("str", "BuildEntry", "PromptEntry")
            and not (isinstance(part, str) and part.startswith(("function-after[", "list[")))]


def _explain(path: Path, error: ValidationError) -> ConfigError:
    lines = []
    items = error.errors()
    real = {_plain_loc(item["loc"])[0] for item in items
            if item["type"] not in _BRANCH_TYPES and item["loc"]}
    for item in items:
        loc = _plain_loc(item["loc"])
        if item["type"] in _BRANCH_TYPES and loc and loc[0] in real:
            continue
        where = f"{path}: {_key_path(loc)}"
        if item["type"] == "extra_forbidden":
            lines.append(f"{where}: {unknown_key(loc)}")
        elif item["type"] == "missing":
            lines.append(f"{where}: required key is missing")
        else:
            lines.append(f"{where}: {item['msg']} (got {item.get('input')!r})")
    return ConfigError("\n".join(dict.fromkeys(lines)))


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


def _prompt_file(matrix: Matrix, path: Path) -> list[tuple[str, str | PromptEntry]]:
    if not matrix.prompt_file:
        return []
    file_path = (path.parent / matrix.prompt_file).expanduser()
    data = read_yaml(file_path)
    if not isinstance(data, list):
        raise ConfigError(f"{file_path}: a prompt file is a YAML list of prompts "
                          "(text, or {id, text, category})")
    entries: list[tuple[str, str | PromptEntry]] = []
    for i, item in enumerate(data):
        try:
            entry = item if isinstance(item, str) else PromptEntry.model_validate(item)
        except ValidationError as exc:
            raise ConfigError(f"{file_path}: [{i}]: {exc.errors()[0]['msg']}") from exc
        entries.append((f"{file_path}[{i}]", entry))
    return entries


def _prompt_suite(matrix: Matrix, path: Path) -> list[tuple[str, str | PromptEntry]]:
    if matrix.prompt_suite is None:
        return []
    try:
        suite = load_suite(None if matrix.prompt_suite == "all" else matrix.prompt_suite)
    except ValueError as exc:
        raise ConfigError(f"{path}: prompt-suite: {exc}") from exc
    return [(f"prompt-suite {item['id']}", PromptEntry.model_validate(item)) for item in suite]


def _prompts(matrix: Matrix, path: Path) -> tuple[Prompt, ...]:
    entries: list[tuple[str, str | PromptEntry]] = [
        (f"prompts[{i}]", item) for i, item in enumerate(matrix.prompts)]
    entries += _prompt_file(matrix, path) + _prompt_suite(matrix, path)
    if not entries:
        raise ConfigError(f"{path}: prompts: give at least one prompt (`prompts:`, "
                          "`prompt-file:` or `prompt-suite:`)")
    prompts: dict[str, Prompt] = {}
    for index, (where, entry) in enumerate(entries):
        prompt = (Prompt(id=f"p{index + 1}", text=entry, category="general")
                  if isinstance(entry, str)
                  else Prompt(id=entry.id, text=entry.text, category=entry.category))
        if not prompt.text.strip():
            raise ConfigError(f"{path}: {where}: empty prompt")
        if prompt.id in prompts:
            raise ConfigError(f"{path}: {where}: prompt id {prompt.id!r} is used twice")
        prompts[prompt.id] = prompt
    return tuple(prompts.values())


def _tier(prompts: tuple[Prompt, ...], length: int, path: Path) -> tuple[Prompt, ...]:
    """The prompts of one ``prompt-length`` tier: each after its own excerpt of the bundled
    document (``farm.prompts.with_document``); as written for 0."""
    if not length:
        return prompts
    document = document_text()
    try:
        return tuple(prompt.model_copy(update={"text": with_document(prompt.text, length, index,
                                                                     document)})
                     for index, prompt in enumerate(prompts))
    except ValueError as exc:
        raise ConfigError(f"{path}: prompt-length: {exc}; give at most "
                          f"{document_tokens()}") from exc


def _model_ref(model: ModelEntry, path: Path) -> ModelRef:
    """A model entry as a job names it: a Hub model with its revision as written (pinned
    to a commit by `farm submit` / `farm run`), a URL model with its one file's sha256."""
    if model.url is not None and model.sha256 is not None:
        file = model.file or relative_file(
            PurePosixPath(urlsplit(model.url).path).name,
            f"{path}: model {model.name!r}: the file name its `url` ends in (or give `file:`)")
        return ModelRef(name=model.name, file=file, url=model.url,
                        files=(RemoteFile(name=file, sha256=model.sha256),))
    if model.hf is not None:
        return ModelRef(name=model.name, file=model.file, hf=model.hf,
                        revision=model.revision or "main")
    return ModelRef(name=model.name, file=model.file_name if model.path is None else None,
                    path=model.path)


def _drafts_named(drafts: dict[str, ModelRef], *arms: FlagMap) -> tuple[ModelRef, ...]:
    """The draft models of ``drafts`` the arms' file flags name (by their entry's name)."""
    named = {value for flags in arms for name, value in flags.items()
             if isinstance(value, str) and value_type(name) in FILE_TYPES}
    return tuple(model for name, model in drafts.items() if name in named)


def _models(matrix: Matrix, path: Path) -> list[ModelRef]:
    """Models as written: a ``file`` name, or a ``path`` the node that runs the job resolves
    (``workers.job.resolve.resolve``), or a Hub or URL source each node downloads."""
    refs = [_model_ref(model, path) for model in matrix.models]
    names = [ref.name for ref in refs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: models: model names must be unique, got {names}")
    return refs


Commits = dict[tuple[str, str], str]  # (source location, ref) -> the commit it names


def _build_ref(entry: BuildEntry | str, base: Path, commits: Commits) -> BuildRef:
    if isinstance(entry, str):
        return BuildRef(name=entry)
    if entry.git is None or entry.ref is None:
        return BuildRef(name=entry.name, path=entry.path)
    git = source_location(entry.git, base)
    commit = commits.get((git, entry.ref))
    if commit is None:
        raise ConfigError(f"build {entry.name!r}: ref {entry.ref!r} of {git} is not resolved "
                          "to a commit; load the matrix with load_matrix")
    return BuildRef(name=entry.name, source=BuildSource(
        git=git, ref=entry.ref, commit=commit, backend=entry.backend,
        cuda_arch=entry.cuda_arch, cmake=tuple(entry.cmake)))


def _source_entries(matrix: Matrix) -> Iterator[tuple[str, BuildEntry]]:
    """Every build entry of the matrix that names a source, with its key path."""
    entries = matrix.build if isinstance(matrix.build, list) else [matrix.build]
    for index, entry in enumerate(entries):
        if isinstance(entry, BuildEntry) and entry.git is not None:
            yield (f"build[{index}]" if isinstance(matrix.build, list) else "build"), entry
    for index, variant in enumerate(matrix.variants):
        if isinstance(variant.build, BuildEntry) and variant.build.git is not None:
            yield f"variants[{index}].build", variant.build


def resolve_refs(matrix: Matrix, path: Path) -> Commits:
    """Each source build's ref resolved to the commit it names now, once per source and
    ref (``farm.matrix.sources.resolve_commit``); errors name the file and the key."""
    commits: Commits = {}
    for where, entry in _source_entries(matrix):
        if entry.ref is None or entry.git is None:
            continue
        for number, arg in enumerate(entry.cmake):
            check_cmake_option(arg, f"{path}: {where}.cmake[{number}]")
        git = source_location(entry.git, path.parent)
        if (git, entry.ref) not in commits:
            commits[git, entry.ref] = resolve_commit(git, entry.ref, f"{path}: {where}")
    return commits


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
    ``commits`` gives its ref (``resolve_refs``); the node that runs a job resolves them to
    files (``workers.job.resolve.resolve``).
    """
    commits = commits or {}
    prompts = _prompts(matrix, path)
    models = _models(matrix, path)
    drafts = {entry.name: _model_ref(entry, path) for entry in matrix.draft_models}
    if len(drafts) != len(matrix.draft_models):
        raise ConfigError(f"{path}: draft-models: names must be unique, got "
                          f"{[entry.name for entry in matrix.draft_models]}")
    builds = [_build_ref(entry, path.parent, commits) for entry in matrix.build_entries()]
    baselines = _flag_choices(matrix.flags, matrix.args, f"{path}: ", allow)
    swept = set(_swept(matrix.flags))
    sampling = matrix.sampling.request_fields()  # once: each JobSpec validates its own copy
    concurrencies, lengths = matrix.concurrencies(), matrix.prompt_lengths()
    tiers = {length: _tier(prompts, length, path) for length in lengths}
    jobs: dict[str, JobSpec] = {}
    for gpu_class, build, model, baseline, streams, length in itertools.product(
            matrix.gpu_classes, builds, models, baselines, concurrencies, lengths):
        for index, variant in enumerate(matrix.all_variants()):
            where = (f"variants[{index}]" if index < len(matrix.variants)
                     else f"engine-curve ({variant.name})")
            variant_build = (build if variant.build is None
                             else _build_ref(variant.build, path.parent, commits))
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
                    prompt_length=length, draft_models=_drafts_named(drafts, baseline, flags),
                    busy_node=matrix.busy_node, busy_wait=matrix.busy_wait)
                if job.job_key in jobs:
                    raise ConfigError(f"{path}: {where} ({name}): same job as variant "
                                      f"{jobs[job.job_key].variant.name!r}; remove one")
                jobs[job.job_key] = job
    return list(jobs.values())


def at_ref(matrix: Matrix, path: Path, ref: str) -> Matrix:
    """``matrix`` with every source build at ``ref`` instead of its own (``farm track``)."""
    if next(_source_entries(matrix), None) is None:
        raise ConfigError(f"{path}: build: `farm track` follows a source build and this "
                          "matrix names none; give `build: {name, git, ref}` "
                          "(docs/builds.md)")
    if not re.match(REF_PATTERN, ref) or len(ref) > 250:
        raise ConfigError(f"--ref {ref!r}: give a branch, tag, pull/N/head or commit")

    def moved(entry: BuildEntry | str | None) -> Any:
        return (entry.model_copy(update={"ref": ref})
                if isinstance(entry, BuildEntry) and entry.git is not None else entry)

    build = ([moved(entry) for entry in matrix.build] if isinstance(matrix.build, list)
             else moved(matrix.build))
    return matrix.model_copy(update={"build": build, "variants": [
        variant.model_copy(update={"build": moved(variant.build)})
        for variant in matrix.variants]})


def load_matrix(path: Path, allow: frozenset[str] = frozenset(), ref: str | None = None,
                ) -> tuple[Matrix, list[JobSpec]]:
    """Validate ``path`` and expand it (``allow``: see ``expand``; ``ref``: every source
    build at this ref, ``at_ref``); raises ``ConfigError`` with file and key on error."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a matrix is a YAML mapping (campaign:, models:, ...), "
                          f"not a {type(data).__name__}")
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        raise _explain(path, exc) from exc
    if ref is not None:
        matrix = at_ref(matrix, path, ref)
    return matrix, expand(matrix, path, allow, resolve_refs(matrix, path))
