"""Why a job failed, as a class that reports group by and retries key on."""

from __future__ import annotations

from farm.errors import (
    BenchmarkError,
    ConfigError,
    FarmError,
    ServerStartError,
    UnsupportedByBuild,
)

# What llama-server prints, checked in this order (first match wins).
_LOG_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no_mtp_heads", ("doesn't contain mtp layers", "failed to create mtp context")),
    ("unsupported_by_build", ("unknown speculative type", "unsupported cache type",
                              "the argument has been removed")),
    ("bad_flag", ("invalid argument", "error while handling argument")),
    ("out_of_memory", ("out of memory", "failed to allocate", "cudamalloc failed",
                       "unable to allocate")),
    ("model_unreadable", ("failed to open", "no such file", "failed to load model",
                          "error loading model")),
)
# Classes that can succeed when tried again; the others fail at once.
RETRYABLE = frozenset({"timeout", "crash", "request_failed"})


def classify(error: FarmError) -> str:
    """The failure class of ``error``, from its type, exit code and the server's log."""
    if isinstance(error, UnsupportedByBuild):
        return "unsupported_by_build"
    if isinstance(error, ConfigError):
        text = str(error).lower()
        return "no_mtp_heads" if "mtp heads" in text else "config"
    if isinstance(error, ServerStartError):
        tail = error.log_tail.lower()
        for name, markers in _LOG_MARKERS:
            if any(marker in tail for marker in markers):
                return name
        if error.timed_out:
            return "timeout"
        return "crash"
    if isinstance(error, BenchmarkError):
        return "request_failed"
    return "error"
