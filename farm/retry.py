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

# Connection refused or dropped, server shutting down, broker unreachable. Not: constraint
# violations or programming errors, which no retry mends.
TRANSIENT: tuple[type[BaseException], ...] = (
    sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, BrokerError,
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError)

# The same, or a broker failure the farm already turned into its own error.
OUTAGE: tuple[type[BaseException], ...] = (ServiceUnavailable, *TRANSIENT)

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 10.0


def retrying(call: Callable[[], T], *, within: float, what: str, log: logging.Logger,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, tried again on transient errors with doubling pauses for ``within``
    seconds; then the last error is raised."""
    deadline = time.monotonic() + within
    pause, failing = FIRST_PAUSE, False
    while True:
        try:
            result = call()
        except TRANSIENT as exc:
            if time.monotonic() + pause > deadline:
                log.warning("%s: still failing after %.0f s, giving up: %s", what, within,
                            first_line(exc))
                raise
            if not failing:
                log.warning("%s failed, retrying for up to %.0f s: %s", what, within,
                            first_line(exc))
                failing = True
            sleep(pause)
            pause = min(2 * pause, LONGEST_PAUSE)
            continue
        if failing:
            log.warning("%s: recovered", what)
        return result
