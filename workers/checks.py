"""Check a job against its builds and model before any server starts.

Known renames are translated (the tutorial's ``--spec-type mtp``, the removed
``--draft-max``) when the build only knows the new spelling, and recorded, so old command
lines still run and the stored argv shows what really ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from farm.errors import ConfigError, NoMtpHeads, UnsupportedByBuild
from farm.matrix.flags import FlagValue
from farm.matrix.spec import Arm, JobSpec
from workers.model_info import ModelInfo, inspect_model
from workers.paths import NodePaths
from workers.runtime.probe import BinaryProbe, Option, probe_binary

# Flags whose value is a comma-separated list of enumerated items.
_LIST_VALUED = frozenset({"spec-type"})
# Old flag name -> new name, applied when the build has removed the old one.
FLAG_RENAMES = {"draft": "spec-draft-n-max", "draft-n": "spec-draft-n-max",
                "draft-max": "spec-draft-n-max", "draft-min": "spec-draft-n-min",
                "draft-n-min": "spec-draft-n-min"}
# Old --spec-type value -> new one (renamed before the MTP merge, PR #22673).
SPEC_TYPE_RENAMES = {"mtp": "draft-mtp"}
SPECULATIVE_FLAGS = frozenset({"spec-type", "spec-draft-model"})
# Metavars llama-server's --help prints for a number, integer or not (--temp is N too).
# Others (FNAME, TYPE, M for a hex mask, lo-hi, N0,N1,...) are not checked here.
_NUMERIC_HINTS = frozenset({"N", "P", "SEED", "INDEX", "L", "SECONDS", "SIMILARITY"})
# What std::stoi/std::stof parse as a whole number; a value matching none of it is no
# number at all. inf and nan are numbers to std::stof.
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|(?i:inf|infinity|nan))")
# Words a numeric flag also accepts, quoted in its help: -ngl "an exact number, 'auto',
# or 'all'".
_QUOTED_WORD = re.compile(r"'([a-z][\w-]*)'")


@dataclass(frozen=True)
class Preflight:
    """What the checks learnt, kept as provenance for every run of the job."""

    spec: JobSpec  # with renames applied: what will really run
    probes: dict[str, BinaryProbe]  # by arm role
    model: ModelInfo
    translations: list[str] = field(default_factory=list)

    def probe(self, role: str) -> BinaryProbe:
        """The probe of the build the arm ``role`` runs on."""
        return self.probes[role]


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
    if option.hint in _NUMERIC_HINTS:
        _check_number(option, name, value)
    items = value.split(",") if name in _LIST_VALUED else [value]
    if option.choices:
        for item in items:
            if item not in option.choices:
                raise UnsupportedByBuild(
                    f"--{name} {value}: build {build!r} does not accept {item!r}; "
                    f"it accepts: {', '.join(option.choices)}")


def _check_number(option: Option, name: str, value: str) -> None:
    """Refuse a value that is no number at all: llama-server would exit on it only once
    its job had started. Only that: a number out of range is the server's to judge."""
    words = _QUOTED_WORD.findall(option.help)
    if _NUMBER.fullmatch(value) or value in words:
        return
    accepted = "a number" + (f" or {', '.join(map(repr, words))}" if words else "")
    raise ConfigError(f"--{name} {option.hint} takes {accepted}, not {value!r}")


def _translate(probe: BinaryProbe, name: str, value: FlagValue,
               notes: list[str]) -> tuple[str, FlagValue]:
    old = probe.option(name)
    new_name = FLAG_RENAMES.get(name)
    if new_name and (old is None or old.removed) and probe.option(new_name):
        notes.append(f"--{name} -> --{new_name} (removed in this build)")
        name = new_name
    if name == "spec-type" and isinstance(value, str):
        accepted = probe.choices("spec-type")
        items = [SPEC_TYPE_RENAMES.get(item, item) if item not in accepted else item
                 for item in value.split(",")]
        if ",".join(items) != value:
            notes.append(f"--spec-type {value} -> {','.join(items)} (renamed upstream)")
            value = ",".join(items)
    return name, value


def check_arm(probe: BinaryProbe, arm: Arm) -> tuple[Arm, list[str]]:
    """The arm with known renames applied, after checking every flag against the build."""
    notes: list[str] = []
    flags = []
    for raw_name, raw_value in arm.flags:
        name, value = _translate(probe, raw_name, raw_value, notes)
        option = probe.option(name)
        if option is None:
            raise UnsupportedByBuild(f"build {arm.build.name!r} ({probe.path}) has no flag "
                                     f"--{name}; see `{probe.path} --help`")
        if option.removed:
            raise UnsupportedByBuild(f"build {arm.build.name!r} removed --{name}: "
                                     f"{' '.join(option.help.split())}")
        _check_value(option, name, value, arm.build.name)
        flags.append((name, value))
    return arm.model_copy(update={"flags": tuple(flags)}), notes


def asks_for_speculation(arm: Arm) -> bool:
    """Whether an arm's flags request speculative decoding of any kind."""
    return any(name in SPECULATIVE_FLAGS and value not in (False, "none")
               for name, value in arm.flags)


def _check_model(spec: JobSpec, model: ModelInfo, paths: NodePaths) -> None:
    if spec.prompt_mode == "chat" and not model.has_chat_template:
        raise ConfigError(f"model {spec.model.name!r} ({model.file_name}) has no chat "
                          "template; set `prompt-mode: completion` or use an instruct model")
    for arm in (spec.baseline, spec.variant):
        flags = dict(arm.flags)
        if "draft-mtp" in str(flags.get("spec-type", "")).split(",") and not model.nextn_layers \
                and "spec-draft-model" not in flags:
            raise NoMtpHeads(f"{arm.role} arm {arm.name!r}: --spec-type draft-mtp needs MTP "
                             f"heads, and model {spec.model.name!r} ({model.file_name}) has "
                             f"none ({model.architecture}.nextn_predict_layers is 0); use a "
                             "GGUF with MTP layers", role=arm.role)
        draft = flags.get("spec-draft-model")
        if isinstance(draft, str):
            _check_draft(arm, model, inspect_model(draft, paths))


def _check_draft(arm: Arm, target: ModelInfo, draft: ModelInfo) -> None:
    if (draft.vocab_size, draft.vocab_hash) != (target.vocab_size, target.vocab_hash):
        raise ConfigError(
            f"{arm.role} arm {arm.name!r}: draft model {draft.file_name} does not share the "
            f"target's vocabulary ({draft.vocab_size} tokens, {draft.tokenizer} vs "
            f"{target.vocab_size}, {target.tokenizer}); speculative drafts must use the "
            "same tokens: pick a draft model of the same family", role=arm.role)


def check_arms(spec: JobSpec) -> tuple[JobSpec, dict[str, BinaryProbe], list[str]]:
    """Probe both arms' builds, check and translate their flags: the job as it will run, the
    probes and the renames applied; ConfigError if a flag or value is unfit."""
    probes: dict[str, BinaryProbe] = {}
    arms: dict[str, Arm] = {}
    translations: list[str] = []
    for arm in (spec.baseline, spec.variant):
        probes[arm.role] = probe_binary(arm.build.local_path)
        try:
            arms[arm.role], notes = check_arm(probes[arm.role], arm)
        except ConfigError as exc:
            raise type(exc)(f"{arm.role} arm {arm.name!r}: {exc}", role=arm.role) from exc
        translations += [f"{arm.role}: {note}" for note in notes]
    checked = spec.model_copy(update={"baseline": arms["baseline"], "variant": arms["variant"]})
    return checked, probes, translations


def preflight(spec: JobSpec, paths: NodePaths) -> Preflight:
    """Probe the builds, check and translate both arms, check the model; ConfigError if unfit."""
    checked, probes, translations = check_arms(spec)
    model = inspect_model(spec.model.local_path, paths)
    _check_model(checked, model, paths)
    return Preflight(spec=checked, probes=probes, model=model, translations=translations)
