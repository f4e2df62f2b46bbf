"""What llama-server's log says: why a start failed, whether the weights spilled, and where
each request's speculative time went.

Every line of llama-server's the farm reacts to is matched here, beside the function that
reads it, so a message reworded upstream is a change to one place.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, fields
from pathlib import Path

from farm.errors import BenchmarkError, ServerStartError, StartFailure
from workers.job.runtime.untrusted_files import read_file, read_tail

# Why a start failed, in lower case, most specific first (first match wins): llama.cpp
# names a speculative or cache type it lacks inside its generic "error while handling
# argument" line.
_START_FAILURES: tuple[tuple[StartFailure, tuple[str, ...]], ...] = (
    ("no_mtp_heads", ("doesn't contain mtp layers", "failed to create mtp context")),
    ("unsupported_by_build", ("unknown speculative type", "unsupported cache type",
                              "the argument has been removed")),
    ("bad_flag", ("invalid argument", "error while handling argument")),
    ("out_of_memory", ("out of memory", "failed to allocate", "cudamalloc failed",
                       "unable to allocate")),
    ("model_unreadable", ("failed to open", "no such file", "failed to load model",
                          "error loading model")),
)
# The line llama.cpp's llama_model::load_tensors logs on a build with GPU offload support:
#   LLAMA_LOG_INFO("%s: offloaded %d/%d layers to GPU\n", __func__, ...)
# e.g. "load_tensors: offloaded 30/33 layers to GPU". CPU-only builds never print it.
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


# What the farm reads of a server's log at once (its writer is bounded too:
# ``server_output``): the end of a failed start's log, and each new part of a running
# server's log for its statistics.
TAIL_BYTES = 64 << 10
READ_BYTES = 16 << 20


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a server log, within its last TAIL_BYTES ("" when it
    cannot be read)."""
    try:
        text = read_tail(path, TAIL_BYTES, what="the server's log",
                         error=ServerStartError).decode(errors="replace")
    except (OSError, ServerStartError):
        return ""
    return "\n".join(text.splitlines()[-lines:])


# The lines of a failed start's log that say why. The rest (at --log-verbosity 4 the
# rendered chat template, the model's metadata) stays in the log file: a job's error is
# stored, shown by `farm status` and logged, and a template may hold what its author
# would not publish. llama.cpp's logger prefixes a line with its time and level
# ("0.12.560.300 E ..."); a line without one continues the last prefixed line (a message
# of several lines) or, before any, is the argument parser's own ("error: invalid
# argument: --foo").
_LEVEL = re.compile(r"^\d+\.\d+\.\d+\.\d+ (?P<level>[A-Z]) ")
_FAILURE_WORDS = re.compile(
    r"error|fail|unable|cannot|can't|couldn't|invalid|unknown|unsupported|not supported|"
    r"no such|not found|out of memory|abort|exception|terminat|removed|exiting|"
    r"address already in use", re.IGNORECASE)
_FAILURE_LINES, _LINE_CHARS = 12, 300


def failure_lines(log_tail: str) -> str:
    """The lines of ``log_tail`` that report a failure: logged at error or warning level
    (with their continuation lines), or unprefixed lines naming one before the logger
    started; at most 12, each cut at 300 characters."""
    kept, level = [], None
    for line in log_tail.splitlines():
        prefixed = _LEVEL.match(line)
        if prefixed:
            level = prefixed["level"]
        if level in ("E", "W") or (level is None and _FAILURE_WORDS.search(line)):
            kept.append(line[:_LINE_CHARS])
    return "\n".join(kept[-_FAILURE_LINES:])


def start_error(message: str, log_tail: str, *, timed_out: bool = False) -> ServerStartError:
    """The error for a failed start, of the failure class the log names, carrying the log's
    failure lines only (``failure_lines``).

    A server still starting at the deadline may have logged why it was stuck (an
    allocation failing, say), so the log is read first; without a known line it is a
    timeout or, if it exited, a crash.
    """
    text, shown = log_tail.lower(), failure_lines(log_tail)
    named = (why for why, markers in _START_FAILURES if any(marker in text for marker in markers))
    return ServerStartError(message, shown,
                            failure_class=next(named, "timeout" if timed_out else "crash"))


def weights_spilled(log_text: str) -> bool:
    """True when a llama-server log shows a model whose layers were not all offloaded to GPU.

    Looks for llama.cpp's ``load_tensors: offloaded N/M layers to GPU`` lines (one per model
    loaded, so the draft model counts too). A CPU-only build prints none: False.
    """
    return any(int(done) < int(total) for done, total in _OFFLOADED.findall(log_text))


# What the farm's servers log at trace verbosity (``--log-verbosity 4``, see LlamaServer.argv)
# from llama.cpp's common/speculative.cpp. At start, one line per speculative method:
#   SPC_TRC("adding speculative implementation 'ngram-simple'\n")
# and, when a request finishes (common_speculative_print_stats, called by the slot's
# print_timings), one line per method with its counters and durations since the server
# started (begin, generate the draft, accept), e.g. from b11434:
#   spec common_specu: statistics     ngram-simple: #calls(b,g,a) =    2     65      1,
#   #gen drafts =      1, #acc drafts =     1, #gen tokens =     41, #acc tokens =     3,
#   #mean acc len = 4.00, #acc rate/pos = (1.000, 1.000, 1.000), dur(b,g,a) = 0.001, 0.145,
#   0.005 ms
# (one line; the mean and rates only once something was accepted).
_SPEC_METHOD = re.compile(r"adding speculative implementation '([\w-]+)'")
_SPEC_STATS = re.compile(
    r"statistics\s+(?P<method>[\w-]+): #calls\(b,g,a\) =\s*\d+\s+(?P<draft_calls>\d+)\s+"
    r"(?P<accept_calls>\d+), #gen drafts =\s*(?P<gen_drafts>\d+), "
    r"#acc drafts =\s*(?P<acc_drafts>\d+), #gen tokens =\s*(?P<gen_tokens>\d+), "
    r"#acc tokens =\s*(?P<acc_tokens>\d+)[^\n]*?, dur\(b,g,a\) = (?P<begin_ms>[\d.]+), "
    r"(?P<draft_ms>[\d.]+), (?P<accept_ms>[\d.]+) ms")


@dataclass(frozen=True)
class SpecStats:
    """llama-server's speculative statistics: since the server started, or (the difference
    of two prints) of one request.

    ``draft_calls`` counts the times the method was asked for a draft, ``gen_drafts`` those
    it proposed one; ``accept_calls`` the verification steps of its drafts, ``acc_drafts``
    those that kept at least one token. ``begin_ms`` is spent when a request's prompt is
    in, ``draft_ms`` drafting, ``accept_ms`` taking the verdict.
    """

    draft_calls: int = 0
    accept_calls: int = 0
    gen_drafts: int = 0
    acc_drafts: int = 0
    gen_tokens: int = 0
    acc_tokens: int = 0
    begin_ms: float = 0.0
    draft_ms: float = 0.0
    accept_ms: float = 0.0

    def _combine(self, other: SpecStats, sign: int) -> SpecStats:
        # Durations are logged to the microsecond: sums and differences keep that resolution.
        values = {f.name: getattr(self, f.name) + sign * getattr(other, f.name)
                  for f in fields(self)}
        return SpecStats(**{name: round(value, 3) if name.endswith("_ms") else value
                            for name, value in values.items()})

    def __add__(self, other: SpecStats) -> SpecStats:
        return self._combine(other, 1)

    def __sub__(self, other: SpecStats) -> SpecStats:
        return self._combine(other, -1)


def spec_methods(log_text: str) -> list[str]:
    """The speculative methods a server set up, in its order (none for a plain server)."""
    return _SPEC_METHOD.findall(log_text)


def spec_stats_prints(log_text: str, prints: list[dict[str, SpecStats]] | None = None
                      ) -> list[dict[str, SpecStats]]:
    """Every print of the speculative statistics in a server's log, in order: per method,
    cumulative since the server started. A print ends where a method comes again.
    ``prints`` are those of the log's text before ``log_text``, extended in place."""
    prints = [] if prints is None else prints
    for match in _SPEC_STATS.finditer(log_text):
        if not prints or match["method"] in prints[-1]:
            prints.append({})
        prints[-1][match["method"]] = SpecStats(
            draft_calls=int(match["draft_calls"]), accept_calls=int(match["accept_calls"]),
            gen_drafts=int(match["gen_drafts"]), acc_drafts=int(match["acc_drafts"]),
            gen_tokens=int(match["gen_tokens"]), acc_tokens=int(match["acc_tokens"]),
            begin_ms=float(match["begin_ms"]), draft_ms=float(match["draft_ms"]),
            accept_ms=float(match["accept_ms"]))
    return prints


class SpecStatsLog:
    """The speculative statistics one server prints to its log, request by request.

    ``start`` is where that server's output begins in the log (a retried block appends to
    the same file). llama.cpp logs from a thread of its own, so a print can land a moment
    after the response it follows: ``request`` waits up to ``wait`` s for it. The log is
    read once, as it grows: each time its whole lines that came since, READ_BYTES at most
    (a longer line is no print, and is passed over).
    """

    def __init__(self, path: Path, start: int, *, wait: float = 2.0) -> None:
        self.path, self.start, self.wait = path, start, wait
        self._at = start  # what was read: whole lines up to here
        self._methods: set[str] = set()
        self._prints: list[dict[str, SpecStats]] = []

    def _read(self) -> None:
        """Take in the log's whole lines since the last read."""
        while True:
            new = read_file(self.path, READ_BYTES, what="the server's log", offset=self._at,
                            error=BenchmarkError, cut=True)
            lines = new[:new.rfind(b"\n") + 1] or (new if len(new) == READ_BYTES else b"")
            if not lines:
                return
            self._at += len(lines)
            text = lines.decode("utf-8", errors="replace")
            self._methods.update(spec_methods(text))
            spec_stats_prints(text, self._prints)
            if len(new) < READ_BYTES:
                return

    def request(self, index: int, count: int = 1) -> SpecStats | None:
        """The statistics of the server's ``index``-th finished request (0 is the first),
        summed over its methods, or of the ``count`` requests from it on (simultaneous
        streams: the server's statistics are shared by its slots, so only the whole group's
        are known); None for a server that does not speculate, or when a print never came."""
        last = index + count - 1
        deadline = time.monotonic() + self.wait
        while True:
            self._read()
            methods, prints = self._methods, self._prints
            if not methods:
                return None
            if len(prints) > last and set(prints[last]) == methods:
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
        before = sum(prints[index - 1].values(), SpecStats()) if index else SpecStats()
        return sum(prints[last].values(), SpecStats()) - before


# What llama.cpp logs of each context's memory at start (b11434), e.g.
#   llama_kv_cache: size =    0.25 MiB (   256 cells,   1 layers,  1/1 seqs), K (f16): ...
#   llama_memory_recurrent: size =    0.40 MiB (     1 cells,   2 layers,  1 seqs ...
#   sched_reserve:        CPU compute buffer size =     3.26 MiB
#   load_tensors:   CPU_Mapped model buffer size =     8.16 MiB
# The target's context comes first; a speculative draft context (common/speculative.cpp:
# "creating MTP draft context", or "loading draft model" for a separate draft model)
# follows it, with its own lines.
_CACHE_SIZE = re.compile(r"(?:llama_kv_cache|llama_memory_recurrent): size =\s*([\d.]+) MiB")
_BUFFER_SIZE = re.compile(r"(\S+)\s+(compute|model) buffer size =\s*([\d.]+) MiB")
_DRAFT_CONTEXT = re.compile(r"creating MTP draft context|loading draft model")


@dataclass(frozen=True)
class ContextMemory:
    """MiB the server's contexts took, as its log says: the target context's caches (KV
    and recurrent state) and the whole draft context (its caches, compute buffers and any
    weights of its own; 0 without speculation by a draft context)."""

    kv_mib: float
    draft_context_mib: float


def _section_mib(text: str, caches_only: bool) -> float:
    caches = sum(float(size) for size in _CACHE_SIZE.findall(text))
    if caches_only:
        return caches
    # A buffer may be reserved more than once (the scheduler re-reserves): the largest of
    # each device and kind is what it holds.
    buffers: dict[tuple[str, str], float] = {}
    for device, kind, size in _BUFFER_SIZE.findall(text):
        buffers[(device, kind)] = max(buffers.get((device, kind), 0.0), float(size))
    return caches + sum(buffers.values())


def context_memory(log_text: str) -> ContextMemory | None:
    """The running server's ``ContextMemory`` from its part of the log (None when the log
    names no cache: an older build, or a log cut short)."""
    if not _CACHE_SIZE.search(log_text):
        return None
    draft = _DRAFT_CONTEXT.search(log_text)
    target = log_text if draft is None else log_text[:draft.start()]
    return ContextMemory(
        kv_mib=_section_mib(target, caches_only=True),
        draft_context_mib=0.0 if draft is None else _section_mib(log_text[draft.start():],
                                                                 caches_only=False))
