"""Other work on the node: the CPU time of every process but the farm's own, from /proc.

A snapshot holds the node's non-idle CPU ticks (the ``cpu`` line of /proc/stat, all cores)
and each process's ticks (/proc/<pid>/stat). Between two snapshots, the farm's own tree
(the given roots, the client process and the sibling workers the farm knows of, and all
their descendants: the servers) is subtracted from the node's total: what is left is other
work, in cores (``OtherWork.cores``). The load average, the frequency governor and each
core's current frequency are read beside it where sysfs has them (docs/busy-node.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from farm.stats.busy import BUSY_CORES

PROC = Path("/proc")
SYS_CPU = Path("/sys/devices/system/cpu")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest is in user).
_NON_IDLE = (0, 1, 2, 5, 6)
TOP = 5


@dataclass(frozen=True)
class ProcTicks:
    """One process in a snapshot: its parent, name, its own CPU ticks (what names the
    busiest) and its total, with its reaped children's (so that a child of the farm's that
    ends between two snapshots is still counted as the farm's)."""

    pid: int
    ppid: int
    name: str
    ticks: int
    total: int


@dataclass(frozen=True)
class Snapshot:
    """The node's non-idle ticks and every process's at one moment (``clock`` seconds)."""

    t: float
    busy_ticks: int
    processes: Mapping[int, ProcTicks]


@dataclass(frozen=True)
class OtherWork:
    """What ran beside the farm between two snapshots: cores in use on average, and the
    busiest other processes as (name, pid, cores)."""

    seconds: float
    cores: float
    top: tuple[tuple[str, int, float], ...]

    @property
    def busy(self) -> bool:
        """Whether the other work reaches the threshold (``farm.stats.busy.BUSY_CORES``)."""
        return self.cores >= BUSY_CORES

    def describe(self) -> str:
        """One line for logs and the selftest: the cores and what used them."""
        named = ", ".join(f"{name} (pid {pid}) {cores:.2f}" for name, pid, cores in self.top
                          if cores >= 0.01)
        return (f"other processes used {self.cores:.2f} of a core over {self.seconds:.1f} s"
                + (f": {named}" if named else ""))


def stat_busy_ticks(stat: str) -> int:
    """Non-idle ticks of all cores from /proc/stat's text (its first, ``cpu``, line)."""
    fields = stat.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError("/proc/stat does not start with the cpu line")
    values = [int(value) for value in fields[1:]]
    return sum(values[index] for index in _NON_IDLE if index < len(values))


def pid_ticks(pid: int, stat: str) -> ProcTicks:
    """A process from its /proc/<pid>/stat text: utime + stime, and with cutime + cstime."""
    # The name (field 2) is in parentheses and may hold spaces or ')': fields are counted
    # from after its last ')': ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])
    return ProcTicks(pid, int(fields[1]), name, ticks, ticks + int(fields[13]) + int(fields[14]))


def snapshot(proc: Path = PROC, clock: Callable[[], float] = time.monotonic) -> Snapshot:
    """The node now: /proc/stat and every readable /proc/<pid>/stat (OSError without
    /proc: ``node_load`` then measures nothing)."""
    processes: dict[int, ProcTicks] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                processes[int(entry.name)] = pid_ticks(int(entry.name),
                                                       (entry / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # it ended while being read
    return Snapshot(clock(), stat_busy_ticks((proc / "stat").read_text()), processes)


def tree(processes: Mapping[int, ProcTicks], roots: Iterable[int]) -> set[int]:
    """The roots present and all their descendants."""
    children: dict[int, list[int]] = {}
    for process in processes.values():
        children.setdefault(process.ppid, []).append(process.pid)
    found: set[int] = set()
    todo = [root for root in roots if root in processes]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def other_work(start: Snapshot, end: Snapshot, roots: Iterable[int],
               clk_tck: int | None = None) -> OtherWork:
    """The CPU the node spent between two snapshots outside the roots' trees, in cores.

    The farm's tree is taken at both ends (a server started or ended between them is in
    one), so its ticks are the difference of the two sums; a process of the tree that ended
    is still counted through its parent's reaped-children ticks. The busiest others are
    named by their own ticks (an init that reaps an orphan gains its whole life's).
    """
    tick = clk_tck or os.sysconf("SC_CLK_TCK")
    roots = list(roots)
    own_start, own_end = tree(start.processes, roots), tree(end.processes, roots)
    own = (sum(end.processes[pid].total for pid in own_end)
           - sum(start.processes[pid].total for pid in own_start))
    seconds = max(end.t - start.t, 1e-9)
    cores = max(end.busy_ticks - start.busy_ticks - own, 0) / tick / seconds
    others = [(process.name, pid, (process.ticks - start.processes[pid].ticks) / tick / seconds)
              for pid, process in end.processes.items()
              if pid not in own_end and pid in start.processes
              and start.processes[pid].name == process.name]
    others.sort(key=lambda item: -item[2])
    return OtherWork(seconds, cores, tuple(others[:TOP]))


@dataclass(frozen=True)
class CpuState:
    """The load and the frequency: 1-minute load average, the governor(s) and the mean
    current frequency over cores (None where sysfs has no cpufreq)."""

    load_1m: float | None
    governor: str | None
    freq_mhz: float | None


def cpu_state(proc: Path = PROC, sys_cpu: Path = SYS_CPU) -> CpuState:
    """The node's load average and, where sysfs has them, governors and frequencies."""
    try:
        load: float | None = float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load = None
    governors: set[str] = set()
    freqs: list[float] = []
    for policy in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq")):
        governors |= set(_read(policy / "scaling_governor").split())
        if (khz := _read(policy / "scaling_cur_freq")).isdigit():
            freqs.append(int(khz) / 1000)
    return CpuState(load, ",".join(sorted(governors)) or None,
                    sum(freqs) / len(freqs) if freqs else None)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def measure(roots: Iterable[int], seconds: float, proc: Path = PROC) -> OtherWork:
    """Other work over the next ``seconds`` (two snapshots, a sleep between)."""
    roots = list(roots)
    start = snapshot(proc)
    time.sleep(seconds)
    return other_work(start, snapshot(proc), roots)


@dataclass(frozen=True)
class NodeLoad:
    """What a run shared its node with: other work over its window (None without /proc),
    the CPU's state at its end, other processes on its GPUs (None without NVML), and how
    long its block waited for quiet."""

    other: OtherWork | None
    cpu: CpuState
    gpu_others: int | None
    waited_s: float


class NodeWatch:
    """Other work over successive windows (a run's): ``begin`` before, ``end`` after."""

    def __init__(self, roots: Iterable[int], proc: Path = PROC) -> None:
        self.roots, self.proc = list(roots), proc
        self._start: Snapshot | None = None
        self.own: set[int] = set()

    def begin(self) -> None:
        """Take the window's first snapshot."""
        try:
            self._start = snapshot(self.proc)
        except OSError:
            self._start = None

    def end(self) -> OtherWork | None:
        """Other work since ``begin`` (None where /proc could not be read); ``own`` is then
        the farm's tree at the window's end."""
        if self._start is None:
            return None
        try:
            last = snapshot(self.proc)
        except OSError:
            return None
        self.own = tree(last.processes, self.roots)
        return other_work(self._start, last, self.roots)
