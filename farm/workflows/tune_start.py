"""`farm tune MODEL`'s matrix: the model, the baseline's flags, a space (the user's, or a
default per spec type over the options the build's `--help` lists) and the race's
settings, written where `farm run` finds it again."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.matrix.flags import DRAFT_N_MAX
from farm.matrix.starter import flag_map
from farm.settings import Settings

# A default space per spec type: the draft length (and for a draft model the least
# probability a drafted token needs), over ranges the anchors tune (docs/tune.md).
DEFAULT_SPACES: dict[str, dict[str, list[Any]]] = {
    "ngram-simple": {"spec-ngram-simple-size-n": [2, 3, 4, 6],
                     "spec-ngram-simple-size-m": [8, 16]},
    "ngram-mod": {"spec-ngram-mod-n-max": [4, 8, 16, 32]},
    "draft-mtp": {DRAFT_N_MAX: [1, 2, 3, 4, 5, 6]},
    "draft-simple": {DRAFT_N_MAX: [2, 3, 4, 6, 8], "spec-draft-p-min": [0.0, 0.6]},
}


def parse_space(items: tuple[str, ...]) -> dict[str, Any]:
    """``--space FLAG=V1,V2`` (repeatable) as a space: values as numbers where they are."""
    space: dict[str, Any] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().lstrip("-")
        if not sep or not name or not values.strip():
            raise ConfigError(f"farm tune: --space {item!r}: give FLAG=VALUE[,VALUE...], e.g. "
                              "--space spec-draft-n-max=1,2,3")
        if name in space:
            raise ConfigError(f"farm tune: --space {name} given twice; list its values once")
        space[name] = [_number(value.strip()) for value in values.split(",")]
        if any(value == "" for value in space[name]):
            raise ConfigError(f"farm tune: --space {item!r} has an empty value")
        for value in space[name]:  # each checked as `farm ab` checks a flag typed
            flag_map(shlex.join([f"--{name}", str(value)]), "farm tune --space")
    return space


def _number(value: str) -> Any:
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?\d*\.\d+", value):
        return float(value)
    return value


def default_space(spec_type: str, listed: frozenset[str]) -> dict[str, Any]:
    """``spec_type``'s default space, its options those the build lists (``listed``:
    its `--help`'s long names); ConfigError for a type without one or a build without
    any of its options."""
    if spec_type not in DEFAULT_SPACES:
        raise ConfigError(f"farm tune: no default space for --spec-type {spec_type}; give "
                          f"--space FLAG=V1,V2 (default spaces: {', '.join(DEFAULT_SPACES)})")
    space = {name: values for name, values in DEFAULT_SPACES[spec_type].items()
             if name in listed}
    if not space:
        raise ConfigError(f"farm tune: the build lists none of "
                          f"{', '.join(DEFAULT_SPACES[spec_type])}; give --space")
    return space


def build_options(settings: Settings, build: str) -> frozenset[str]:
    """The long option names the build's `--help` lists (probed in its sandbox)."""
    from workers.job.runtime.probe import probe_binary
    from workers.job.runtime.sandbox import Sandbox
    from workers.paths import NodePaths
    from workers.setup.builds import built_here

    paths = NodePaths.of(settings)
    server = built_here(paths, None).builds.get(build)
    if server is None:
        raise ConfigError(f"farm tune: no build {build!r} here; `farm builds` lists them, "
                          "`farm provision` makes one")
    options = probe_binary(server, Sandbox(paths.sandbox)).options
    return frozenset(name for option in options.values() for name in option.names)


def tune_body(model: dict[str, str], baseline: dict[str, Any], space: dict[str, Any],
              race: dict[str, Any], design: dict[str, Any], build: str,
              gpu_class: str) -> dict[str, Any]:
    """The matrix of a tune; its campaign named after the model and a hash of the rest, so
    the same command is the same campaign (and resumes)."""
    body: dict[str, Any] = {
        "build": build, "models": [model], **design, "flags": baseline,
        **({"gpu-classes": [gpu_class]} if gpu_class != "default" else {}),
        "tune": {"space": space, **race}}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    return {"campaign": f"tune-{model['name']}-{digest}", **body}


def matrix_place(settings: Settings, campaign: str, given: Path | None) -> Path:
    """Where a tune's matrix goes: ``given`` (``--write-matrix``) or the data dir."""
    from farm.matrix.files import under

    return given or under(settings.data_dir, "tune", f"{campaign}.yaml", what="matrix")
