"""Retrying through service outages: backoff, deadline, one log line per state change; the
operator's one line when a service does not answer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import click
import pytest
import sqlalchemy.exc
from click.testing import CliRunner

from farm.cli.base import FarmGroup
from farm.retry import LONGEST_PAUSE, FailingLog, retrying


def _outage(failures: int) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise sqlalchemy.exc.OperationalError("claim", {}, Exception("connection refused"))
        return "ok"
    return calls, call


def test_an_outage_is_retried_with_growing_pauses_and_logged_twice(
        caplog: pytest.LogCaptureFixture) -> None:
    calls, call = _outage(6)
    pauses: list[float] = []
    with caplog.at_level(logging.WARNING):
        result = retrying(call, within=600, what="job 1: claiming",
                          log=logging.getLogger("t"), sleep=pauses.append)
    assert result == "ok" and len(calls) == 7
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, LONGEST_PAUSE]
    assert [r.getMessage().split(":")[-1].strip() for r in caplog.records][-1] == "recovered"
    assert len(caplog.records) == 2


def test_past_the_deadline_the_error_is_raised(caplog: pytest.LogCaptureFixture) -> None:
    _, call = _outage(1000)
    with pytest.raises(sqlalchemy.exc.OperationalError), caplog.at_level(logging.WARNING):
        retrying(call, within=0.2, what="job 1: writing",
                 log=logging.getLogger("t"), sleep=lambda _: None)
    assert "giving up" in caplog.records[-1].getMessage()


def test_other_errors_are_not_retried() -> None:
    def call() -> None:
        raise sqlalchemy.exc.IntegrityError("insert", {}, Exception("duplicate key"))

    with pytest.raises(sqlalchemy.exc.IntegrityError):
        retrying(call, within=60, what="x", log=logging.getLogger("t"), sleep=lambda _: None)


def test_a_failing_log_says_once_when_it_fails_and_once_when_it_recovers(
        caplog: pytest.LogCaptureFixture) -> None:
    trouble = FailingLog(logging.getLogger("t"), "heartbeat failing", "heartbeat recovered")
    with caplog.at_level(logging.WARNING):
        trouble.succeeded()
        for reason in ("refused", "reset", "refused"):
            trouble.failed(ConnectionError(f"{reason}\nIs the server running?"))
        assert trouble.failing == "refused"
        trouble.succeeded()
        trouble.succeeded()
    assert [r.getMessage() for r in caplog.records] == ["heartbeat failing: refused",
                                                        "heartbeat recovered"]
    assert trouble.failing is None


def test_the_operators_line_tells_a_database_from_a_broker_by_the_one_table() -> None:
    from kombu.exceptions import OperationalError as BrokerError

    from farm.retry import BROKER_ERRORS, DATABASE_ERRORS, TRANSIENT
    from farm.unreachable import service_error

    urls = ("sqlite:///farm.db", "redis://127.0.0.1:6379/0")
    database = service_error(sqlalchemy.exc.OperationalError("x", {}, Exception("refused")),
                             *urls)
    broker = service_error(BrokerError("refused"), *urls)
    assert database is not None and "database" in str(database)
    assert broker is not None and "broker" in str(broker)
    assert set(DATABASE_ERRORS) | set(BROKER_ERRORS) < set(TRANSIENT)
    assert service_error(ValueError("a bug"), *urls) is None


def _failing_command(error: Exception) -> click.Group:
    """A group of the farm's whose one command, ``go``, raises ``error``."""
    @click.group(cls=FarmGroup)
    def group() -> None:
        """A group."""

    @group.command()
    def go() -> None:
        raise error
    return group


def test_a_drivers_error_in_any_command_names_the_environments_url() -> None:
    group = _failing_command(sqlalchemy.exc.OperationalError("x", {}, Exception("refused")))
    result = CliRunner().invoke(group, ["go"], env={
        "FARM_DATABASE_URL": "postgresql://farm:secret@db.example:5433/farm"})
    assert result.exit_code == 1
    assert result.stderr == ("error: cannot connect to the database postgresql://farm:***@"
                             "db.example:5433/farm: refused; check that PostgreSQL runs and "
                             "accepts connections (`pg_isready -h db.example -p 5433`) and "
                             "that FARM_DATABASE_URL is right\n")


def test_a_bad_setting_hides_no_other_commands_failure() -> None:
    result = CliRunner().invoke(_failing_command(ValueError("a bug")), ["go"],
                                env={"FARM_LEASE_SECONDS": "soon"})
    assert isinstance(result.exception, ValueError)
