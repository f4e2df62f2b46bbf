"""Record /proc traces for the busy-node tests (a script, not a test).

Each trace is two snapshots of the node three seconds apart, as ``workers.job.telemetry.node``
reads them: the ``cpu`` line of /proc/stat and the /proc/<pid>/stat of every process that
used CPU in between or belongs to the stand-in for the farm's tree (a child process, its
``root``). What the stand-in and the other processes do in between is the trace's name:

    idle        the stand-in sleeps, nothing is started beside it
    own-busy    the stand-in's own child spins one core (the farm's tree: not other work)
    own-ended   the stand-in's child spins a second and is reaped within the window
    hog         a process outside the tree spins one core

    .venv/bin/python tests/bench/busy_traces.py tests/fixtures/busy            # any time
    flock /tmp/farm-cpu.lock .venv/bin/python tests/bench/busy_traces.py \
        tests/fixtures/busy --prefix quiet-                                      # quiet
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workers.job.telemetry.node import PROC, pid_ticks, tree

WINDOW_S = 3.0
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
# The stand-in for the farm's process: it sleeps, spins a child for the whole window, or
# spins one for a second and reaps it.
STAND_IN = {
    "idle": "import time\ntime.sleep(30)\n",
    "own-busy": ("import subprocess, sys, time\n"
                 f"subprocess.Popen([sys.executable, '-c', {SPIN.format(seconds=30)!r}])\n"
                 "time.sleep(30)\n"),
    "own-ended": ("import subprocess, sys, time\ntime.sleep(1.5)\n"
                  f"subprocess.run([sys.executable, '-c', {SPIN.format(seconds=1)!r}])\n"
                  "time.sleep(30)\n"),
    "hog": "import time\ntime.sleep(30)\n",
}


def _raw() -> dict[str, Any]:
    pids = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                pids[entry.name] = (entry / "stat").read_text()
            except OSError:
                continue
    return {"t": time.monotonic(), "stat": (PROC / "stat").read_text().split("\n", 1)[0],
            "pids": pids}


def _kept(start: dict[str, Any], end: dict[str, Any], root: int) -> None:
    """Keep only the processes that used CPU between the snapshots, and the root's tree."""
    def parsed(snap: dict[str, Any]) -> dict[int, Any]:
        return {int(pid): pid_ticks(int(pid), text) for pid, text in snap["pids"].items()}

    first, last = parsed(start), parsed(end)
    own = tree(first, [root]) | tree(last, [root])
    keep = {pid for pid in set(first) | set(last)
            if pid in own or (first.get(pid) is None) or (last.get(pid) is None)
            or first[pid].total != last[pid].total}
    for snap in (start, end):
        snap["pids"] = {pid: text for pid, text in snap["pids"].items() if int(pid) in keep}


def record(name: str) -> dict[str, Any]:
    """One trace: the stand-in started, the window's two snapshots, everything stopped."""
    stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN[name]])
    hog = (subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=30)])
           if name == "hog" else None)
    try:
        time.sleep(0.5)  # let the children start
        start = _raw()
        time.sleep(WINDOW_S)
        end = _raw()
    finally:
        now = {int(pid): pid_ticks(int(pid), text) for pid, text in _raw()["pids"].items()}
        for pid in tree(now, [stand_in.pid]) - {stand_in.pid}:
            os.kill(pid, signal.SIGKILL)  # the stand-in's own children, by pid
        for process in (stand_in, hog):
            if process is not None:
                process.kill()
                process.wait()
    _kept(start, end, stand_in.pid)
    return {"name": name, "root": stand_in.pid, "hog": hog.pid if hog else None,
            "clk_tck": os.sysconf("SC_CLK_TCK"), "start": start, "end": end}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--suffix", default="")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in STAND_IN:
        trace = record(name)
        path = args.out / f"{args.prefix}{name}{args.suffix}.json"
        path.write_text(json.dumps(trace, indent=0))
        print(f"{path}: {len(trace['end']['pids'])} processes kept")


if __name__ == "__main__":
    main()
