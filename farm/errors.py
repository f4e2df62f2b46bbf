"""Every error a user can meet, what the CLI does with it, and its failure class.

    FarmError                     base; the CLI prints its message, never a traceback
    ├── ConfigError               bad input (matrix, flags, paths, settings): exit 2
    │   ├── UnsupportedByBuild        a flag or value the chosen llama-server does not accept
    │   ├── NoMtpHeads                an arm drafts with MTP heads the model does not have
    │   ├── ProcessNotStarted         llama-server could not even be executed (its argv, its file)
    │   └── BundleError               a shared bundle a board refuses (farm.board.verify)
    └── RuntimeFarmError          something failed while doing the work: exit 1
        ├── ServiceUnavailable        the database or the broker does not answer
        ├── ServerStartError          llama-server did not start; its failure class says why:
        │                                 crash (it exited), timeout (no /health in time),
        │                                 bad_flag, unsupported_by_build, no_mtp_heads,
        │                                 out_of_memory, model_unreadable
        ├── BuildFailed               a job's llama.cpp commit did not compile (its last lines)
        ├── Unavailable               this node cannot get what a job needs (now): handed back
        │   ├── BuildUnavailable          ... its build (source not allowed, fetch, disk)
        │   └── ModelUnavailable          ... its model (offline, no space, no token for a
        │                                 gated repository, a wrong hash)
        ├── BenchmarkError            a request failed or returned something unusable
        ├── NodeBusy                  other work on the node, and the job refuses to run beside it
        ├── InternalError             a failure nobody foresaw (a worker's job, logged whole)
        └── JobsFailed                some jobs of a campaign failed (the rest are stored)

Each class names its ``failure_class``: the string stored with a failed job, grouped by in
reports and keyed on by retries, so these strings never change. The code that knows why
something failed raises the matching class, or for a server that did not start the failure
class its own words name (read in ``workers/job/runtime/server_log.py``); nothing downstream
parses messages.
"""

from __future__ import annotations

from typing import Literal


class FarmError(Exception):
    """Base of all errors specfarm reports to a user."""

    exit_code = 1
    failure_class = "error"


class ConfigError(FarmError):
    """The user's input is wrong; the message says where and how to fix it.

    ``role`` names the arm ("baseline" or "variant") a job check failed on, so that the
    caller can point at the right place of the matrix.
    """

    exit_code = 2
    failure_class = "config"

    def __init__(self, message: str, *, role: str | None = None) -> None:
        super().__init__(message)
        self.role = role


class UnsupportedByBuild(ConfigError):
    """The llama-server build rejects a flag or value the matrix asks for."""

    failure_class = "unsupported_by_build"


class NoMtpHeads(ConfigError):
    """An arm asks for MTP drafting and the model's GGUF has no MTP layers."""

    failure_class = "no_mtp_heads"


class ProcessNotStarted(ConfigError):
    """llama-server could not be executed: its binary or its command line is at fault, so
    every attempt would fail the same."""


class RuntimeFarmError(FarmError):
    """The work failed for a reason outside the user's input."""


class ServiceUnavailable(RuntimeFarmError):
    """The database or the broker does not answer; the message names which and what to check."""


# Why llama-server did not start, as its log names it (``workers.job.runtime.server_log``):
# it exited for no reason the log names, never answered /health in time, refused a flag or
# value, lacks a type or flag in this build, found no MTP layers in the model it drafts
# with, could not allocate the model or its context, or could not open or load the model.
StartFailure = Literal["crash", "timeout", "bad_flag", "unsupported_by_build", "no_mtp_heads",
                       "out_of_memory", "model_unreadable"]


class ServerStartError(RuntimeFarmError):
    """llama-server did not start; ``failure_class`` says why (``StartFailure``)."""

    failure_class = "crash"

    def __init__(self, message: str, log_tail: str = "", *,
                 failure_class: StartFailure = "crash") -> None:
        super().__init__(message + (f"\n--- server log (its failure lines) ---\n{log_tail}"
                                    if log_tail else ""))
        self.log_tail = log_tail
        self.failure_class = failure_class


class BuildFailed(RuntimeFarmError):
    """The sources did not configure or compile: every node would fail the same."""

    failure_class = "build_failed"


class Unavailable(RuntimeFarmError):
    """This node cannot get what the job needs: another node, or this one later, may; a
    worker hands the job back (refuses it), and the job fails only once every live worker
    of its class refused it, with their reasons. ``cannot`` says what, for the log.

    ``transient``: what may pass by itself (a Hub answering 5xx or 429, a source or Hub
    that does not answer, a commit a mirror does not have yet): the worker tries again
    within the job, then hands the job back for later without refusing it
    (``workers.fleet.task``)."""

    cannot = "run it"

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class BuildUnavailable(Unavailable):
    """This node cannot make the build (source not allowed, fetch failed, disk full, no
    toolkit): another node, or this one later, may; the job is handed back, not failed."""

    failure_class = "build_unavailable"
    cannot = "make its build"


class ModelUnavailable(Unavailable):
    """This node cannot get a job's model: it is not here, and downloading it failed or
    cannot start (offline, too little disk, a gated repository without a token, a file
    whose sha256 is not the source's). Nothing half-written is left where jobs read
    models. Another node may have it or reach it: the job is handed back, not failed."""

    failure_class = "model_unavailable"
    cannot = "get its model"


class BenchmarkError(RuntimeFarmError):
    """A generation request failed or its answer lacked the server's timings."""

    failure_class = "request_failed"


class NodeBusy(RuntimeFarmError):
    """Other work on the node, under ``busy-node: refuse``: the block was not run."""

    failure_class = "node_busy"


class InternalError(RuntimeFarmError):
    """Something failed that no code expected; the worker logs its traceback."""

    failure_class = "internal"


class JobsFailed(RuntimeFarmError):
    """Some jobs of a campaign failed; the others' results are stored."""

    def __init__(self, message: str, campaign: str) -> None:
        super().__init__(message)
        self.campaign = campaign


class SelftestFailed(RuntimeFarmError):
    """A known truth did not hold on this node (``farm selftest``): exit 1."""


def first_line(error: BaseException | None) -> str:
    """The gist of an error: drivers explain over several lines ("Is the server running")."""
    return next(iter(str(error).strip().splitlines()), type(error).__name__)


# Failure classes that can succeed when tried again (a slow start, a crash, a dropped
# request); the others fail at once.
RETRYABLE = frozenset({"timeout", ServerStartError.failure_class,
                       BenchmarkError.failure_class, InternalError.failure_class,
                       NodeBusy.failure_class})
