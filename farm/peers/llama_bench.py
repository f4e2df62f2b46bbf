"""llama-bench's own outputs: ``-o json`` (an array of records), ``jsonl`` (a record a
line), ``csv`` (a header line, then a quoted record a line) and ``sql`` (``CREATE TABLE``,
then an ``INSERT`` a line). The fields are those of ``tools/llama-bench/llama-bench.cpp``
(``test::get_fields``); the SQL is read, never run.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from farm.peers.figures import PeerFigure, PeerFile, PeerFileError, base_name

TOOL = "llama-bench"
REQUIRED = ("build_commit", "build_number", "model_filename", "n_prompt", "n_gen", "avg_ts")
_INSERT = re.compile(r"^INSERT INTO (?P<table>\w+) \((?P<columns>[\w, ]+)\) "
                     r"VALUES \((?P<values>.*)\);$")
_VALUE = re.compile(r"'((?:[^']|'')*)'(?:, |$)")


class _Reader:
    """Typed values of one record, each failure naming the file, the line and the key."""

    def __init__(self, file: str, fmt: str, where: str, record: Mapping[str, Any]) -> None:
        self.file, self.fmt, self.where, self.record = file, fmt, where, record

    def fail(self, problem: str) -> PeerFileError:
        return PeerFileError(self.file, self.where, problem,
                             f"write it again with `llama-bench -o {self.fmt}` (the farm reads "
                             "llama-bench's records as it writes them)")

    def text(self, key: str) -> str | None:
        value = self.record.get(key)
        return None if value is None or value == "" else str(value)

    def integer(self, key: str) -> int | None:
        value = self.record.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            return int(value)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise self.fail(f"key {key!r} is {value!r}, not an integer") from None

    def number(self, key: str) -> float | None:
        value = self.record.get(key)
        if value is None or value == "":
            return None
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise self.fail(f"key {key!r} is {value!r}, not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise self.fail(f"key {key!r} is {value!r}, not a finite number")
        return number


def _test(n_prompt: int, n_gen: int, n_depth: int | None) -> tuple[str, str]:
    """llama-bench's name of a test (pp512, tg128, pp512+tg128, "@ d512") and what it
    measures."""
    if n_prompt and n_gen:
        name, measure = f"pp{n_prompt}+tg{n_gen}", "prompt+decode"
    elif n_gen:
        name, measure = f"tg{n_gen}", "decode"
    else:
        name, measure = f"pp{n_prompt}", "prompt"
    return (f"{name} @ d{n_depth}" if n_depth else name), measure


def _figure(reader: _Reader) -> PeerFigure:
    record = reader.record
    for key in REQUIRED:
        if key not in record:
            raise reader.fail(f"the record has no key {key!r}")
    n_prompt, n_gen = reader.integer("n_prompt") or 0, reader.integer("n_gen") or 0
    n_depth = reader.integer("n_depth")
    tok_s = reader.number("avg_ts")
    if tok_s is None or tok_s <= 0 or not (n_prompt or n_gen):
        raise reader.fail(f"avg_ts {record.get('avg_ts')!r} with n_prompt {n_prompt} and "
                          f"n_gen {n_gen} is no measurement")
    samples = record.get("samples_ts")
    if samples is not None and not (isinstance(samples, list)
                                    and all(isinstance(s, int | float) for s in samples)):
        raise reader.fail(f"key 'samples_ts' is {samples!r}, not a list of numbers")
    commit = reader.text("build_commit")
    test, measure = _test(n_prompt, n_gen, n_depth)
    return PeerFigure(
        source=reader.where, test=test, measure=measure, tok_s=tok_s, raw=dict(record),
        build_commit=None if commit == "unknown" else commit,
        build_number=reader.integer("build_number"),
        model_file=base_name(reader.text("model_filename")),
        model_type=reader.text("model_type"), model_size=reader.integer("model_size"),
        model_n_params=reader.integer("model_n_params"), backends=reader.text("backends"),
        cpu_info=reader.text("cpu_info"), gpu_info=reader.text("gpu_info"),
        n_threads=reader.integer("n_threads"), n_gpu_layers=reader.integer("n_gpu_layers"),
        n_batch=reader.integer("n_batch"), n_ubatch=reader.integer("n_ubatch"),
        type_k=reader.text("type_k"), type_v=reader.text("type_v"),
        flash_attn=reader.text("flash_attn"), speculative=False,
        n_prompt=n_prompt, n_gen=n_gen, n_depth=n_depth,
        tok_s_sd=reader.number("stddev_ts"),
        repetitions=len(samples) if samples is not None else None,
        samples=[float(s) for s in samples] if samples is not None else None,
        measured_at=_time(reader))


def _time(reader: _Reader) -> datetime | None:
    value = reader.text("test_time")
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise reader.fail(f"key 'test_time' is {value!r}, not an ISO 8601 time") from None


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _json_array(text: str, file: str) -> Iterator[tuple[int, Any]]:
    """The elements of a JSON array with the line each starts on."""
    decoder, position = json.JSONDecoder(), text.index("[") + 1
    expect_comma = False
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position >= len(text):
            raise PeerFileError(file, f"line {_line_of(text, position)}", "the JSON array is "
                                "not closed", "the file was cut: write it again")
        if text[position] == "]":
            return
        if expect_comma:
            if text[position] != ",":
                raise PeerFileError(file, f"line {_line_of(text, position)}", "expected ',' "
                                    "or ']' between records", "this is not llama-bench JSON")
            position += 1
            expect_comma = False
            continue
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise PeerFileError(file, f"line {exc.lineno}", f"not JSON ({exc.msg})",
                                "the file was cut or edited: write it again") from None
        yield _line_of(text, position), value
        position, expect_comma = end, True


def _json_records(text: str, file: str, fmt: str) -> Iterator[tuple[str, Any]]:
    if fmt == "json":
        for line, value in _json_array(text, file):
            yield f"line {line}", value
        return
    for number, content in enumerate(text.splitlines(), 1):
        if content.strip():
            try:
                yield f"line {number}", json.loads(content)
            except json.JSONDecodeError as exc:
                raise PeerFileError(file, f"line {number}", f"not JSON ({exc.msg})",
                                    "each line of `llama-bench -o jsonl` is one JSON "
                                    "object: write the file again") from None


def _csv_records(text: str, file: str) -> Iterator[tuple[str, dict[str, str]]]:
    rows = csv.DictReader(io.StringIO(text))
    for row in rows:
        if None in row or None in row.values():
            raise PeerFileError(file, f"line {rows.line_num}", "it has another number of "
                                "values than the header has columns",
                                "give the file `llama-bench -o csv` wrote, unedited")
        yield f"line {rows.line_num}", row


def _sql_values(values: str) -> list[str] | None:
    found, position = [], 0
    while position < len(values):
        match = _VALUE.match(values, position)
        if match is None:
            return None
        found.append(match[1].replace("''", "'"))
        position = match.end()
    return found


def _sql_records(text: str, file: str) -> Iterator[tuple[str, dict[str, str]]]:
    in_create = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if in_create:
            in_create = stripped != ");"
            continue
        if not stripped:
            continue
        if stripped.startswith("CREATE TABLE"):
            in_create = True
            continue
        match = _INSERT.match(stripped)
        values = _sql_values(match["values"]) if match else None
        columns = [c.strip() for c in match["columns"].split(",")] if match else []
        if match is None or values is None or len(values) != len(columns):
            raise PeerFileError(file, f"line {number}", f"{stripped[:60]!r} is not one of "
                                "llama-bench's CREATE TABLE or INSERT statements",
                                "give the file `llama-bench -o sql` wrote, unedited (the farm "
                                "reads its statements, it never runs SQL from a file)")
        yield f"line {number}", dict(zip(columns, values, strict=True))


def read(text: str, file: str, fmt: str) -> PeerFile:
    """Every record of a llama-bench output in ``fmt`` (json, jsonl, csv, sql)."""
    records: Iterator[tuple[str, Any]]
    if fmt in ("json", "jsonl"):
        records = _json_records(text, file, fmt)
    elif fmt == "csv":
        records = _csv_records(text, file)
    else:
        records = _sql_records(text, file)
    figures = []
    for where, record in records:
        if not isinstance(record, dict):
            raise PeerFileError(file, where, f"a {type(record).__name__}, not a record",
                                f"write it again with `llama-bench -o {fmt}`")
        figures.append(_figure(_Reader(file, fmt, where, record)))
    if not figures:
        raise PeerFileError(file, "the whole file", "no llama-bench record in it",
                            "did llama-bench finish? Run it again with -o " + fmt)
    return PeerFile(tool=TOOL, format=fmt, figures=figures)
