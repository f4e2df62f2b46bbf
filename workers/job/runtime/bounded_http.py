"""A server's HTTP answers read to bounds: bodies, server-sent streams, JSON and the
numbers in it.

The server's code is a commit's: an answer may be endless, a line may never end, a body
may not be JSON or not of llama-server's shape, a count may be 1e300. Each is read to a
stated bound and is a ``BenchmarkError`` naming what the server answered and the bound,
never more memory or time than the bound.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from farm.errors import BenchmarkError
from farm.words import plural

# Bounds on what the farm reads of a server's answers. An honest llama-server answers
# /metrics in a few kB, /slots, /tokenize and /apply-template in well under a MB even for
# the longest prompt a matrix may give, and streams one event of a few hundred bytes per
# token; each bound is far above that.
BODY_BYTES = 32 << 20  # a JSON answer
METRICS_BYTES = 1 << 20
ERROR_BYTES = 64 << 10  # of an error's body (its first 500 characters are shown)
LINE_BYTES = 1 << 20  # one line of a stream
STREAM_BYTES_PER_TOKEN, STREAM_BYTES = 4096, 1 << 20  # a stream: per token asked, and more
EVENTS_PER_TOKEN, EVENTS = 2, 64  # a stream's events: per token asked, and more
SECONDS_PER_TOKEN = 1.0  # a stream's time, beyond the request timeout
# Arrays and objects a JSON answer may hold: an honest one holds tens (a slot each, a
# tokenize answer two). Counted before parsing, since each costs the worker about 60
# bytes of memory for its 2 bytes of answer (32 MiB of "[]," would be about 700 MiB).
JSON_CONTAINERS = 100_000
# The most a count may be (a 64-bit counter).
MAX_COUNT = 2**63 - 1


@contextmanager
def shaped(what: str) -> Iterator[None]:
    """An answer of another shape than llama-server's (not JSON, a list for an object, a
    word for a number...) is a BenchmarkError naming ``what``."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise BenchmarkError(f"{what}: the server answered something of another shape than "
                             f"llama-server's ({type(exc).__name__}: {str(exc)[:200]})") from None


def read_body(response: httpx.Response, most: int, what: str, *, deadline: float,
              cut: bool = False) -> bytes:
    """An answer's body as it came (no content decoding): BenchmarkError past ``most``
    bytes (``cut``: its first ``most``) or past ``deadline`` (time.monotonic)."""
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > most:
            if cut:
                break
            raise BenchmarkError(f"{what}: the server's answer is over {most} bytes, the "
                                 "farm's bound for it: refused")
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what}: the server's answer took longer than the farm "
                                 "waits for it: refused")
    del body[most:]  # in place: a slice and then bytes of it would copy the body twice
    return bytes(body)


def parse_json(body: bytes, what: str) -> Any:
    """``body`` as JSON (``shaped``: BenchmarkError naming ``what`` if it is not), of at
    most ``JSON_CONTAINERS`` arrays and objects (a bracket in a string counts too)."""
    if body.count(b"[") + body.count(b"{") > JSON_CONTAINERS:
        raise BenchmarkError(f"{what}: the server's answer holds over {JSON_CONTAINERS} "
                             "arrays or objects, the farm's bound for it: refused")
    with shaped(what):
        return json.loads(body)


@dataclass(frozen=True)
class StreamBounds:
    """What one stream of ``n_predict`` tokens may take: its bytes, events and time (s)."""

    n_predict: int
    seconds: float

    @property
    def most_bytes(self) -> int:
        """Bytes in all."""
        return STREAM_BYTES + STREAM_BYTES_PER_TOKEN * self.n_predict

    @property
    def most_events(self) -> int:
        """Events (``data:`` lines)."""
        return EVENTS + EVENTS_PER_TOKEN * self.n_predict

    @property
    def most_seconds(self) -> float:
        """Seconds from the request on."""
        return self.seconds + SECONDS_PER_TOKEN * self.n_predict


def sse_events(response: httpx.Response, bounds: StreamBounds,
                what: str) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent stream, within ``bounds``."""
    deadline = time.monotonic() + bounds.most_seconds
    read = events = 0
    pending = bytearray()  # the line being read: joined once it ends, not at every chunk
    for chunk in response.iter_raw():
        read += len(chunk)
        past = (f"over {bounds.most_bytes} bytes" if read > bounds.most_bytes else
                f"for over {bounds.most_seconds:.0f} s" if time.monotonic() > deadline else "")
        if past:
            raise BenchmarkError(f"{what}: the server streamed {past} for "
                                 f"{plural(bounds.n_predict, 'token')}, the farm's bound: refused")
        pending += chunk
        lines: list[bytes] = []
        if b"\n" in chunk:
            *lines, rest = bytes(pending).split(b"\n")
            pending = bytearray(rest)
        if len(pending) > LINE_BYTES:
            raise BenchmarkError(f"{what}: a line of the server's stream is over {LINE_BYTES} "
                                 "bytes, the farm's bound: refused")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            events += 1
            if events > bounds.most_events:
                raise BenchmarkError(f"{what}: the server streamed over {bounds.most_events} "
                                     f"events for {plural(bounds.n_predict, 'token')}, the "
                                     "farm's bound: refused")
            event = parse_json(payload, what)
            if isinstance(event, dict):
                yield event


def whole(value: Any, name: str) -> int:
    """A count the server gives: a whole number from 0 to MAX_COUNT."""
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not 0 <= value <= MAX_COUNT or value != int(value):
        raise ValueError(f"{name} is {str(value)[:40]!r}, not a count")
    return int(value)


def speed(timings: dict[str, Any], name: str) -> float | None:
    """A speed the server gives: a finite number >= 0 (None where it gives none)."""
    value = timings.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not 0 <= value < math.inf:
        raise ValueError(f"{name} is {str(value)[:40]!r}, not a speed")
    return float(value)
