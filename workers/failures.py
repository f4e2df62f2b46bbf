"""Why a job failed, as a class that reports group by and retries key on."""

from __future__ import annotations

from farm.errors import BenchmarkError, FarmError, ServerStartError, ServerStartTimeout

# Failure classes that can succeed when tried again (a slow start, a crash, a dropped
# request); the others fail at once.
RETRYABLE = frozenset({ServerStartTimeout.failure_class, ServerStartError.failure_class,
                       BenchmarkError.failure_class})


def classify(error: FarmError) -> str:
    """The failure class of ``error``, as its class declares it (see ``farm.errors``)."""
    return error.failure_class
