"""What /proc says about the host CPU and the server process (RSS, CPU time)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessSample:
    """One reading of the server process from /proc."""

    t: float
    rss_mb: float | None  # MiB; None once the process is gone or a zombie
    cpu_seconds: float | None  # utime + stime


def read_process(pid: int, t: float) -> ProcessSample:
    """RSS (/proc/<pid>/status VmRSS) and CPU time (/proc/<pid>/stat utime+stime) of ``pid``."""
    return ProcessSample(t=t, rss_mb=_rss_mb(pid), cpu_seconds=_cpu_seconds(pid))


def _rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024  # the kernel reports kB
    return None  # zombies and kernel threads have no VmRSS


def _cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')', so the
    # fields are counted from after its last ')': state is field 3, utime 14 and stime 15.
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_info() -> dict[str, object]:
    """The host CPU: model name from /proc/cpuinfo (None if absent) and logical CPU count."""
    model: str | None = None
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
            break
    return {"cpu_model": model, "logical_cpus": os.cpu_count()}
