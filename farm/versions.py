"""A llama.cpp build's number and commit, from what its tools print (``--version``)."""

from __future__ import annotations

import re

_NEW_VERSION = re.compile(r"version:\s*(?P<semver>\S+)\s*\(build (?P<build>\d+), "
                          r"commit (?P<commit>\w+)\)")
_OLD_VERSION = re.compile(r"version:\s*(?P<build>\d+)\s*\((?P<commit>\w+)\)")


def parse_version(text: str) -> tuple[int | None, str | None]:
    """Build number and commit from either ``--version`` format."""
    for pattern in (_NEW_VERSION, _OLD_VERSION):
        match = pattern.search(text)
        if match:
            return int(match["build"]), match["commit"]
    return None, None
