"""Which tool wrote a file, told from its content (or named by the user), and its figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from farm.peers import llama_bench, spec_bench, speed_bench
from farm.peers.figures import PeerFile, PeerFileError

# What `farm import --format` accepts: tool and format in one word.
FORMATS = ("llama-bench-json", "llama-bench-jsonl", "llama-bench-csv", "llama-bench-sql",
           "speed-bench", "spec-bench")
_KNOWN = ("farm import reads llama-bench -o json|jsonl|csv|sql, speed_bench.py --output "
          "JSON and llama-spec-bench --output-format jsonl")


def _first_object(text: str) -> dict[str, Any] | None:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        value = json.loads(first)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def detect(text: str, file: str) -> str:
    """The ``FORMATS`` entry a file's content is in; an error naming what it reads if none."""
    head = text.lstrip()
    if head.startswith(("CREATE TABLE", "INSERT INTO")):
        return "llama-bench-sql"
    if head.startswith("build_commit,"):
        return "llama-bench-csv"
    if head.startswith("["):
        return "llama-bench-json"
    if head.startswith("| model") or head.startswith("| build_commit"):
        raise PeerFileError(file, "line 1", "this is llama-bench's markdown table",
                            "run llama-bench again with -o json (or jsonl, csv, sql)")
    if head.startswith("{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and "summary" in whole and "results" in whole:
            return "speed-bench"
        first = _first_object(text)
        if first is not None and "row_type" in first:
            return "spec-bench"
        if first is not None and "avg_ts" in first:
            return "llama-bench-jsonl"
    raise PeerFileError(file, "line 1", "cannot tell which tool wrote it",
                        f"{_KNOWN}; give --format if it is one of them")


def read_peer_file(path: Path, fmt: str | None = None) -> tuple[PeerFile, bytes]:
    """The figures of the file at ``path`` and its bytes (the caller stores their hash)."""
    file = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PeerFileError(file, "the whole file", f"cannot read it ({exc.strerror})",
                            "check the path") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise PeerFileError(file, f"line {line}", "not UTF-8 text", _KNOWN) from None
    fmt = fmt or detect(text, file)
    if fmt == "speed-bench":
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PeerFileError(file, f"line {exc.lineno}", f"not JSON ({exc.msg})",
                                "give the JSON file speed_bench.py --output wrote") from None
        return speed_bench.read(parsed, file), data
    if fmt == "spec-bench":
        return spec_bench.read(text, file), data
    return llama_bench.read(text, file, fmt.removeprefix("llama-bench-")), data
