"""``farm selftest``'s verdict: any failed check fails the command (exit 1), by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from farm import selftest
from farm.errors import SelftestFailed
from farm.selftest import Check, report_failures
from farm.stats.intervals import log_interval


def test_a_failed_check_fails_the_selftest_by_name() -> None:
    report_failures([Check("a", True, "1")])
    with pytest.raises(SelftestFailed, match="1 of 2 checks failed: b"):
        report_failures([Check("a", True, "1"), Check("b", False, "0")])
    assert SelftestFailed("x").exit_code == 1


def test_the_control_interval_at_another_level_widens_with_it() -> None:
    low95, high95 = log_interval(0.0, 0.01, 4, 0.95)
    low999, high999 = log_interval(0.0, 0.01, 4, 0.999)
    assert low999 < low95 < 1.0 < high95 < high999
    assert high95 == pytest.approx(1.0 * 2.718281828 ** (2.776445 * 0.01), rel=1e-5)


def test_the_quiet_check_fails_beside_a_busy_loop_and_names_it() -> None:
    """A one-core loop outside this process's tree (started through a shell that exits at
    once, so the loop's parent is not this process) fails the first check, which names it."""
    loop = "import time\nend = time.monotonic() + 6\nwhile time.monotonic() < end: pass\n"
    started = subprocess.run(["sh", "-c", 'exec "$0" -c "$1" >/dev/null 2>&1 &\necho $!',
                              sys.executable, loop], capture_output=True, text=True,
                             check=True)
    pid = int(started.stdout)
    try:
        time.sleep(0.3)
        found = selftest._quiet(cast(Any, SimpleNamespace(testbed=selftest.Testbed("cpu", {}, []))),
                                cast(Any, None))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not found.passed and found.name == "the node is quiet enough to measure"
    assert f"(pid {pid})" in found.figure and "busy from 0.3" in found.figure


def test_a_timing_check_that_failed_beside_other_work_says_the_node_was_not_quiet() -> None:
    speed = Check("MTP faster than baseline on the oracle", False, "0.91x [0.80, 1.03]")
    busy = {"busy_blocks": 3, "measured_blocks": 16, "busy_cores": 0.94}
    found = selftest.timed(speed, busy)
    assert not found.passed and found.name == "the node is quiet enough to measure"
    assert found.figure == (
        "other processes used 0.9 of a core during 3 of 16 blocks of 'MTP faster than "
        "baseline on the oracle', so it was not judged (0.91x [0.80, 1.03]); run `farm "
        "selftest` again on a quiet node")
    # Quiet blocks, or a check that passed: the verdict stands as measured.
    assert selftest.timed(speed, {"busy_blocks": 0, "measured_blocks": 16}) is speed
    assert selftest.timed(speed, {"busy_blocks": float("nan")}) is speed  # not measured
    passed = Check("A/A control covers 1 (99.9%)", True, "1.002x [0.97, 1.03]")
    assert selftest.timed(passed, busy) is passed
