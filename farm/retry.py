"""Transient service errors, and calls retried through them with backoff.

A database restart or a broker restart must cost the fleet a pause, not a job: calls that
fail because a service is unreachable are tried again until a deadline, and the log gets
one line when a call starts failing and one when it recovers, not one per attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis.exceptions
import sqlalchemy.exc
from kombu.exceptions import OperationalError as BrokerError

from farm.errors import ServiceUnavailable, first_line

T = TypeVar("T")

# The drivers' errors for a database or a broker that does not answer: connection refused
# or dropped, server shutting down. Not: constraint violations or programming errors, which
# no retry mends. One table: retries, and the operator's one-line message
# (farm.unreachable.service_error), read it.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (sqlalchemy.exc.OperationalError,
                                                    sqlalchemy.exc.InterfaceError)
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    BrokerError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
TRANSIENT: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, *BROKER_ERRORS,
                                              ConnectionError)

# The same, or a broker failure the farm already turned into its own error.
OUTAGE: tuple[type[BaseException], ...] = (ServiceUnavailable, *TRANSIENT)

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 10.0


class FailingLog:
    """The log of something tried again and again (a call, a renewal, a heartbeat): one
    line when it starts failing, ``"<failing>: <reason>"``, and one when it works again,
    ``recovered``; nothing per attempt."""

    def __init__(self, log: logging.Logger, failing: str, recovered: str) -> None:
        self.log, self.failing_text, self.recovered_text = log, failing, recovered
        self.failing: str | None = None  # while failing: the last failure's gist

    def failed(self, error: BaseException) -> None:
        """An attempt failed: logged if it is the first since the last success."""
        if self.failing is None:
            self.log.warning("%s: %s", self.failing_text, first_line(error))
        self.failing = first_line(error)

    def succeeded(self) -> None:
        """An attempt worked: logged if the ones before it failed."""
        if self.failing is not None:
            self.log.warning("%s", self.recovered_text)
        self.failing = None


def retrying(call: Callable[[], T], *, within: float, what: str, log: logging.Logger,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, tried again on transient errors with doubling pauses for ``within``
    seconds; then the last error is raised."""
    deadline = time.monotonic() + within
    pause = FIRST_PAUSE
    trouble = FailingLog(log, f"{what} failed, retrying for up to {within:.0f} s",
                         f"{what}: recovered")
    while True:
        try:
            result = call()
        except TRANSIENT as exc:
            if time.monotonic() + pause > deadline:
                log.warning("%s: still failing after %.0f s, giving up: %s", what, within,
                            first_line(exc))
                raise
            trouble.failed(exc)
            sleep(pause)
            pause = min(2 * pause, LONGEST_PAUSE)
            continue
        trouble.succeeded()
        return result
