"""The built-in prompt suite (``suite.yaml``) and a small loader for it; the bundled
document that ``prompt-length`` tiers put before a prompt (``documents/README.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

SUITE_PATH: Path = Path(__file__).with_name("suite.yaml")
DOCUMENTS_DIR: Path = Path(__file__).with_name("documents")
# The long-prompt document's parts, in order (documents/README.md says what and whose).
DOCUMENT_PARTS = ("GPL-3.txt", "GPL-2.txt", "LGPL-2.1.txt", "GFDL-1.3.txt")
# English characters per token, roughly (BPE vocabularies of 49k to 150k tokens read 4 to
# 4.5): what a tier's excerpt is sized by. The server counts the tokens each run really had.
CHARS_PER_TOKEN = 4

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


def document_text() -> str:
    """The bundled long-prompt document: its parts, one after another."""
    return "\n\n".join((DOCUMENTS_DIR / name).read_text(encoding="utf-8")
                       for name in DOCUMENT_PARTS)


def document_tokens() -> int:
    """About how many tokens the bundled document holds: the longest tier it can give."""
    return len(document_text()) // CHARS_PER_TOKEN


def with_document(prompt: str, tokens: int, index: int, document: str) -> str:
    """``prompt`` after an excerpt of about ``tokens`` tokens of ``document``, starting at a
    line that differs with ``index`` (the prompt's place), so that prompts of one tier do
    not share their context. ValueError if the document is too short for it."""
    length = tokens * CHARS_PER_TOKEN
    room = len(document) - length
    if room < 0:
        raise ValueError(f"{tokens} tokens is more than the bundled document holds (about "
                         f"{len(document) // CHARS_PER_TOKEN})")
    # A stride coprime with most lengths spreads the excerpts over the document.
    start = (index * 7919) % (room + 1)
    line = document.rfind("\n", 0, start) + 1
    excerpt = document[line:line + length]
    return f"Read this document:\n\n{excerpt}\n\n{prompt}"
