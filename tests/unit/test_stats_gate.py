"""The regression gate of a growing history (``farm.stats.changes.gate``, what ``farm
history --fail-on-regression`` reads) on simulated nightly histories
(``tests.unit.simulate_gate``: one job's 8 series, a -10% speedup at the newest build),
500 histories a cell, fixed seeds. Each band is the claim widened by two binomial standard
deviations of the histories run. tests/bench/bench_gate.py runs 2,000 a cell and prints
the table docs/history.md quotes, the figures before beside it.

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import pytest

from tests.unit import simulate_gate
from tests.unit.simulate import binomial_sd

HISTORIES = 500
BUILDS = (4, 30, 100, 365)



@pytest.mark.parametrize("builds", BUILDS)
def test_the_gate_keeps_its_power_as_the_history_grows(builds: int) -> None:
    """Value SE 1.06% (8 blocks at 3%), no drift: power >= 0.95 at B = 30, 100 and 365
    (before: 0.907 / 0.788 / 0.602, all transitions in one BH family), 0.9 at B = 4 (before
    0.994: two earlier transitions are all the speedup's between-build variance has);
    false alarms <= 0.05."""
    found = simulate_gate.gate_cell(HISTORIES, 3800 + builds, builds, simulate_gate.PRECISE)
    print(f"\nB={builds}, SE 1.06%: {found}")
    assert found.power >= (0.9 if builds == 4 else 0.95) - 2 * binomial_sd(0.95, HISTORIES)
    assert found.false_alarms <= 0.05 + 2 * binomial_sd(0.05, HISTORIES)


# The audit's power at value SE 3% (df 6), the gate over the whole history.
BEFORE_NOISY = {4: 0.130, 30: 0.026, 100: 0.011, 365: 0.004}


@pytest.mark.parametrize("builds", BUILDS)
def test_at_three_percent_the_gate_does_not_lose_power_with_length(builds: int) -> None:
    """Value SE 3% (7 blocks at 7.9%): a -10% change is hard to see in one night (0.2-0.3),
    but no longer fades with the history (before: 0.130 / 0.026 / 0.011 / 0.004)."""
    found = simulate_gate.gate_cell(HISTORIES, 3900 + builds, builds, simulate_gate.NOISY)
    print(f"\nB={builds}, SE 3%: {found}")
    assert found.power >= max(BEFORE_NOISY[builds], 0.15)
    assert found.false_alarms <= 0.05 + 2 * binomial_sd(0.05, HISTORIES)


@pytest.mark.parametrize("builds", BUILDS)
def test_a_machine_that_drifts_3_percent_between_nights_does_not_fail_the_gate(
        builds: int) -> None:
    """Value SE 3%, the tok/s and timers shifted by 3% (SD) each night: false alarms <=
    0.05, the variance between builds learnt from the history (before, testing the newest
    build alone without it: 0.079-0.089)."""
    found = simulate_gate.gate_cell(HISTORIES, 4000 + builds, builds, simulate_gate.NOISY,
                                    drift=0.03)
    print(f"\nB={builds}, SE 3%, drift 3%: {found}")
    assert found.false_alarms <= 0.05 + 2 * binomial_sd(0.05, HISTORIES)
