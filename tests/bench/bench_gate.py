"""The regression gate of a growing history and the history's own running calls, on
simulated nightly histories (``tests.unit.simulate_gate``): power for a -10% speedup at
the newest build and false alarms, at value SE 1.06% and 3%, with and without a machine
that drifts 3% between nights, B = 4, 30, 100, 365 builds. The figures before are the
audit's (/work/shared/statsaudit2/out_sim4.txt: every transition in one BH family).

    .venv/bin/python -m tests.bench.bench_gate [--histories 2000] [--display 200]
        [--display-builds 100]

``--display`` histories a cell for the running calls (LORD++ over every tracked test: the
whole history is tested, so only up to ``--display-builds`` builds).
"""

from __future__ import annotations

import argparse
import time

from tests.unit import simulate_gate

BUILDS = (4, 30, 100, 365)
CELLS = (("SE 1.06%", simulate_gate.PRECISE, 0.0), ("SE 3%", simulate_gate.NOISY, 0.0),
         ("SE 3%, drift 3%", simulate_gate.NOISY, 0.03))
# The audit's gate (power, false alarms) per cell and B.
BEFORE = {"SE 1.06%": ((0.994, 0.007), (0.907, 0.002), (0.788, 0.000), (0.602, 0.000)),
          "SE 3%": ((0.130, 0.011), (0.025, 0.001), (0.011, 0.001), (0.004, 0.000)),
          "SE 3%, drift 3%": ((0.152, 0.046), (0.045, 0.006), (0.013, 0.004),
                              (0.004, 0.001))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=2000)
    parser.add_argument("--display", type=int, default=200)
    parser.add_argument("--display-builds", type=int, default=100)
    args = parser.parse_args()
    print(f"{'cell':<17} {'B':>4}  {'gate power':>10} {'alarms':>7}  {'before':>13}  "
          f"{'running calls':>13} {'alarms':>7}")
    for c, (name, noise, drift) in enumerate(CELLS):
        for b, builds in enumerate(BUILDS):
            started = time.monotonic()
            seed = 5000 + 10 * c + b
            found = simulate_gate.gate_cell(args.histories, seed, builds, noise, drift)
            power, alarms = BEFORE[name][b]
            running = "-"
            if builds <= args.display_builds:
                shown = simulate_gate.display_cell(args.display, seed, builds, noise, drift)
                running = f"{shown.power:>13.3f} {shown.false_alarms:>7.3f}"
            print(f"{name:<17} {builds:>4}  {found.power:>10.3f} {found.false_alarms:>7.3f}  "
                  f"{power:>6.3f} {alarms:>6.3f}  {running:>21}  "
                  f"[{time.monotonic() - started:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
