"""Counted nouns in messages: ``plural(1, "job")`` is "1 job", ``plural(2, "job")`` "2 jobs"."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, in the plural (``many``, default ``noun + "s"``) unless 1."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
