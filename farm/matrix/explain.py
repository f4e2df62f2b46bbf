"""A matrix's validation errors (pydantic's) in the farm's words: one line each, naming
the file and the key path (``variants[2].flags``), an unknown key with the near keys it
may be a typo of, and no noise from a union's other branches."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from farm.errors import ConfigError
from farm.matrix.schema import Matrix


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


def explain(path: Path, error: ValidationError) -> ConfigError:
    """``error``, met validating the matrix in ``path``, as one line per problem."""
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
