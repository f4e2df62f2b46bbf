"""Whole reports as they were printed, kept in the store for the next report of the same
jobs (PostgreSQL only).

``farm report --format json`` prints every job's row; where nothing it is printed from has
changed since the last report of the same scope (every campaign, or one), it prints that
report's bytes again without reading a row: a store of 20,000 jobs in about 0.6 s instead
of 1.4-2 s (tests/bench/bench_fleet_scale.py). What a report is printed from is its
``stamp``: the report's version (``farm.columns.REPORT_VERSION``, which the kept bytes
carry too), the farm's own code (every file of the package, by content) and, from one SQL
aggregate, each job's id, campaign and keyed columns (``farm.results.rows.KEYED``: what
its kept row is keyed by), when it was last claimed and, for a running or lost job, how
many runs it has. The stamp is read before the rows, so a report printed from
rows that changed meanwhile is kept under the older stamp and never printed again.

SQLite stores keep per-job rows only (``farm.results.rows``). A role that may not write
(a worker's, ``farm.store.roles``) prints without keeping; one that may not read the table,
or a standby (it is unlogged), prints without it.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from farm.columns import REPORT_VERSION
from farm.results.rows import KEYED
from farm.results.sql import jobs_stamp_sql
from farm.store.campaigns import campaign_id

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

# Larger reports are printed and not kept (a bytea holds up to 1 GB).
MAX_KEPT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Printed:
    """A report's scope (``all`` or ``campaign:ID``), the stamp of what it is printed from
    now, and the bytes a report printed at that stamp (None: none kept)."""

    scope: str
    campaign_id: int | None
    stamp: str
    body: bytes | None


def printed_report(engine: Engine, campaign: str | None) -> Printed | None:
    """The report of ``campaign`` (None: of every campaign) as kept at today's stamp, or
    its scope and stamp to keep one at; None on a store that keeps no reports (SQLite)."""
    if engine.dialect.name != "postgresql":
        return None
    import psycopg  # the engine's driver, loaded by now

    jobs, params, scope, found_id = "1 = 1", {}, "all", None
    if campaign is not None:
        found_id = campaign_id(engine, campaign)
        jobs, params, scope = "job.campaign_id = :campaign_id", {"campaign_id": found_id}, \
            f"campaign:{found_id}"
    with engine.connect() as connection:
        connection.execute(text("SET LOCAL TIME ZONE 'UTC'"))  # one stamp in every zone
        count, hashes = connection.execute(text(jobs_stamp_sql(jobs, KEYED)), params).one()
        stamp = f"v{REPORT_VERSION}:{_code_stamp()}:{count}:{hashes}"
        # Read as binary: a bytea in text form comes as hex, twice its size, parsed in Python.
        driver = cast("psycopg.Connection[Any]", connection.connection.driver_connection)
        try:
            kept = driver.execute("SELECT body FROM report_text WHERE scope = %s AND "
                                  "stamp = %s", (scope, stamp), binary=True).fetchone()
        except psycopg.Error as exc:  # a standby (the table is unlogged), a narrow role
            log.debug("no printed report read: %s", exc)
            kept = None
    return Printed(scope, found_id, stamp, None if kept is None else bytes(kept[0]))


def keep_printed(engine: Engine, printed: Printed, body: bytes) -> None:
    """Keep ``body``, the report just printed for ``printed``'s scope at its stamp, in
    place of the one kept before; without, when it is too large or this role may not
    write."""
    if len(body) > MAX_KEPT_BYTES:
        return
    values = {"scope": printed.scope, "campaign_id": printed.campaign_id,
              "stamp": printed.stamp, "body": body}
    try:
        with engine.begin() as connection:
            connection.execute(_KEEP, values)
    except DBAPIError as exc:
        log.debug("printed report not kept: %s", exc)


_KEEP = text("INSERT INTO report_text (scope, campaign_id, stamp, body) "
             "VALUES (:scope, :campaign_id, :stamp, :body) ON CONFLICT (scope) DO UPDATE "
             "SET campaign_id = excluded.campaign_id, stamp = excluded.stamp, "
             "body = excluded.body, made_at = now()")


@cache
def _code_stamp() -> str:
    """The farm package's files as installed, by path and content (not modification time,
    which packagers set alike): a report printed by other code is printed again."""
    package = Path(__file__).resolve().parent.parent
    seen = hashlib.blake2b(digest_size=8)
    for path in sorted(package.rglob("*.py")):
        seen.update(f"{path.relative_to(package)}\0".encode())
        seen.update(hashlib.blake2b(path.read_bytes(), digest_size=8).digest())
    return seen.hexdigest()
