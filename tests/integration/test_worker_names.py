"""Two workers under one name would share a row, a queue and leases: `farm worker` refuses,
in one line, a name that a running worker of this host has (two workers of one class and
devices get the same default name), and takes it over from a worker that is gone. Real
PostgreSQL; the "running worker" is a real process whose id the row holds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from farm.store import registry
from tests.helpers import run_cli

HOST = socket.gethostname()
NAME = f"cpu@{HOST}-cpu"  # the default name of `farm worker --gpu-class cpu`


@pytest.fixture
def process() -> Iterator[subprocess.Popen[bytes]]:
    running = subprocess.Popen(["sleep", "60"])
    try:
        yield running
    finally:
        running.kill()
        running.wait()


def _register(engine: Engine, pid: int) -> None:
    registry.register(engine, NAME, {"host": HOST, "gpu_class": "cpu", "devices": [],
                                     "gpus": [], "driver": None, "pid": pid, "builds": {},
                                     "models": []})


def test_a_second_worker_under_a_running_ones_default_name_is_refused_in_one_line(
        pg_engine: Engine, postgres_url: str, process: subprocess.Popen[bytes]) -> None:
    _register(pg_engine, process.pid)
    result = run_cli("worker", "--gpu-class", "cpu",
                     env={"FARM_DATABASE_URL": postgres_url,
                          "FARM_BROKER_URL": "redis://127.0.0.1:6379/15"})
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: worker {NAME} already runs on this host (pid {process.pid}): give this one "
        "its own `name:` in its --config file (the default, CLASS@HOST-DEVICES, is the same "
        "for two workers of one class and devices)\n")


def test_the_name_of_a_worker_that_is_gone_or_stopped_is_free(
        pg_engine: Engine, process: subprocess.Popen[bytes]) -> None:
    _register(pg_engine, process.pid)
    assert registry.running_namesake(pg_engine, NAME, HOST) == process.pid
    assert registry.running_namesake(pg_engine, NAME, "another-host") is None
    registry.mark_stopped(pg_engine, NAME)
    assert registry.running_namesake(pg_engine, NAME, HOST) is None
    _register(pg_engine, process.pid)
    os.kill(process.pid, signal.SIGKILL)  # killed, not yet reaped: a zombie
    stat = Path(f"/proc/{process.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert registry.running_namesake(pg_engine, NAME, HOST) is None
    process.wait()
    assert registry.running_namesake(pg_engine, NAME, HOST) is None
