"""HTTP to a running llama-server: streamed generations with timings, /metrics counters.

The server's code is a commit's: every answer is read to the bounds of
``workers.job.runtime.bounded_http``, and /metrics may name no draft position past
MAX_POSITIONS nor a count that is no whole number.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from farm.errors import BenchmarkError
from workers.job.runtime.bounded_http import (
    BODY_BYTES,
    ERROR_BYTES,
    MAX_COUNT,
    METRICS_BYTES,
    StreamBounds,
    parse_json,
    read_body,
    shaped,
    speed,
    sse_events,
    whole,
)

_METRIC = re.compile(r'^llamacpp:(\w+)(?:\{position="(\d+)"\})?\s+([0-9.eE+-]+)$')
SPEC_COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total")
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"

# Draft positions /metrics may name: 0 .. MAX_POSITIONS - 1 (a matrix drafts at most 64
# tokens; a flag may ask more, far below this).
MAX_POSITIONS = 1024


@dataclass(frozen=True)
class SpecCounters:
    """The server's cumulative speculative counters, or the difference of two scrapes."""

    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_pos: tuple[int, ...] = ()

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        width = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        after_pos = list(self.accepted_per_pos) + [0] * (width - len(self.accepted_per_pos))
        before_pos = list(before.accepted_per_pos) + [0] * (width - len(before.accepted_per_pos))
        return SpecCounters(self.drafts - before.drafts, self.drafted - before.drafted,
                            self.accepted - before.accepted,
                            tuple(a - b for a, b in zip(after_pos, before_pos, strict=True)))


@dataclass(frozen=True)
class Generation:
    """What one request measured; token counts come from the server, never from chunks."""

    text: str
    prompt_tokens: int
    generated_tokens: int
    prompt_tok_s: float | None
    decode_tok_s: float
    ttft_ms: float
    e2e_ms: float
    draft_n: int
    draft_accepted: int
    chunk_gaps_ms: list[float] = field(default_factory=list)
    # The client's monotonic clock (time.perf_counter, s) when the request was sent and its
    # first and last pieces of text came: what overlap between streams is measured from.
    sent_at: float = 0.0
    first_at: float = 0.0
    last_at: float = 0.0
    slot: int | None = None  # the server slot it ran on, where the request named one
    streams: int = 1  # more for the figures of N simultaneous streams (executor.merge)

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: (E2E - TTFT) / (n - 1), n per stream."""
        per_stream = self.generated_tokens / self.streams
        if per_stream < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (per_stream - 1)

    def chunk_gap(self, quantile: float) -> float | None:
        """A quantile of the gaps between streamed chunks (None with under two chunks)."""
        if not self.chunk_gaps_ms:
            return None
        ordered = sorted(self.chunk_gaps_ms)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]

    @property
    def chunk_gap_p50_ms(self) -> float | None:
        """The median gap between streamed chunks."""
        return self.chunk_gap(0.5)

    @property
    def chunk_gap_max_ms(self) -> float | None:
        """The longest gap between streamed chunks."""
        return self.chunk_gap(1.0)

    @property
    def client_decode_tok_s(self) -> float | None:
        """Decode speed as the client saw it, to cross-check the server's figure."""
        tpot = self.tpot_ms
        return 1000.0 / tpot if tpot else None


def parse_metrics(text: str) -> SpecCounters:
    """The speculative counters of a Prometheus /metrics text (zero where absent);
    ``BenchmarkError`` for a draft position past MAX_POSITIONS or a value that is no count."""
    values: dict[str, int] = {}
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        match = _METRIC.match(line.strip())
        if not match:
            continue
        name, position, value = match.groups()
        if name == PER_POSITION and position is not None:
            per_pos[_position(position)] = _metric_count(name, value)
        elif name in SPEC_COUNTERS:
            values[name] = _metric_count(name, value)
    drafts, drafted, accepted = (values.get(name, 0) for name in SPEC_COUNTERS)
    positions = tuple(per_pos.get(i, 0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(drafts, drafted, accepted, positions)


def _position(digits: str) -> int:
    if len(digits) > len(str(MAX_POSITIONS)) or int(digits) >= MAX_POSITIONS:
        shown = digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits)} digits)"
        raise BenchmarkError(f"the server's /metrics names draft position {shown}, over the "
                             f"farm's bound of {MAX_POSITIONS - 1}: refused")
    return int(digits)


def _metric_count(name: str, value: str) -> int:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (0 <= number <= MAX_COUNT) or number != int(number):
        raise BenchmarkError(f"the server's /metrics gives {name} the value {value[:40]!r}, "
                             f"not a count (a whole number from 0 to 2^63 - 1): refused")
    return int(number)


def _chunk_text(event: dict[str, Any]) -> str:
    if "content" in event:  # native /completion
        return str(event.get("content") or "")
    choices = event.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    return str(delta.get("content") or choices[0].get("text") or "")


class _StaleConnection(Exception):
    """The request met a connection the server had closed: it never reached the server."""


class ServerClient:
    """A client for one server; timeouts are explicit because generations can be long.
    Every answer is read within the bounds above."""

    def __init__(self, transport: httpx.BaseTransport, *,
                 request_timeout: float = 600.0) -> None:
        """A client over ``transport`` (a server's UNIX socket: ``LlamaServer.http_transport``)."""
        self._timeout = request_timeout
        # Bodies as they are sent: no compressed answer is inflated past its bound.
        self._http = httpx.Client(transport=transport, base_url="http://localhost",
                                  timeout=httpx.Timeout(request_timeout, connect=10.0),
                                  headers={"Accept-Encoding": "identity"})

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, *, most: int = BODY_BYTES,
                 **kwargs: Any) -> tuple[int, bytes]:
        """The status and body (at most ``most`` bytes; an error's cut at ERROR_BYTES)."""
        # llama-server may close a kept-alive connection between requests; a request that
        # met a closed connection never reached it, so trying once more is safe.
        try:
            try:
                return self._answer(method, path, most, **kwargs)
            except httpx.RemoteProtocolError:
                return self._answer(method, path, most, **kwargs)
        except httpx.TransportError as exc:
            raise BenchmarkError(f"{method} {path} failed: {exc!r}") from exc

    def _answer(self, method: str, path: str, most: int, **kwargs: Any) -> tuple[int, bytes]:
        deadline = time.monotonic() + self._timeout
        with self._http.stream(method, path, **kwargs) as response:
            ok = response.status_code == 200
            return response.status_code, read_body(response, most if ok else ERROR_BYTES,
                                               f"{method} {path}", deadline=deadline,
                                               cut=not ok)

    def _slots(self) -> tuple[int, list[dict[str, Any]]]:
        """The status of /slots and, where it is 200, its slots."""
        status, body = self._request("GET", "/slots")
        if status != 200:
            return status, []
        slots = parse_json(body, "/slots")
        if not isinstance(slots, list) or not all(isinstance(slot, dict) for slot in slots):
            raise BenchmarkError("/slots: the server answered something of another shape "
                                 "than llama-server's (not a list of slots)")
        return status, slots

    def slot_speculative(self) -> bool | None:
        """Whether the server's slot is set up to speculate (/slots), None if not told."""
        _, slots = self._slots()
        return bool(slots[0].get("speculative")) if slots else None

    def slot_contexts(self) -> list[int]:
        """Each slot's context in tokens (/slots n_ctx): ctx-size shared among the slots,
        capped by the model's training context."""
        status, slots = self._slots()
        if not slots:
            raise BenchmarkError(f"/slots answered {status}{' and no slot' * (status == 200)}")
        with shaped("/slots"):
            return [whole(slot["n_ctx"], "n_ctx") for slot in slots]

    def prompt_tokens(self, prompt: str, mode: Literal["chat", "completion"]) -> int:
        """How many tokens the server reads for ``prompt``: in chat mode with its template."""
        text = prompt
        if mode == "chat":
            status, body = self._request(
                "POST", "/apply-template",
                json={"messages": [{"role": "user", "content": prompt}]})
            if status != 200:
                raise BenchmarkError(f"/apply-template answered {status}")
            with shaped("/apply-template"):
                text = str(parse_json(body, "/apply-template")["prompt"])
        status, body = self._request("POST", "/tokenize", json={"content": text,
                                                               "add_special": True})
        if status != 200:
            raise BenchmarkError(f"/tokenize answered {status}")
        with shaped("/tokenize"):
            return len(parse_json(body, "/tokenize")["tokens"])

    def tokenize(self, text: str) -> list[int] | None:
        """The token ids of ``text`` (to find where two outputs first differ)."""
        status, body = self._request("POST", "/tokenize", json={"content": text})
        if status != 200:
            return None
        with shaped("/tokenize"):
            return [int(token) for token in parse_json(body, "/tokenize").get("tokens", [])]

    def spec_counters(self) -> SpecCounters:
        """The server's cumulative speculative counters now (/metrics)."""
        status, body = self._request("GET", "/metrics", most=METRICS_BYTES)
        if status != 200:
            raise BenchmarkError(f"/metrics answered {status}")
        return parse_metrics(body.decode(errors="replace"))

    def generate(self, prompt: str, *, mode: Literal["chat", "completion"], n_predict: int,
                 sampling: dict[str, Any], ignore_eos: bool = True,
                 slot: int | None = None) -> Generation:
        """One streamed request without the prompt cache: exactly ``n_predict`` tokens, or
        at most that many where ``ignore_eos`` is False (the model may stop first); on the
        server slot ``slot`` where given (its own stream of N simultaneous ones)."""
        body: dict[str, Any] = {**sampling, "stream": True, "ignore_eos": ignore_eos,
                                "cache_prompt": False, "n_predict": n_predict}
        if slot is not None:
            body["id_slot"] = slot
        if mode == "chat":
            path = "/v1/chat/completions"
            body |= {"messages": [{"role": "user", "content": prompt}],
                     "max_tokens": n_predict, "timings_per_token": False}
        else:
            path = "/completion"
            body["prompt"] = prompt
        bounds = StreamBounds(n_predict, self._timeout)
        try:
            return self._stream(path, body, slot, bounds)
        except _StaleConnection:
            return self._stream(path, body, slot, bounds)

    def _stream(self, path: str, body: dict[str, Any], slot: int | None,
                bounds: StreamBounds) -> Generation:
        what = f"POST {path}"
        pieces: list[str] = []
        gaps: list[float] = []
        timings: dict[str, Any] | None = None
        started = time.perf_counter()
        first = last = None
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    text = read_body(response, ERROR_BYTES, what, cut=True,
                                 deadline=time.monotonic() + self._timeout)
                    raise BenchmarkError(f"{what} answered {response.status_code}: "
                                         f"{text.decode(errors='replace')[:500]}")
                for event in sse_events(response, bounds, what):
                    now = time.perf_counter()
                    with shaped(what):
                        piece = _chunk_text(event)
                        timings = _timings(event.get("timings")) or timings
                        slot = int(event["id_slot"]) if "id_slot" in event else slot
                    if piece:
                        if first is None:
                            first = now
                        elif last is not None:
                            gaps.append((now - last) * 1000.0)
                        last = now
                        pieces.append(piece)
        except httpx.RemoteProtocolError as exc:
            if first is None and timings is None:
                raise _StaleConnection from exc
            raise BenchmarkError(f"{what} failed: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise BenchmarkError(f"{what} failed: {exc!r}") from exc
        ended = time.perf_counter()
        if timings is None:
            raise BenchmarkError(f"{what}: the stream ended without `timings`")
        with shaped(f"{what}'s timings"):
            return _generation("".join(pieces), timings, (started, first or ended,
                                                          last or ended, ended), gaps, slot)


def _timings(value: Any) -> dict[str, Any] | None:
    """An event's ``timings`` (None where it has none)."""
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"timings is {type(value).__name__}, not an object")
    return value


def _generation(text: str, timings: dict[str, Any], times: tuple[float, float, float, float],
                gaps: list[float], slot: int | None) -> Generation:
    started, first, last, ended = times
    return Generation(
        text=text,
        prompt_tokens=whole(timings.get("prompt_n", 0), "prompt_n"),
        generated_tokens=whole(timings.get("predicted_n", 0), "predicted_n"),
        prompt_tok_s=speed(timings, "prompt_per_second"),
        decode_tok_s=speed(timings, "predicted_per_second") or 0.0,
        ttft_ms=(first - started) * 1000.0,
        e2e_ms=(ended - started) * 1000.0,
        draft_n=whole(timings.get("draft_n", 0), "draft_n"),
        draft_accepted=whole(timings.get("draft_n_accepted", 0), "draft_n_accepted"),
        chunk_gaps_ms=gaps,
        sent_at=started,
        first_at=first,
        last_at=last,
        slot=slot,
    )
