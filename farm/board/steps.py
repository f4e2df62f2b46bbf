"""The steps ``farm board`` takes on a board's store, each opening it first (never the
farm's own store): bundles added, a key trusted, and the board's tables read with every
pending job recomputed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine

from farm.board.add import Added
from farm.errors import ConfigError
from farm.settings import Settings


@contextmanager
def _board_store(settings: Settings, url: str | None) -> Iterator[Engine]:
    """The board's store at the current schema (the farm's migrations): a SQLite file made
    or migrated here, a PostgreSQL one upgraded with `farm db upgrade --url`. Never the
    farm's own store: a board's jobs come from strangers and must sit where no worker
    looks for work."""
    from sqlalchemy.engine import make_url

    from farm.store.db import at_schema_head, connected, normalise_url

    url = url or f"sqlite:///{settings.data_dir / 'board.db'}"
    if normalise_url(url) == normalise_url(settings.database_url):
        raise ConfigError("--board: that is the farm's own store (FARM_DATABASE_URL); a "
                          "board keeps strangers' jobs in a store of its own: give another "
                          "database, or leave --board out for board.db in the data dir")
    with connected(url) as engine:
        at_schema_head(engine, migrate=make_url(engine.url).get_backend_name() == "sqlite")
        yield engine


def add_bundles(settings: Settings, url: str | None, bundles: tuple[Path, ...],
                require_signed: bool) -> Iterator[tuple[Path, Added]]:
    """Each bundle checked and its new jobs and runs taken onto the board at ``url``, in
    turn (a bundle that fails any check changes nothing)."""
    from farm.board.add import add_bundle

    with _board_store(settings, url) as engine:
        for path in bundles:
            yield path, add_bundle(engine, path, require_signed)


def trust_key(settings: Settings, url: str | None, public_key: Path, name: str) -> str:
    """``public_key`` known to the board at ``url`` as ``name``; the line saying so."""
    from farm.board.trust import trust

    with _board_store(settings, url) as engine:
        return trust(engine, public_key, name)


@dataclass(frozen=True)
class BoardTables:
    """A board's tables: per model x GPU x backend x setting its figures, the best setting
    of each model and GPU, the pooled predictions, the bundles behind them."""

    rows: pd.DataFrame
    best: pd.DataFrame
    bundles: pd.DataFrame
    predictions: pd.DataFrame


def board_tables(settings: Settings, url: str | None) -> BoardTables:
    """The board at ``url``, every pending job recomputed first."""
    from farm.board.add import pending, recompute
    from farm.board.predict import machine_predictions
    from farm.board.view import board_bundles, board_jobs
    from farm.stats.board import best_settings, board_rows, pool_predictions

    with _board_store(settings, url) as engine:
        recompute(engine, pending(engine))
        jobs = board_jobs(engine)
        predictions = pool_predictions(machine_predictions(engine, jobs))
        rows = board_rows(jobs[jobs["kind"] == "variant"], predictions)
        return BoardTables(rows=rows, best=best_settings(rows, predictions),
                           bundles=board_bundles(engine), predictions=predictions)
