"""``farm selftest``'s verdict: any failed check fails the command (exit 1), by name."""

from __future__ import annotations

import pytest

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
