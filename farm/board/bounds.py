"""The bounded types a bundle's records are made of: a value outside them cannot be held,
so a board never stores, prints or computes with it.

- Text: at most a stated length and no control character (C0, DEL, C1, the bidirectional
  overrides and isolates), which a terminal would act on rather than show. ``Prose`` (a
  run's generated text, a server's version output, a prompt) may hold tabs and line breaks.
- Numbers: finite (the records refuse NaN and infinity), in a physical range, non-negative
  where a negative one means nothing; integers within the store's column (32 bits for an
  ``Integer``, 64 for a ``BigInteger``).
- ``JsonTree``: free-form JSON (a job's spec, what varies, its stated summary) bounded in
  depth and size, every string and number in it as above.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field, StringConstraints, ValidationError

from farm.summary import JobSummary, upgraded
from farm.versions import build_in_range

# What a terminal acts on rather than shows (farm.report.cells.clean removes the same on
# output, for text stored before these types held); tab and line breaks are prose.
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_PROSE_CONTROLS: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
                                    "\u202a-\u202e\u2066-\u2069]")

# The store's integer columns: PostgreSQL's integer and bigint.
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
# Physical ceilings, each well above anything measured: tok/s (prompt and aggregate speeds
# of a small model on a fast GPU reach tens of thousands), a positive speed's floor (one
# token in 1,000 s), milliseconds (a week), MiB (100 TiB), joules (a GW for a second),
# watts, seconds (a year), cores, MHz.
MAX_TOK_S: Final = 1e6
MIN_TOK_S: Final = 1e-3
MAX_MS: Final = 6.048e8
MAX_MIB: Final = 1e8
MAX_JOULES: Final = 1e9
MAX_WATTS: Final = 1e5
MAX_SECONDS: Final = 3.2e7
MAX_CORES: Final = 1e5
MAX_MHZ: Final = 1e5
# A run's lists: token ids (n_predict is at most 32,768), acceptance per draft position, argv.
MAX_TOKENS: Final = 65_536
MAX_POSITIONS: Final = 1024
MAX_ARGV: Final = 512
# A JSON tree: how deep, how many values, how long a string, how large a number.
TREE_DEPTH: Final = 16
TREE_VALUES: Final = 20_000
TREE_STRING: Final = 65_536
TREE_NUMBER: Final = 1e18


def _where(text: str, found: re.Match[str]) -> str:
    return f"control character U+{ord(found.group()):04X} at {found.start()} of {len(text)}"


def _no_controls(text: str) -> str:
    found = _CONTROLS.search(text)
    if found is not None:
        raise ValueError(f"holds a {_where(text, found)}")
    return text


def _prose(text: str) -> str:
    found = _PROSE_CONTROLS.search(text)
    if found is not None:
        raise ValueError(f"holds a {_where(text, found)}")
    return text


def as_prose(text: str) -> str:
    """``text`` with each control character prose may not hold replaced by U+FFFD: how
    ``farm share`` keeps a run's generated text (a model may write anything), the same
    replacement in both arms, so outputs that matched still match."""
    return _PROSE_CONTROLS.sub("\ufffd", text)


def _positive_speed(value: float) -> float:
    # Zero marks a run without a usable speed; a positive one is a physical speed.
    if 0 < value < MIN_TOK_S:
        raise ValueError(f"a speed of {value} tok/s: a positive one is at least {MIN_TOK_S}")
    return value


def _bounded_build(text: str) -> str:
    if not build_in_range(text):
        raise ValueError("names a build number of more digits than any build has")
    return text


def _leaf(value: Any) -> None:
    """A JSON tree's string, number, boolean or null within the bounds."""
    if isinstance(value, str):
        if len(value) > TREE_STRING:
            raise ValueError(f"a string of {len(value)} characters (at most {TREE_STRING})")
        _prose(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > TREE_NUMBER:
            raise ValueError(f"a number out of range ({value:.3g}; finite, at most "
                             f"{TREE_NUMBER:g} in size)")
    elif value is not None and not isinstance(value, bool):
        raise ValueError(f"a {type(value).__name__}, which JSON does not have")


def _tree(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` when it is JSON within the bounds above; a ValueError naming the first
    value that is not. Walked with a stack of its own: no depth reaches Python's."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    values = 0
    while stack:
        item, depth = stack.pop()
        values += 1
        if values > TREE_VALUES or depth > TREE_DEPTH:
            raise ValueError(f"more than {TREE_VALUES} values, or nested deeper than "
                             f"{TREE_DEPTH}")
        if isinstance(item, dict):
            for key in item:
                if len(key) > 200:
                    raise ValueError(f"a key of {len(key)} characters (at most 200)")
                _no_controls(key)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        else:
            _leaf(item)
    return value


def first_error(exc: ValidationError) -> str:
    """A record's validation error as one line: the first problem, where, and how many
    others."""
    errors = exc.errors(include_url=False)
    where = ".".join(str(part) for part in errors[0]["loc"]) or "the record"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {' '.join(errors[0]['msg'].lower().split())}{more}"


def _job_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A stated summary that reads as this farm's ``JobSummary`` (through the upgrade of each
    version after its own), as the farm reads its own stored summaries: a speedup of "fast"
    is no summary."""
    try:
        JobSummary.model_validate(upgraded(dict(summary)))
    except ValidationError as exc:
        raise ValueError(f"not a job summary ({first_error(exc)})") from None
    except (ValueError, TypeError, KeyError) as exc:  # no version, or another shape
        raise ValueError(f"not a job summary ({' '.join(str(exc).split())[:200]})") from None
    return summary


def text(most: int) -> Any:
    """A string of at most ``most`` characters and no control character."""
    return Annotated[str, StringConstraints(max_length=most), AfterValidator(_no_controls)]


def prose(most: int) -> Any:
    """Text that may hold tabs and line breaks, at most ``most`` characters."""
    return Annotated[str, StringConstraints(max_length=most), AfterValidator(_prose)]


Text40 = text(40)
Text50 = text(50)
Text100 = text(100)
Text200 = text(200)
Text255 = text(255)
Text400 = text(400)
Text1000 = text(1000)
Text4096 = text(4096)
# A run's generated text: n_predict is at most 32,768 tokens.
RunText = prose(1_000_000)
# A server's --version output (several lines), its build number bounded.
ServerVersion = Annotated[str, StringConstraints(max_length=16_384), AfterValidator(_prose),
                          AfterValidator(_bounded_build)]

Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
Count64 = Annotated[int, Field(ge=0, le=INT64_MAX)]
Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Celsius = Annotated[int, Field(ge=-100, le=300)]
TokPerS = Annotated[float, Field(ge=0, le=MAX_TOK_S), AfterValidator(_positive_speed)]
Millis = Annotated[float, Field(ge=0, le=MAX_MS)]
MiB = Annotated[float, Field(ge=0, le=MAX_MIB)]
Joules = Annotated[float, Field(ge=0, le=MAX_JOULES)]
Watts = Annotated[float, Field(ge=0, le=MAX_WATTS)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Cores = Annotated[float, Field(ge=0, le=MAX_CORES)]
MHz = Annotated[float, Field(ge=0, le=MAX_MHZ)]
Share = Annotated[float, Field(ge=0, le=1)]
Load = Annotated[float, Field(ge=0, le=MAX_CORES)]
JsonTree = Annotated[dict[str, Any], AfterValidator(_tree)]
# A job's summary as its contributor stated it: JSON within bounds, and a job summary.
StatedSummary = Annotated[dict[str, Any], AfterValidator(_tree), AfterValidator(_job_summary)]
