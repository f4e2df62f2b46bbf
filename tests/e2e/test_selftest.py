"""``farm selftest`` on this CPU node: every known truth holds, one line per check."""

from __future__ import annotations

import pytest

from tests.e2e.test_farm_run import farm

pytestmark = pytest.mark.server

CHECKS = ("oracle: every draft accepted, text identical", "anti-oracle: no draft accepted",
          "synthetic rates read back", "MTP faster than baseline on the oracle",
          "A/A control covers 1 (99.9%)")


def test_selftest_passes_every_check_on_this_node() -> None:
    result = farm("selftest")
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert [line.split(":")[0].removeprefix("PASS ") for line in lines] == [
        check.split(":")[0] for check in CHECKS]

