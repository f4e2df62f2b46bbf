"""Check a job against its build and model before any server starts."""

from __future__ import annotations

from dataclasses import dataclass

from farm.errors import ConfigError, UnsupportedByBuild
from farm.matrix.flags import FlagValue
from farm.matrix.spec import Arm, JobSpec
from workers.model_info import ModelInfo, inspect_model
from workers.runtime.probe import BinaryProbe, Option, probe_binary

# Flags whose value is a comma-separated list of enumerated items.
_LIST_VALUED = frozenset({"spec-type"})


@dataclass(frozen=True)
class Preflight:
    """What the checks learnt, kept as provenance for every run of the job."""

    probe: BinaryProbe
    model: ModelInfo


def _check_value(option: Option, name: str, value: FlagValue, build: str) -> None:
    if isinstance(value, bool):
        if option.takes_value:
            raise ConfigError(
                f"--{name} takes a value ({option.hint}), not {str(value).lower()}. YAML "
                f"reads bare on/off/yes/no as booleans: quote it, e.g. {name}: \"on\"")
        return
    if not option.takes_value:
        raise ConfigError(f"--{name} is a switch without a value: set it to true to pass it, "
                          f"false to leave it out (got {value!r})")
    items = value.split(",") if name in _LIST_VALUED else [value]
    if option.choices:
        for item in items:
            if item not in option.choices:
                raise UnsupportedByBuild(
                    f"--{name} {value}: build {build!r} does not accept {item!r}; "
                    f"it accepts: {', '.join(option.choices)}")


def check_arm(probe: BinaryProbe, arm: Arm, build: str) -> None:
    """Every flag of ``arm`` exists in the build and has a value it accepts."""
    for name, value in arm.flags:
        option = probe.option(name)
        if option is None:
            raise UnsupportedByBuild(f"build {build!r} ({probe.path}) has no flag --{name}; "
                                     f"see `{probe.path} --help`")
        if option.removed:
            raise UnsupportedByBuild(f"build {build!r} removed --{name}: "
                                     f"{' '.join(option.help.split())}")
        _check_value(option, name, value, build)


def preflight(spec: JobSpec) -> Preflight:
    """Probe the build, check both arms and the model; raises ``ConfigError`` if unfit."""
    probe = probe_binary(spec.build.local_path)
    for arm in (spec.baseline, spec.variant):
        try:
            check_arm(probe, arm, spec.build.name)
        except ConfigError as exc:
            raise type(exc)(f"{arm.role} arm {arm.name!r}: {exc}") from exc
    model = inspect_model(spec.model.local_path)
    if spec.prompt_mode == "chat" and not model.has_chat_template:
        raise ConfigError(f"model {spec.model.name!r} ({model.file_name}) has no chat "
                          "template; set `prompt-mode: completion` or use an instruct model")
    return Preflight(probe=probe, model=model)
