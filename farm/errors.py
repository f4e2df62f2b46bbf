"""Every error a user can meet, and what the CLI does with it.

    FarmError                 base; the CLI prints its message, never a traceback
    ├── ConfigError           bad input (matrix, flags, paths, settings): exit 2
    │   └── UnsupportedByBuild    a flag or value the chosen llama-server does not accept
    └── RuntimeFarmError      something failed while doing the work: exit 1
        ├── ServiceUnavailable    the database or the broker does not answer
        ├── ServerStartError      llama-server exited or never became healthy
        ├── BenchmarkError        a request failed or returned something unusable
        └── JobsFailed            some jobs of a campaign failed (the rest are stored)

Retries key on the class: a ConfigError can never succeed on retry.
"""

from __future__ import annotations


class FarmError(Exception):
    """Base of all errors specfarm reports to a user."""

    exit_code = 1


class ConfigError(FarmError):
    """The user's input is wrong; the message says where and how to fix it.

    ``role`` names the arm ("baseline" or "variant") a job check failed on, so that the
    caller can point at the right place of the matrix.
    """

    exit_code = 2

    def __init__(self, message: str, *, role: str | None = None) -> None:
        super().__init__(message)
        self.role = role


class UnsupportedByBuild(ConfigError):
    """The llama-server build rejects a flag or value the matrix asks for."""


class RuntimeFarmError(FarmError):
    """The work failed for a reason outside the user's input."""


class ServiceUnavailable(RuntimeFarmError):
    """The database or the broker does not answer; the message names which and what to check."""


class ServerStartError(RuntimeFarmError):
    """llama-server exited early or did not answer /health in time."""

    def __init__(self, message: str, log_tail: str = "", *, timed_out: bool = False) -> None:
        super().__init__(message + (f"\n--- server log (tail) ---\n{log_tail}" if log_tail else ""))
        self.log_tail = log_tail
        self.timed_out = timed_out


class BenchmarkError(RuntimeFarmError):
    """A generation request failed or its answer lacked the server's timings."""


class JobsFailed(RuntimeFarmError):
    """Some jobs of a campaign failed; the others' results are stored."""

    def __init__(self, message: str, campaign: str) -> None:
        super().__init__(message)
        self.campaign = campaign


def first_line(error: BaseException | None) -> str:
    """The gist of an error: drivers explain over several lines ("Is the server running")."""
    return next(iter(str(error).strip().splitlines()), type(error).__name__)
