"""llama-server flags as a matrix spells them, and as argv.

A flag is kept as its canonical long name without dashes (``ctx-size``; which names a
job may pass and how: ``farm.matrix.options``) and a value: ``True`` for a bare switch,
a string otherwise. The same spelling is used in the store and in reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from farm.errors import ConfigError

FlagValue = str | bool
FlagMap = dict[str, FlagValue | None]


def scalar(value: object, where: str) -> FlagValue | None:
    """A YAML scalar as a flag value: bools stay bools (switches), numbers become text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected a scalar (text, number, true/false or null), "
                      f"got {type(value).__name__}")


def parse_args(text: str, where: str) -> list[tuple[str, FlagValue]]:
    """Split an ``args:`` string (shlex, no shell) into (flag, value) pairs, as written."""
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
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if following is not None and (not following.startswith("-") or _is_number(following)):
            pairs.append((token, following))
            index += 2
        else:
            pairs.append((token, True))
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


# The draft length when its flag is absent (llama.cpp b11434: --spec-draft-n-max 3;
# ngram-simple's m 48). The other n-gram types' defaults are not known here.
DRAFT_LENGTH_DEFAULTS = {DRAFT_N_MAX: 3, "spec-ngram-simple-size-m": 48}


def arm_draft_length(flags: Mapping[str, object]) -> int | None:
    """The draft length an arm's flags run with: its spec type's length flag, else that
    flag's default; None without one speculative type or a known default."""
    spec_type = str(flags.get("spec-type") or "none")
    if spec_type == "none" or "," in spec_type:
        return None
    flag = draft_length_flag(spec_type)
    value = flags.get(flag)
    if value is None or isinstance(value, bool):
        return DRAFT_LENGTH_DEFAULTS.get(flag)
    try:
        return int(str(value))
    except ValueError:
        return None


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
