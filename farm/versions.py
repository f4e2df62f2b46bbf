"""A llama.cpp build's number and commit, from what its tools print (``--version``).

The text may be a stranger's (a board's bundle) or a hostile build's: a build number is read
only when it has at most ``BUILD_DIGITS`` digits, so it is always an ordinary integer that
converts to a float (llama.cpp's builds number in the thousands)."""

from __future__ import annotations

import re

BUILD_DIGITS = 9
# The version word bounded, so that a long text without "(build" is read in linear time.
_NEW_VERSION = re.compile(r"version:\s*(?P<semver>\S{1,64})\s*\(build (?P<build>\d+), "
                          r"commit (?P<commit>\w+)\)")
_OLD_VERSION = re.compile(r"version:\s*(?P<build>\d+)\s*\((?P<commit>\w+)\)")


def _match(text: str) -> re.Match[str] | None:
    for pattern in (_NEW_VERSION, _OLD_VERSION):
        match = pattern.search(text)
        if match:
            return match
    return None


def parse_version(text: str) -> tuple[int | None, str | None]:
    """Build number and commit from either ``--version`` format; no build number where it
    has more than ``BUILD_DIGITS`` digits."""
    match = _match(text)
    if match is None:
        return None, None
    digits = match["build"]
    return (int(digits) if len(digits) <= BUILD_DIGITS else None), match["commit"]


def build_in_range(text: str) -> bool:
    """Whether ``text`` names no build number, or one of at most ``BUILD_DIGITS`` digits."""
    match = _match(text)
    return match is None or len(match["build"]) <= BUILD_DIGITS
