"""llama-server flags as a matrix spells them: names normalised, values checked for safety.

A flag is kept as its long name without dashes (``ctx-size``) and a value: ``True`` for a
bare switch, a string otherwise. The same spelling is used in the store and in reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from farm.errors import ConfigError

# Short spellings of llama-server (b11434 ``--help``) mapped to the long name the farm keeps.
SHORT_NAMES: dict[str, str] = {
    "b": "batch-size",
    "c": "ctx-size",
    "cd": "spec-draft-ctx-size",
    "ctk": "cache-type-k",
    "ctkd": "spec-draft-type-k",
    "ctv": "cache-type-v",
    "ctvd": "spec-draft-type-v",
    "dev": "device",
    "fa": "flash-attn",
    "fit": "fit",
    "md": "spec-draft-model",
    "mg": "main-gpu",
    "n": "n-predict",
    "ngl": "n-gpu-layers",
    "ngld": "spec-draft-ngl",
    "s": "seed",
    "sm": "split-mode",
    "t": "threads",
    "tb": "threads-batch",
    "ts": "tensor-split",
    "ub": "ubatch-size",
}

_READS_LOG = ("the farm logs at --log-verbosity 4 and reads the log: why a start failed, "
              "each request's speculative statistics")

# Flags the farm sets itself: where the server listens, what it loads, how many slots (from
# `concurrency`), what it logs.
FARM_OWNED: dict[str, str] = {
    "host": "the farm binds every server to 127.0.0.1",
    "port": "the farm picks a free port for every server",
    "model": "models come from the matrix's `models:` list",
    "m": "models come from the matrix's `models:` list",
    **dict.fromkeys(("parallel", "np"), "the farm runs one slot per stream, the same in "
                    "both arms; set the matrix's `concurrency:` for N simultaneous streams"),
    "metrics": "the farm always enables /metrics",
    **dict.fromkeys(("log-verbosity", "verbosity", "lv", "log-verbose", "verbose", "v",
                     "log-disable", "log-jsonl"), _READS_LOG),
}

# Shell syntax that means a value was written for a shell: command separators, pipes,
# redirections, substitutions, variables, leftover quotes, home expansion. Regex
# characters stay allowed (e.g. --override-tensor "blk\..*_exps\.=CPU").
_SHELL_META = re.compile(r"[;&`<>\n\r\"']|\$[\w({]\w*|\s\|\s|^~")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")

FlagValue = str | bool
FlagMap = dict[str, FlagValue | None]


def normalise_name(raw: str, where: str) -> str:
    """``-c`` / ``--ctx-size`` / ``ctx-size`` -> ``ctx-size``; farm-owned flags refused."""
    name = raw.lstrip("-")
    if not raw.startswith("--"):
        name = SHORT_NAMES.get(name, name)
    if not _NAME.match(name):
        raise ConfigError(f"{where}: {raw!r} is not a llama-server flag name "
                          "(use its long name, e.g. ctx-size, or a short one such as -c)")
    if name in FARM_OWNED:
        raise ConfigError(f"{where}: --{name} belongs to the farm ({FARM_OWNED[name]}); "
                          "remove it from the matrix")
    return name


def check_value(value: str, where: str) -> str:
    """Refuse shell syntax in a value: argv never passes through a shell, so it is a mistake."""
    bad = _SHELL_META.search(value)
    if bad:
        raise ConfigError(
            f"{where}: value {value!r} contains {bad.group().strip()!r}. Flags are passed to "
            "llama-server as an argument list, never through a shell, so shell syntax "
            "has no meaning here: write the literal value (a full path, not ~ or $HOME)")
    if not value.strip():
        raise ConfigError(f"{where}: empty value; give a value or remove the flag")
    return value


def scalar(value: object, where: str) -> FlagValue | None:
    """A YAML scalar as a flag value: bools stay bools (switches), numbers become text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return check_value(value, where)
    raise ConfigError(f"{where}: expected a scalar (text, number, true/false or null), "
                      f"got {type(value).__name__}")


def parse_args(text: str, where: str) -> list[tuple[str, FlagValue]]:
    """Split an ``args:`` string (shlex, no shell) into (flag, value) pairs."""
    import shlex

    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: cannot split {text!r}: {exc}") from exc
    pairs: list[tuple[str, FlagValue]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("-") or _is_number(token):
            raise ConfigError(f"{where}: {token!r} is not a flag; args must look like "
                              "'--flag value --switch'")
        name = normalise_name(token, where)
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if following is not None and (not following.startswith("-") or _is_number(following)):
            pairs.append((name, check_value(following, f"{where} {token}")))
            index += 2
        else:
            pairs.append((name, True))
            index += 1
    return pairs


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def to_argv(flags: Iterable[tuple[str, FlagValue]]) -> list[str]:
    """Flags in order as argv: ``True`` is a bare switch, ``False`` leaves the flag out."""
    argv: list[str] = []
    for name, value in flags:
        if value is False:
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(str(value))
    return argv


# The flag that caps how many tokens a speculative type drafts (llama.cpp b11434,
# common/speculative.cpp: each implementation's n_max). The draft types read
# --spec-draft-n-max; each n-gram type its own size, which --spec-draft-n-max does not
# touch (ngram-simple drafts up to 48 tokens by default, whatever it says).
DRAFT_N_MAX = "spec-draft-n-max"
DRAFT_LENGTH_FLAGS = {"ngram-simple": "spec-ngram-simple-size-m",
                      "ngram-map-k": "spec-ngram-map-k-size-m",
                      "ngram-map-k4v": "spec-ngram-map-k4v-size-m",
                      "ngram-mod": "spec-ngram-mod-n-max"}
LENGTH_FLAGS = frozenset({DRAFT_N_MAX, *DRAFT_LENGTH_FLAGS.values()})
# ngram-simple drafts the m-gram after a match of its lookup n-gram only when that m-gram is
# at least n long (common/ngram-map.cpp): its drafts are n to m tokens, n 12 by default.
NGRAM_SIMPLE_SIZE_N = ("spec-ngram-simple-size-n", 12)


def draft_length_flag(spec_type: str) -> str:
    """The flag that sets ``spec_type``'s draft length (``DRAFT_LENGTH_FLAGS``)."""
    return DRAFT_LENGTH_FLAGS.get(spec_type, DRAFT_N_MAX)


def draft_length(varying: Mapping[str, object]) -> object:
    """The draft length a job's varying flags set for its spec type, None if they do not."""
    return varying.get(draft_length_flag(str(varying.get("spec-type") or "")))


def varying_text(varying: dict[str, str | None]) -> str:
    """``spec-type=ngram-simple ctx-size=-``: a job's varying flags, ``-`` for one removed."""
    return " ".join(f"{name}={'-' if value is None else value}"
                    for name, value in varying.items())
