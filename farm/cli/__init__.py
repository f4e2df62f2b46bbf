"""The ``farm`` command: one flat group of verbs (``farm run``, ``farm report``; ``farm db``
and ``farm board`` have subcommands), registered on ``base.cli`` by modules that each hold
one topic's verbs: start (the first hour), running, results, database, fleet, slurm, builds,
peers, track, bisect and tune (their workflows in ``farm.workflows``), board (``farm share``
and the board).
What the verbs print or write lives beside them (show, show_history, show_peers, dry_run,
progress and its arithmetic in forecast, output); every command's examples in ``helptext``.

Exit codes: 0 success, 2 bad input, 1 runtime failure, 3 a regression found by
``--fail-on-regression`` (``farm compare``, ``farm history``), 130 interrupted.
"""

from __future__ import annotations

from farm.cli import (
    bisect,
    board,
    builds,
    database,
    fleet,
    peers,
    results,
    running,
    slurm,
    start,
    track,
    tune,
)
from farm.cli.base import cli
from farm.cli.helptext import teach

__all__ = ["bisect", "board", "builds", "cli", "database", "fleet", "main", "peers", "results",
           "running", "slurm", "start", "track", "tune"]

teach(cli)


def main() -> None:
    """The ``farm`` console script: named ``farm`` in help and errors however it was started."""
    cli(prog_name="farm")
