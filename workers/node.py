"""What a worker node is and may do: its advertisement, and jobs resolved against it."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError
from farm.matrix.spec import Arm, BuildRef, JobSpec, ModelRef
from workers.config import WorkerConfig
from workers.runtime.probe import probe_binary

# Flags that make llama-server write files on the GPU box: refused on workers.
WRITES_FILES = frozenset({"log-file", "slot-save-path", "path", "media-path"})
# Flags whose value is a file the server reads: resolved inside the models dir.
READS_MODEL_FILES = frozenset({"spec-draft-model", "model-draft", "md", "lora", "mmproj",
                               "control-vector", "lora-scaled"})


@dataclass(frozen=True)
class Advertisement:
    """What a worker tells the coordinator about itself when it registers."""

    host: str
    builds: dict[str, str]  # build name -> `llama-server --version`
    models: list[str]  # GGUF files in the models dir, relative to it


def advertise(config: WorkerConfig) -> Advertisement:
    builds = {name: probe_binary(path).version for name, path in config.builds.items()}
    root = config.models_dir
    models = sorted(str(p.relative_to(root)) for p in root.rglob("*.gguf")) if root.is_dir() \
        else []
    return Advertisement(host=socket.gethostname(), builds=builds, models=models)


def _inside(root: Path, value: str, what: str) -> str:
    candidate = (root / value).resolve()
    if not candidate.is_relative_to(root.resolve()):
        raise ConfigError(f"{what} {value!r} is outside this worker's models dir {root}; "
                          "workers only read models from there")
    if not candidate.is_file():
        raise ConfigError(f"{what} {value!r} not found in this worker's models dir {root}")
    return str(candidate)


def _resolve_build(build: BuildRef, config: WorkerConfig) -> BuildRef:
    binary = config.builds.get(build.name)
    if binary is None:
        raise ConfigError(f"build {build.name!r} is not on worker {config.worker_name} "
                          f"(it has: {', '.join(sorted(config.builds))})")
    return BuildRef(name=build.name, path=str(binary))


def _resolve_arm(arm: Arm, config: WorkerConfig) -> Arm:
    root = config.models_dir
    flags = []
    for name, value in arm.flags:
        if name in WRITES_FILES:
            raise ConfigError(f"{arm.role} arm {arm.name!r}: --{name} writes files on the "
                              "worker; workers refuse it")
        if name in READS_MODEL_FILES and isinstance(value, str):
            value = _inside(root, value, f"--{name}")
        flags.append((name, value))
    return arm.model_copy(update={"flags": tuple(flags),
                                  "build": _resolve_build(arm.build, config)})


def resolve(spec: JobSpec, config: WorkerConfig) -> JobSpec:
    """The job with its build, model and file flags resolved on this worker, or ConfigError."""
    root = config.models_dir
    model_path = _inside(root, spec.model.path or spec.model.file or f"{spec.model.name}.gguf",
                         f"model {spec.model.name!r}")
    return spec.model_copy(update={
        "model": ModelRef(name=spec.model.name, file=spec.model.file, path=model_path),
        "baseline": _resolve_arm(spec.baseline, config),
        "variant": _resolve_arm(spec.variant, config),
    })


