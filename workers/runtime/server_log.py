"""What llama-server's log says: why a start failed, and whether the weights spilled.

Every line of llama-server's the farm reacts to is matched here, beside the function that
reads it, so a message reworded upstream is a change to one place.
"""

from __future__ import annotations

import re
from pathlib import Path

from farm.errors import (
    ServerBadFlag,
    ServerModelUnreadable,
    ServerNoMtpHeads,
    ServerOutOfMemory,
    ServerStartError,
    ServerStartTimeout,
    ServerUnsupportedByBuild,
)

# The port free_port() handed out was taken before the server bound it.
_BIND_FAILURES = ("couldn't bind", "address already in use", "failed to bind")
# Why a start failed, in lower case, most specific first (first match wins): llama.cpp
# names a speculative or cache type it lacks inside its generic "error while handling
# argument" line.
_START_FAILURES: tuple[tuple[type[ServerStartError], tuple[str, ...]], ...] = (
    (ServerNoMtpHeads, ("doesn't contain mtp layers", "failed to create mtp context")),
    (ServerUnsupportedByBuild, ("unknown speculative type", "unsupported cache type",
                                "the argument has been removed")),
    (ServerBadFlag, ("invalid argument", "error while handling argument")),
    (ServerOutOfMemory, ("out of memory", "failed to allocate", "cudamalloc failed",
                         "unable to allocate")),
    (ServerModelUnreadable, ("failed to open", "no such file", "failed to load model",
                             "error loading model")),
)
# The line llama.cpp's llama_model::load_tensors logs on a build with GPU offload support:
#   LLAMA_LOG_INFO("%s: offloaded %d/%d layers to GPU\n", __func__, ...)
# e.g. "load_tensors: offloaded 30/33 layers to GPU". CPU-only builds never print it.
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a server log ("" when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def lost_port_race(log_tail: str) -> bool:
    """Whether the server exited because another process took its port first."""
    text = log_tail.lower()
    return any(marker in text for marker in _BIND_FAILURES)


def start_error(message: str, log_tail: str, *, timed_out: bool = False) -> ServerStartError:
    """The error for a failed start, of the class the log names.

    A server still starting at the deadline may have logged why it was stuck (an
    allocation failing, say), so the log is read first; without a known line it is a
    timeout or, if it exited, a crash.
    """
    text = log_tail.lower()
    for error, markers in _START_FAILURES:
        if any(marker in text for marker in markers):
            return error(message, log_tail)
    return (ServerStartTimeout if timed_out else ServerStartError)(message, log_tail)


def weights_spilled(log_text: str) -> bool:
    """True when a llama-server log shows a model whose layers were not all offloaded to GPU.

    Looks for llama.cpp's ``load_tensors: offloaded N/M layers to GPU`` lines (one per model
    loaded, so the draft model counts too). A CPU-only build prints none: False.
    """
    return any(int(done) < int(total) for done, total in _OFFLOADED.findall(log_text))
