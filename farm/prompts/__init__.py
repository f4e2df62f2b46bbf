"""The built-in prompt suite (``suite.yaml``) and a small loader for it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

SUITE_PATH: Path = Path(__file__).with_name("suite.yaml")

CATEGORIES: tuple[str, ...] = (
    "chat",
    "code",
    "math",
    "summarization",
    "translation",
    "extraction",
    "creative",
    "tutorial",
)

_FIELDS = ("id", "category", "text")


def _entry(raw: Any, index: int) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ValueError(f"{SUITE_PATH.name}: entry {index} is not a mapping")
    missing = [field for field in _FIELDS if not isinstance(raw.get(field), str)]
    if missing:
        raise ValueError(f"{SUITE_PATH.name}: entry {index} lacks string field(s) "
                         f"{', '.join(missing)}")
    return {field: str(raw[field]) for field in _FIELDS}


def load_suite(categories: Sequence[str] | None = None) -> list[dict[str, str]]:
    """Return the prompts (``{id, category, text}``), optionally only those categories.

    Raises ``ValueError`` naming any unknown category and listing the known ones.
    """
    if isinstance(categories, str):
        categories = [categories]
    if categories is not None:
        unknown = sorted({name for name in categories if name not in CATEGORIES})
        if unknown:
            raise ValueError(f"unknown prompt categor{'y' if len(unknown) == 1 else 'ies'}: "
                             f"{', '.join(unknown)} (known: {', '.join(CATEGORIES)})")
    raw = yaml.safe_load(SUITE_PATH.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{SUITE_PATH.name}: expected a list of prompts")
    prompts = [_entry(item, index) for index, item in enumerate(raw)]
    if categories is None:
        return prompts
    wanted = set(categories)
    return [prompt for prompt in prompts if prompt["category"] in wanted]
