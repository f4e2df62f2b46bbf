"""The ``farm`` command, one module per noun: running, results, database, fleet, builds, peers.

Exit codes: 0 success, 2 bad input, 1 runtime failure, 130 interrupted.
"""

from __future__ import annotations

from farm.cli import builds, database, fleet, peers, results, running
from farm.cli.base import cli

__all__ = ["builds", "cli", "database", "fleet", "main", "peers", "results", "running"]


def main() -> None:
    """The ``farm`` console script: named ``farm`` in help and errors however it was started."""
    cli(prog_name="farm")
