"""A whole ``farm report --format json`` is kept in a PostgreSQL store with the stamp of what
it was printed from, and printed again as it is while that stamp holds
(``farm.results.printed``): the same bytes as printing it from the rows, on stdout and in
a file; never once a job, a run of a running job, a campaign, the code or the report's
version changed; per scope (a campaign's report outlives changes to another campaign);
nothing kept where the report may not write, nothing read where it may not read, and
nothing on SQLite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text

from farm.columns import REPORT_VERSION
from farm.results import printed
from farm.store.db import make_engine
from tests.helpers import run_cli
from tests.integration.test_golden_reports import CLI_ENV, load_fixture

MARK = b'["printed from report_text"]\n'


@pytest.fixture
def store(postgres_url: str) -> Iterator[Engine]:
    """The summaries fixture on PostgreSQL, upgraded, no report kept."""
    load_fixture(postgres_url)
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


def _report(engine: Engine, *args: str) -> bytes:
    """``farm report ARGS --format json``'s stdout, as bytes."""
    env = {**CLI_ENV, "FARM_DATABASE_URL": engine.url.render_as_string(hide_password=False)}
    result = run_cli("report", *args, "--format", "json", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def _scopes(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.scalars(text("SELECT scope FROM report_text ORDER BY scope")))


def _mark(engine: Engine) -> None:
    """Replace every kept report's bytes (not its stamp) by ``MARK``: a report that prints
    ``MARK`` printed what was kept."""
    with engine.begin() as connection:
        connection.execute(text("UPDATE report_text SET body = :body"), {"body": MARK})


def _fresh(engine: Engine, *args: str) -> bytes:
    """What the report prints with nothing kept (and keeps it again)."""
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM report_text"))
    return _report(engine, *args)


def test_a_kept_report_prints_the_same_bytes_on_stdout_and_in_a_file(
        store: Engine, tmp_path: Path) -> None:
    first = _report(store, "--all")
    assert first.startswith(b'{"schema":"specfarm.report","version":1,"jobs":[\n')
    assert _scopes(store) == ["all"]
    with store.connect() as connection:
        kept = connection.scalar(text("SELECT body FROM report_text"))
    assert kept == first
    assert _report(store, "--all") == first
    written = tmp_path / "report.json"
    env = {**CLI_ENV, "FARM_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    result = run_cli("report", "--all", "--format", "json", "-o", str(written), env=env)
    assert result.exit_code == 0, result.output
    assert written.read_bytes() == first
    _mark(store)
    assert _report(store, "--all") == MARK  # while the stamp holds, no row is read


def _first(engine: Engine, state: str) -> int:
    with engine.connect() as connection:
        found = connection.scalar(text("SELECT min(id) FROM job WHERE state = :state"),
                                  {"state": state})
    assert found is not None, f"the fixture has a {state} job"
    return int(found)


def _add_run(connection: psycopg.Connection, job_id: int) -> None:
    """A copy of one of the job's runs, as a running job's next run."""
    columns = [name for (name,) in connection.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'run' "
        "AND column_name <> 'id' ORDER BY ordinal_position")]
    listed = ", ".join(f'"{name}"' for name in columns)
    values = listed.replace('"repetition"', '"repetition" + 1')
    connection.execute(f"INSERT INTO run ({listed}) SELECT {values} FROM run "
                       "WHERE job_id = %s ORDER BY repetition DESC LIMIT 1", (job_id,))


CHANGES = {
    "attempt": "UPDATE job SET attempt = attempt + 1 WHERE id = {done}",
    "state": "UPDATE job SET state = 'queued', error = 'handed back' WHERE id = {done}",
    "finished": "UPDATE job SET finished_at = finished_at + interval '1 second' "
                "WHERE id = {done}",
    # A null and an empty text differ.
    "worker": "UPDATE job SET lease_owner = CASE WHEN lease_owner IS NULL THEN '' END "
              "WHERE id = {done}",
    "gone": "DELETE FROM job WHERE id = {done}",
    # Handed back and claimed again, its columns as they were: not the job it was.
    "claimed-again": "UPDATE job SET started_at = COALESCE(started_at, now()) "
                     "+ interval '1 second' WHERE id = {done}",
    "campaign-renamed": "UPDATE campaign SET name = name || '-2' WHERE id = "
                        "(SELECT campaign_id FROM job WHERE id = {done})",
    "campaign-gone": "DELETE FROM campaign WHERE id = "
                     "(SELECT max(campaign_id) FROM job)",
}


@pytest.mark.parametrize("change", [*CHANGES, "run", "code", "report version"])
def test_a_change_to_what_a_report_is_printed_from_prints_it_again(
        store: Engine, change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _report(store, "--all")
    _mark(store)
    if change == "run":
        running = _first(store, "running")
        with psycopg.connect(store.url.render_as_string(hide_password=False)
                             .replace("+psycopg", ""), autocommit=True) as connection:
            _add_run(connection, running)
    elif change == "code":
        monkeypatch.setattr(printed, "_code_stamp", lambda: "other code")
    elif change == "report version":  # a report kept by a farm of the version before
        monkeypatch.setattr(printed, "REPORT_VERSION", REPORT_VERSION + 1)
    else:
        with store.begin() as connection:
            connection.execute(text(CHANGES[change].format(done=_first(store, "done"))))
    after = _report(store, "--all")
    assert after != MARK
    assert after == _fresh(store, "--all")


def test_the_stamp_is_the_same_in_every_time_zone(store: Engine) -> None:
    first = _report(store, "--all")
    _mark(store)
    env = {"FARM_DATABASE_URL": store.url.render_as_string(hide_password=False),
           "PGTZ": "Asia/Kathmandu"}
    result = run_cli("report", "--all", "--format", "json", env=env)
    assert result.exit_code == 0 and result.stdout_bytes == MARK
    assert first != MARK


def test_a_campaigns_report_is_kept_apart_from_others(store: Engine) -> None:
    with store.connect() as connection:
        names = list(connection.scalars(text(
            "SELECT c.name FROM campaign c WHERE EXISTS (SELECT 1 FROM job "
            "WHERE job.campaign_id = c.id) ORDER BY c.id")))
    first, last = names[0], names[-1]
    assert first != last, "the fixture has two campaigns with jobs"
    one = _report(store, first)
    assert _report(store, "--all") != one
    with store.connect() as connection:
        first_id = connection.scalar(text("SELECT id FROM campaign WHERE name = :name"),
                                     {"name": first})
    assert _scopes(store) == sorted(["all", f"campaign:{first_id}"])
    _mark(store)
    with store.begin() as connection:  # a change to another campaign's job
        connection.execute(text(
            "UPDATE job SET attempt = attempt + 1 WHERE id = (SELECT min(job.id) FROM job "
            "JOIN campaign c ON c.id = job.campaign_id WHERE c.name = :name)"),
            {"name": last})
    assert _report(store, first) == MARK
    assert _report(store, "--all") != MARK
    with store.begin() as connection:  # its campaign gone, its report goes with it
        connection.execute(text("DELETE FROM campaign WHERE name = :name"), {"name": first})
    assert _scopes(store) == ["all"]


@pytest.mark.parametrize("grants", [
    ["GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"],  # reads all, writes none
    ["GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}",  # may not touch kept reports
     "REVOKE ALL ON report_text FROM {role}"],
], ids=["read-only", "no-report-text"])
def test_a_role_that_may_not_keep_reports_prints_the_same(
        store: Engine, grants: list[str]) -> None:
    url = store.url.render_as_string(hide_password=False).replace("+psycopg", "")
    role = f"sf_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(f'CREATE ROLE "{role}" LOGIN')
        for grant in grants:
            owner.execute(grant.format(role=f'"{role}"'))
    scheme, rest = url.split("://", 1)
    reader = make_engine(f"{scheme}://{role}@{rest.split('@', 1)[1]}")
    try:
        read = _report(reader, "--all")
        assert _scopes(store) == []
        assert _report(store, "--all") == read  # printed and kept by the owner
        assert _scopes(store) == ["all"]
        assert _report(reader, "--all") == read  # the kept one, or printed again
    finally:
        reader.dispose()
        with psycopg.connect(url, autocommit=True) as owner:
            owner.execute(f'DROP OWNED BY "{role}"')
            owner.execute(f'DROP ROLE "{role}"')


def test_sqlite_keeps_no_whole_report(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    load_fixture(url)
    engine = make_engine(url)
    try:
        assert printed.printed_report(engine, None) is None
        first = _report(engine, "--all")
        assert _report(engine, "--all") == first
        assert _scopes(engine) == []
    finally:
        engine.dispose()
