"""`farm status`, `workers`, `cancel`, `submit` as an operator meets them: one line, never a
traceback, when the database or the broker does not answer; status that tells what is left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from kombu.exceptions import OperationalError
from sqlalchemy.orm import Session

from farm.cli import cli
from farm.store.db import make_engine, upgrade
from farm.store.models import Campaign, Job
from farm.unreachable import service_error

DOWN_DATABASE = "postgresql://postgres:secret-db@127.0.0.1:1/x"
DOWN_BROKER = "redis://:secret-broker@127.0.0.1:1/0"
LIVE_BROKER = "redis://127.0.0.1:6379/15"


def farm(*args: str, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def assert_one_line_error(result: Result, *expected: str) -> None:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # handled, not a traceback
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert "secret" not in result.stderr and "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({
        "campaign": "c", "models": [{"name": "m"}], "prompts": ["hi"],
        "variants": [{"name": "v", "flags": {"spec-type": "ngram-simple"}}]}))
    return path


@pytest.mark.parametrize("command", [["status"], ["workers"], ["cancel", "c"], ["submit"],
                                     ["report"], ["db", "upgrade"]])
def test_unreachable_database_is_one_line_naming_it_and_how_to_check(
        command: list[str], matrix: Path) -> None:
    args = [*command, str(matrix)] if command == ["submit"] else command
    result = farm(*args, FARM_DATABASE_URL=DOWN_DATABASE, FARM_BROKER_URL=LIVE_BROKER)
    assert_one_line_error(result, "error: cannot connect to the database "
                          "postgresql://postgres:***@127.0.0.1:1/x: ",
                          "Connection refused; check that PostgreSQL runs and accepts "
                          "connections (`pg_isready -h 127.0.0.1 -p 1`)")


def test_unreachable_broker_on_submit_is_one_line(matrix: Path, postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    upgrade(engine)
    engine.dispose()
    result = farm("submit", str(matrix), FARM_DATABASE_URL=postgres_url,
                  FARM_BROKER_URL=DOWN_BROKER)
    assert_one_line_error(result, "error: cannot reach the broker redis://", "127.0.0.1:1")


def test_a_broker_error_met_anywhere_names_the_broker_and_how_to_check() -> None:
    error = service_error(OperationalError("Error 111 connecting to 127.0.0.1:1.\nmore"),
                          DOWN_DATABASE, DOWN_BROKER)
    assert str(error) == ("cannot reach the broker redis://:***@127.0.0.1:1/0: Error 111 "
                          "connecting to 127.0.0.1:1.; check that Redis runs (`redis-cli -h "
                          "127.0.0.1 -p 1 ping`) and that FARM_BROKER_URL is right")
    assert service_error(ValueError("not a service"), DOWN_DATABASE, DOWN_BROKER) is None


def _job(key: str, state: str, **columns: Any) -> Job:
    return Job(job_key=key, model_name="m", build_name="cpu", variant_name=f"v[{key}=1]",
               varying={}, spec={}, state=state, attempt=columns.pop("attempt", 1),
               max_attempts=3, gpu_class="x", **columns)


def _campaign_jobs(now: datetime) -> list[Job]:
    hour_ago, in_an_hour = now - timedelta(hours=1), now + timedelta(hours=1)
    return [
        _job("done", "done", started_at=now - timedelta(seconds=120),
             finished_at=now - timedelta(seconds=60)),
        _job("failed", "failed", error="HTTP 500", failure_class="request_failed"),
        _job("cancelled", "cancelled"),
        _job("running", "running", lease_owner="w1"),
        _job("queued-new", "queued", attempt=0),  # never posted: reconciliation posts it
        _job("queued-posted", "queued", attempt=0, posted_at=now,  # its message waits
             refusals={"w2": "source x is not allowed on this node"}),
        _job("lost-stale", "lost", posted_at=hour_ago),  # posted long ago: message lost
        _job("lost-backoff", "lost", due_at=in_an_hour),  # a retry waiting out its backoff
        _job("lost-spent", "lost", attempt=3),  # out of attempts: will never run
    ]


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_status_shows_the_failure_class_time_left_and_jobs_awaiting_reconciliation(
        store: str, isolated_data_dir: Path, request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{isolated_data_dir / 'farm.db'}" if store == "sqlite"
           else request.getfixturevalue("postgres_url"))
    engine = make_engine(url)
    upgrade(engine)
    with Session(engine) as session, session.begin():
        campaign = Campaign(name="c", matrix_path="m.yaml")
        session.add(campaign)
        campaign.jobs = _campaign_jobs(datetime.now(UTC))
    engine.dispose()
    env = {} if store == "sqlite" else {"FARM_DATABASE_URL": url}
    result = farm("status", "c", FARM_REPOST_AFTER="600", COLUMNS="200", **env)
    assert result.exit_code == 0, result.output
    # Running, two queued, two lost with attempts left: 5 jobs of a minute on one worker.
    assert ("c: 9 jobs: 2 queued, 1 running, 1 done, 1 failed, 3 lost, 1 cancelled; "
            "about 5 min left") in result.stdout
    assert "[request_failed] HTTP 500" in result.stdout
    assert "v[running=1]" in result.stdout
    assert "handed back: these workers cannot make the build" in result.stdout
    assert "w2: source x is not allowed on this node" in result.stdout
    # Only a fleet posts jobs to a broker; the embedded store has nothing to reconcile.
    waiting = "2 waiting for reconciliation (message lost or overdue"
    assert (waiting in result.stdout) == (store == "postgresql")
