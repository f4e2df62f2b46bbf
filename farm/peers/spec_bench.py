"""ik_llama.cpp's ``llama-spec-bench --output-format jsonl``: a JSON object a line, an
``attempt`` row per task and repeat, then one ``summary`` row (examples/spec-bench/
spec-bench.cpp). With ``--output-details`` each row also carries ``runtime`` (model path,
threads, GPU layers, batch sizes), ``variant`` (is_baseline, spec_types, stage_chain),
``timing`` (decode_tps) and ``speculative`` (num_drafts, draft_tokens, accepted_tokens,
stages with drafted/accepted by position); without it an attempt has task, run, ok,
decode_tps and its stages (type, drafts, draft_tokens, accepted, by position).

A figure per task: the mean decode tok/s of its successful attempts (what the tool's
repeat summary shows), their values, and the summed draft counters; and the summary row.
No build is recorded: the user gives it at import (and the model, for compact rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from farm.peers.figures import PeerFigure, PeerFile, PeerFileError, base_name

TOOL = "llama-spec-bench"
_FIX = "give the output of `llama-spec-bench --output-format jsonl` (stdout), unedited"


@dataclass
class _Task:
    """The successful attempts of one task, summed."""

    lines: list[int] = field(default_factory=list)
    tok_s: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])  # drafts, drafted, accepted
    drafted_per_pos: list[int] = field(default_factory=list)
    accepted_per_pos: list[int] = field(default_factory=list)


def _add(into: list[int], values: Any) -> None:
    for position, value in enumerate(values if isinstance(values, list) else []):
        if position == len(into):
            into.append(0)
        into[position] += int(value)


def _stage_types(row: dict[str, Any]) -> str | None:
    variant = row.get("variant")
    if isinstance(variant, dict):
        if variant.get("is_baseline"):
            return None
        chain = variant.get("stage_chain") or ",".join(variant.get("spec_types") or [])
        return str(chain) or None
    stages = row.get("stages") or (row.get("speculative") or {}).get("stages") or []
    return ",".join(str(stage.get("type")) for stage in stages) or None


def _counts(row: dict[str, Any]) -> tuple[list[int], list[Any]]:
    """(drafts, drafted, accepted) and the stages of an attempt, either shape."""
    if isinstance(row.get("speculative"), dict):
        spec = row["speculative"]
        return ([int(spec.get(key) or 0) for key in ("num_drafts", "draft_tokens",
                                                     "accepted_tokens")],
                spec.get("stages") or [])
    stages = row.get("stages") or []
    return ([sum(int(stage.get(key) or 0) for stage in stages)
             for key in ("drafts", "draft_tokens", "accepted")], stages)


def _decode_tps(file: str, line: int, row: dict[str, Any]) -> float:
    value = (row["timing"].get("decode_tps") if isinstance(row.get("timing"), dict)
             else row.get("decode_tps"))
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise PeerFileError(file, f"line {line}", f"decode_tps is {value!r}, not a number",
                            _FIX)
    return float(value)


def _ok(row: dict[str, Any]) -> bool:
    quality = row.get("quality")
    return bool(quality.get("ok") if isinstance(quality, dict) else row.get("ok"))


def _rows(text: str, file: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PeerFileError(file, f"line {number}", f"not JSON ({exc.msg})", _FIX) from None
        if not isinstance(row, dict) or row.get("row_type") not in ("attempt", "summary"):
            raise PeerFileError(file, f"line {number}", "not an attempt or summary row "
                                "(row_type)", _FIX)
        rows.append((number, row))
    return rows


def _provenance(row: dict[str, Any]) -> dict[str, Any]:
    runtime: dict[str, Any] = row["runtime"] if isinstance(row.get("runtime"), dict) else {}
    spec_type = _stage_types(row)
    return {"model_file": base_name(runtime.get("model")),
            "n_threads": runtime.get("n_threads"), "n_gpu_layers": runtime.get("n_gpu_layers"),
            "n_batch": runtime.get("n_batch"), "n_ubatch": runtime.get("n_ubatch"),
            "flash_attn": None if runtime.get("flash_attn") is None
            else str(runtime["flash_attn"]),
            "speculative": spec_type is not None, "spec_type": spec_type}


def _positions(stages: list[Any]) -> tuple[list[int], list[int]]:
    drafted: list[int] = []
    accepted: list[int] = []
    for stage in stages:
        _add(drafted, stage.get("drafted_by_position"))
        _add(accepted, stage.get("accepted_by_position"))
    return drafted, accepted


def _span(lines: list[int]) -> str:
    return f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"


def read(text: str, file: str) -> PeerFile:
    """A figure per task and one for the summary row of a llama-spec-bench JSONL output."""
    rows = _rows(text, file)
    tasks: dict[str, _Task] = {}
    figures: list[PeerFigure] = []
    provenance: dict[str, Any] = {}
    for line, row in rows:
        provenance = provenance or _provenance(row)
        counts, stages = _counts(row)
        if row["row_type"] == "summary":
            drafted, accepted = _positions(stages)
            figures.append(PeerFigure(
                source=f"line {line}", test="all tasks", measure="decode",
                tok_s=_decode_tps(file, line, row), raw=row, **provenance,
                repetitions=row.get("successes"), drafts=counts[0], drafted=counts[1],
                accepted=counts[2], drafted_per_pos=drafted, accepted_per_pos=accepted))
            continue
        name = row.get("task_name", row.get("task"))
        if not isinstance(name, str) or not name:
            raise PeerFileError(file, f"line {line}", f"task is {name!r}, no task name", _FIX)
        if not _ok(row):
            continue
        task = tasks.setdefault(name, _Task())
        task.lines.append(line)
        task.tok_s.append(_decode_tps(file, line, row))
        task.counts = [a + b for a, b in zip(task.counts, counts, strict=True)]
        drafted, accepted = _positions(stages)
        _add(task.drafted_per_pos, drafted)
        _add(task.accepted_per_pos, accepted)
    figures[:0] = [PeerFigure(
        source=_span(task.lines), test=name, measure="decode",
        tok_s=sum(task.tok_s) / len(task.tok_s), raw={"task": name, "lines": task.lines},
        **provenance, repetitions=len(task.tok_s), samples=task.tok_s, drafts=task.counts[0],
        drafted=task.counts[1], accepted=task.counts[2],
        drafted_per_pos=task.drafted_per_pos, accepted_per_pos=task.accepted_per_pos)
        for name, task in tasks.items()]
    if not figures:
        raise PeerFileError(file, "the whole file", "no successful attempt and no summary row",
                            "did llama-spec-bench finish? Run it again")
    return PeerFile(tool=TOOL, format="jsonl", figures=figures)
