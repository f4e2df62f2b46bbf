"""HTTP to a running llama-server: streamed generations with timings, /metrics counters."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from farm.errors import BenchmarkError

_METRIC = re.compile(r'^llamacpp:(\w+)(?:\{position="(\d+)"\})?\s+([0-9.eE+-]+)$')
SPEC_COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total")
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"


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
    def client_decode_tok_s(self) -> float | None:
        """Decode speed as the client saw it, to cross-check the server's figure."""
        tpot = self.tpot_ms
        return 1000.0 / tpot if tpot else None


def parse_metrics(text: str) -> SpecCounters:
    """The speculative counters of a Prometheus /metrics text (zero where absent)."""
    values: dict[str, float] = {}
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        match = _METRIC.match(line.strip())
        if not match:
            continue
        name, position, value = match.groups()
        if name == PER_POSITION and position is not None:
            per_pos[int(position)] = int(float(value))
        elif name in SPEC_COUNTERS:
            values[name] = float(value)
    drafts, drafted, accepted = (int(values.get(name, 0)) for name in SPEC_COUNTERS)
    positions = tuple(per_pos.get(i, 0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(drafts, drafted, accepted, positions)


def _sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        event = json.loads(payload)
        if isinstance(event, dict):
            yield event


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
    """A client for one server; timeouts are explicit because generations can be long."""

    def __init__(self, transport: httpx.BaseTransport, *,
                 request_timeout: float = 600.0) -> None:
        """A client over ``transport`` (a server's UNIX socket: ``LlamaServer.http_transport``)."""
        self._http = httpx.Client(transport=transport, base_url="http://localhost",
                                  timeout=httpx.Timeout(request_timeout, connect=10.0))

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        # llama-server may close a kept-alive connection between requests; a request that
        # met a closed connection never reached it, so trying once more is safe.
        try:
            try:
                return self._http.request(method, path, **kwargs)
            except httpx.RemoteProtocolError:
                return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise BenchmarkError(f"{method} {path} failed: {exc!r}") from exc

    def _get(self, path: str) -> httpx.Response:
        return self._request("GET", path)

    def slot_speculative(self) -> bool | None:
        """Whether the server's slot is set up to speculate (/slots), None if not told."""
        response = self._get("/slots")
        if response.status_code != 200:
            return None
        slots = response.json()
        return bool(slots[0].get("speculative")) if slots else None

    def slot_contexts(self) -> list[int]:
        """Each slot's context in tokens (/slots n_ctx): ctx-size shared among the slots,
        capped by the model's training context."""
        response = self._get("/slots")
        if response.status_code != 200:
            raise BenchmarkError(f"/slots answered {response.status_code}")
        return [int(slot["n_ctx"]) for slot in response.json()]

    def prompt_tokens(self, prompt: str, mode: Literal["chat", "completion"]) -> int:
        """How many tokens the server reads for ``prompt``: in chat mode with its template."""
        text = prompt
        if mode == "chat":
            response = self._request("POST", "/apply-template",
                                     json={"messages": [{"role": "user", "content": prompt}]})
            if response.status_code != 200:
                raise BenchmarkError(f"/apply-template answered {response.status_code}")
            text = str(response.json()["prompt"])
        response = self._request("POST", "/tokenize", json={"content": text,
                                                            "add_special": True})
        if response.status_code != 200:
            raise BenchmarkError(f"/tokenize answered {response.status_code}")
        return len(response.json()["tokens"])

    def tokenize(self, text: str) -> list[int] | None:
        """The token ids of ``text`` (to find where two outputs first differ)."""
        response = self._request("POST", "/tokenize", json={"content": text})
        if response.status_code != 200:
            return None
        return [int(token) for token in response.json().get("tokens", [])]

    def spec_counters(self) -> SpecCounters:
        """The server's cumulative speculative counters now (/metrics)."""
        response = self._get("/metrics")
        if response.status_code != 200:
            raise BenchmarkError(f"/metrics answered {response.status_code}")
        return parse_metrics(response.text)

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
        try:
            return self._stream(path, body, slot)
        except _StaleConnection:
            return self._stream(path, body, slot)

    def _stream(self, path: str, body: dict[str, Any], slot: int | None) -> Generation:
        pieces: list[str] = []
        gaps: list[float] = []
        timings: dict[str, Any] | None = None
        started = time.perf_counter()
        first = last = None
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise BenchmarkError(f"POST {path} answered {response.status_code}: "
                                         f"{response.text[:500]}")
                for event in _sse_events(response):
                    now = time.perf_counter()
                    piece = _chunk_text(event)
                    if piece:
                        if first is None:
                            first = now
                        elif last is not None:
                            gaps.append((now - last) * 1000.0)
                        last = now
                        pieces.append(piece)
                    timings = event.get("timings") or timings
                    slot = int(event["id_slot"]) if "id_slot" in event else slot
        except httpx.RemoteProtocolError as exc:
            if first is None and timings is None:
                raise _StaleConnection from exc
            raise BenchmarkError(f"POST {path} failed: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise BenchmarkError(f"POST {path} failed: {exc!r}") from exc
        ended = time.perf_counter()
        if timings is None:
            raise BenchmarkError(f"POST {path}: the stream ended without `timings`")
        return _generation("".join(pieces), timings, (started, first or ended, last or ended,
                                                       ended), gaps, slot)


def _generation(text: str, timings: dict[str, Any], times: tuple[float, float, float, float],
                gaps: list[float], slot: int | None) -> Generation:
    started, first, last, ended = times
    return Generation(
        text=text,
        prompt_tokens=int(timings.get("prompt_n", 0)),
        generated_tokens=int(timings.get("predicted_n", 0)),
        prompt_tok_s=timings.get("prompt_per_second"),
        decode_tok_s=float(timings.get("predicted_per_second", 0.0)),
        ttft_ms=(first - started) * 1000.0,
        e2e_ms=(ended - started) * 1000.0,
        draft_n=int(timings.get("draft_n", 0)),
        draft_accepted=int(timings.get("draft_n_accepted", 0)),
        chunk_gaps_ms=gaps,
        sent_at=started,
        first_at=first,
        last_at=last,
        slot=slot,
    )
