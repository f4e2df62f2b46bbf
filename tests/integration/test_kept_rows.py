"""A done job's report row is kept by the first report that works it out, and later reports
print it as it is (``farm.results.rows.report_rows``): the same rows and the same bytes
as working it out again, never a row of an attempt or a code version it was not kept at,
and nothing kept (nothing failing) where the report may not write."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text

from farm.report.headline import with_headlines
from farm.report.text import rows_to_json
from farm.results.rows import job_rows, report_rows
from farm.store.db import make_engine
from tests.helpers import run_cli
from tests.integration.test_golden_reports import CLI_ENV, load_fixture


@pytest.fixture
def store(url: str) -> Iterator[Engine]:
    """The summaries fixture (every summary shape ever stored), upgraded, nothing kept."""
    load_fixture(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def _kept(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(text("SELECT count(*) FROM job "
                                          "WHERE report_row IS NOT NULL")) or 0)


def _settled(engine: Engine) -> int:
    """The jobs whose rows a report keeps: all but the running and lost ones."""
    with engine.connect() as connection:
        return int(connection.scalar(text(
            "SELECT count(*) FROM job WHERE state NOT IN ('running', 'lost')")) or 0)


def _printed(engine: Engine) -> str:
    found = report_rows(engine, None, kept=True)
    return rows_to_json(with_headlines(found.rows), found.kept)


def test_kept_rows_print_as_the_rows_worked_out(store: Engine) -> None:
    assert _kept(store) == 0
    made = job_rows(store, None)
    assert _kept(store) == _settled(store) > 0
    found = report_rows(store, None, kept=True)
    assert found.kept is not None
    assert sum(kept is not None for kept in found.kept) == _settled(store)
    assert _printed(store) == rows_to_json(with_headlines(made))
    assert job_rows(store, None) == made  # kept rows parsed, the best-of marks added again


def test_the_cli_prints_the_same_bytes_before_and_after_keeping(store: Engine) -> None:
    env = {**CLI_ENV, "FARM_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    first = run_cli("report", "--all", "--format", "json", env=env)
    assert first.exit_code == 0, first.output
    assert _kept(store) == _settled(store)
    second = run_cli("report", "--all", "--format", "json", env=env)
    assert second.exit_code == 0 and second.output == first.output


def _first_done(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(text("SELECT min(id) FROM job WHERE state = 'done'")))


def _kept_of(engine: Engine, job_id: int) -> str | None:
    found = report_rows(engine, None, kept=True)
    with engine.connect() as connection:
        ids = list(connection.scalars(text(
            "SELECT job.id FROM job JOIN campaign c ON c.id = job.campaign_id "
            "ORDER BY c.id, job.id")))
    assert found.kept is not None
    return found.kept[ids.index(job_id)]


@pytest.mark.parametrize("change", [
    "UPDATE job SET attempt = attempt + 1 WHERE id = :id",  # done again at a later attempt
    "UPDATE job SET state = 'queued', error = 'handed back' WHERE id = :id",  # queued again
    "UPDATE job SET state = 'running' WHERE id = :id",  # running again: never kept
    # kept by another version of the row's code
    "UPDATE job SET report_head = replace(report_head, '\"key\":\"', '\"key\":\"0') "
    "WHERE id = :id",
    "UPDATE job SET report_head = replace(report_head, ':', '-') WHERE id = :id",  # a head
    # edited by hand
    "UPDATE job SET report_row = replace(report_row, '\"best_of\"\\:null', '\"best_of\"\\:9') "
    "WHERE id = :id",  # a row edited by hand
], ids=["attempt", "queued", "running", "version", "head", "row"])
def test_a_row_kept_for_other_job_columns_or_code_is_worked_out_again(
        store: Engine, change: str) -> None:
    before = job_rows(store, None)
    job_id = _first_done(store)
    assert _kept_of(store, job_id) is not None
    with store.begin() as connection:
        connection.execute(text(change), {"id": job_id})
    assert _kept_of(store, job_id) is None  # worked out again, not printed as kept
    after = job_rows(store, None)
    with store.connect() as connection:
        state = connection.scalar(text("SELECT state FROM job WHERE id = :id"), {"id": job_id})
    changed = [new for old, new in zip(before, after, strict=True) if old != new]
    assert [(row["state"], row["error"]) for row in changed] == (
        [] if state == "done" else [(state, "handed back" if state == "queued" else None)])
    # kept again at its new key, but a running job's
    assert (_kept_of(store, job_id) is None) == (state == "running")


def test_a_report_that_may_not_write_keeps_nothing_and_prints_the_same(
        postgres_url: str) -> None:
    load_fixture(postgres_url)
    role = f"sf_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as owner:
        owner.execute(f'CREATE ROLE "{role}" LOGIN')
        owner.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
    scheme, rest = postgres_url.split("://", 1)
    reader = make_engine(f"{scheme}://{role}@{rest.split('@', 1)[1]}")
    owner_engine = make_engine(postgres_url)
    try:
        printed = _printed(reader)
        assert _kept(owner_engine) == 0
        assert json.loads(printed) == json.loads(_printed(owner_engine))
        assert _printed(owner_engine) == printed  # now from kept rows
    finally:
        reader.dispose()
        owner_engine.dispose()
        with psycopg.connect(postgres_url, autocommit=True) as owner:
            owner.execute(f'DROP OWNED BY "{role}"')
            owner.execute(f'DROP ROLE "{role}"')
