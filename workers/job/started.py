"""What a block starts beside its requests and must stop again (its llama-server, its
telemetry sampler), held by a ``with`` block: started on entering, stopped on leaving,
however the block is left."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class Started(ABC):
    """Something a block starts and stops: ``with it:`` calls ``start`` and, however the
    block ends, ``stop``."""

    @abstractmethod
    def start(self) -> None:
        """Start it."""

    @abstractmethod
    def stop(self) -> None:
        """Stop it and release what it holds."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
