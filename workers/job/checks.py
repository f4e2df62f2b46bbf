"""Check a job against its builds and model before any server starts.

A node checks the job it reads with the same code as a matrix load (every flag
canonical, on the allow-list, of its type: ``farm.matrix.options``), against its own
build's ``--help``: the names are canonicalised by the build's own aliases first, so no
spelling slips past a list. Known renames are translated (the tutorial's ``--spec-type
mtp``, the removed ``--draft-max``) when the build only knows the new spelling, and
recorded, so old command lines still run and the stored argv shows what really ran.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from farm.errors import ConfigError, NoMtpHeads, UnsupportedByBuild
from farm.matrix.flags import FlagValue
from farm.matrix.option_names import FLAG_RENAMES
from farm.matrix.options import check_flag, value_type
from farm.matrix.spec import Arm, JobSpec
from workers.job.model_info import ModelInfo, inspect_model
from workers.job.resolve import NodeFiles, draft_files, resolve_flag_files
from workers.job.runtime.probe import BinaryProbe, Option, probe_binary
from workers.job.runtime.sandbox import Sandbox
from workers.paths import NodePaths

# Flags whose value is a comma-separated list of enumerated items.
_LIST_VALUED = frozenset({"spec-type"})
# Old --spec-type value -> new one (renamed before the MTP merge, PR #22673).
SPEC_TYPE_RENAMES = {"mtp": "draft-mtp"}
# Metavars llama-server's --help prints for a number, integer or not (--temp is N too).
# Others (FNAME, TYPE, M for a hex mask, lo-hi, N0,N1,...) are not checked here.
_NUMERIC_HINTS = frozenset({"N", "P", "SEED", "INDEX", "L", "SECONDS", "SIMILARITY"})
# What std::stoi/std::stof parse as a whole number; a value matching none of it is no
# number at all. inf and nan are numbers to std::stof.
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|(?i:inf|infinity|nan))")
# Words a numeric flag also accepts, quoted in its help: -ngl "an exact number, 'auto',
# or 'all'".
_QUOTED_WORD = re.compile(r"'([a-z][\w-]*)'")
# Metavars of a value that names a file or a directory: an option the farm's table does
# not know (allowed by an operator) may not take one.
_FILE_HINTS = re.compile(r"FNAME|FILE|PATH|DIR")


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


def _translate(probe: BinaryProbe, name: str, value: FlagValue, notes: list[str],
               written: str) -> tuple[str, FlagValue]:
    """Known renames applied to the canonical ``name``; the note names the option as the
    matrix ``written`` it."""
    old = probe.option(name)
    new_name = FLAG_RENAMES.get(name)
    if new_name and (old is None or old.removed) and probe.option(new_name):
        notes.append(f"--{written} -> --{new_name} (removed in this build)")
        name = new_name
    if name == "spec-type" and isinstance(value, str):
        accepted = probe.choices("spec-type")
        items = [SPEC_TYPE_RENAMES.get(item, item) if item not in accepted else item
                 for item in value.split(",")]
        if ",".join(items) != value:
            notes.append(f"--spec-type {value} -> {','.join(items)} (renamed upstream)")
            value = ",".join(items)
    return name, value


def _admitted(probe: BinaryProbe, raw: str, value: FlagValue,
              allow: Iterable[str]) -> tuple[str, FlagValue]:
    """One flag canonicalised by the build's own help, then checked as a matrix load
    checks it (allow-list, value shape)."""
    name = probe.canonical(raw.lstrip("-")) or raw
    name, checked = check_flag(name, value, "flags", allow)
    option = probe.option(name)
    if value_type(name) is None and option is not None and option.hint \
            and _FILE_HINTS.search(option.hint):
        raise ConfigError(f"--{name} takes {option.hint}: a file, which the farm passes "
                          "only for the options it knows read models")
    return name, checked


def check_arm(probe: BinaryProbe, arm: Arm,
              allow: Iterable[str] = ()) -> tuple[Arm, list[str]]:
    """The arm with canonical names and known renames applied, after checking every flag
    against the allow-list (and the options ``allow`` adds) and the build."""
    notes: list[str] = []
    flags: list[tuple[str, FlagValue]] = []
    for raw_name, raw_value in arm.flags:
        admitted = _admitted(probe, raw_name, raw_value, allow)
        name, value = _translate(probe, *admitted, notes, raw_name.lstrip("-"))
        option = probe.option(name)
        if option is None:
            raise UnsupportedByBuild(f"build {arm.build.name!r} ({probe.path}) has no flag "
                                     f"--{name}; see `{probe.path} --help`")
        if option.removed:
            raise UnsupportedByBuild(f"build {arm.build.name!r} removed --{name}: "
                                     f"{' '.join(option.help.split())}")
        _check_value(option, name, value, arm.build.name)
        if name in dict(flags):
            raise ConfigError(f"--{name} is given twice (as {raw_name!r} too); give it once")
        flags.append((name, value))
    return arm.model_copy(update={"flags": tuple(flags)}), notes


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


def check_arms(spec: JobSpec, node: NodeFiles, sandbox: Sandbox,
               ) -> tuple[JobSpec, dict[str, BinaryProbe], list[str]]:
    """Probe both arms' builds, check and translate their flags, then resolve the files
    they name on ``node``: the job as it will run, the probes and the renames applied;
    ConfigError if a flag or value is unfit."""
    probes: dict[str, BinaryProbe] = {}
    arms: dict[str, Arm] = {}
    translations: list[str] = []
    drafts = draft_files(spec, node)
    for arm in (spec.baseline, spec.variant):
        probes[arm.role] = probe_binary(arm.build.local_path, sandbox,
                                        trusted=arm.build.source is None)
        try:
            arms[arm.role], notes = check_arm(probes[arm.role], arm, node.allow_options)
        except ConfigError as exc:
            raise type(exc)(f"{arm.role} arm {arm.name!r}: {exc}", role=arm.role) from exc
        arms[arm.role] = resolve_flag_files(arms[arm.role], node, drafts)
        translations += [f"{arm.role}: {note}" for note in notes]
    checked = spec.model_copy(update={"baseline": arms["baseline"], "variant": arms["variant"]})
    return checked, probes, translations


def preflight(spec: JobSpec, node: NodeFiles, paths: NodePaths) -> Preflight:
    """Probe the builds, check and translate both arms, check the model; ConfigError if
    unfit. ``spec`` has its builds and model resolved on ``node``
    (``workers.job.resolve.resolve``)."""
    checked, probes, translations = check_arms(spec, node, Sandbox(paths.sandbox))
    model = inspect_model(spec.model.local_path, paths)
    _check_model(checked, model, paths)
    return Preflight(spec=checked, probes=probes, model=model, translations=translations)
