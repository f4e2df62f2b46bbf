"""One run's telemetry from the samples taken over its time window: energy, power, peaks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from workers.job.telemetry.nvml import Sample, decode_throttle_reasons
from workers.job.telemetry.procfs import ProcessSample


@dataclass(frozen=True)
class RunTelemetry:
    """What the hardware did over one run's time window.

    GPU figures are totals over the worker's GPUs (energy, power, VRAM) or extremes/means over
    all their samples (clock, temperature); all are None when no GPU was sampled.
    """

    energy_j: float | None
    mean_power_w: float | None
    max_vram_used_mb: float | None
    mean_sm_clock_mhz: float | None
    max_temperature_c: int | None
    throttled: bool
    throttle_reasons: list[str]  # names from THROTTLE_REASONS seen during the run
    rss_mb: float | None  # the server's peak RSS in the window, MiB
    cpu_seconds: float | None  # the server's CPU time spent in the window

    def joules_per_token(self, tokens: int) -> float | None:
        """GPU energy per generated token, or None without energy or tokens."""
        if self.energy_j is None or tokens <= 0:
            return None
        return self.energy_j / tokens


def _integrated_j(samples: list[Sample]) -> float:
    """Trapezoidal integral of power over time, joules."""
    return sum((b.t - a.t) * (a.power_w + b.power_w) / 2 for a, b in pairwise(samples))


def _device_energy_j(samples: list[Sample]) -> float | None:
    """One GPU's energy over its samples: counter delta where every sample has the counter.

    The counter is exact, whereas power readings are (on recent GPUs, 1 s averaged) snapshots,
    so integrating them is only the fallback.
    """
    if len(samples) < 2:
        return None
    first, last = samples[0].energy_mj, samples[-1].energy_mj
    complete = all(s.energy_mj is not None for s in samples)
    # A counter that went backwards was reset (driver reload): integrate instead.
    if complete and first is not None and last is not None and last >= first:
        return (last - first) / 1000
    return _integrated_j(samples)


def _device_power_w(samples: list[Sample], energy_j: float | None) -> float:
    """One GPU's mean power, consistent with its energy where the window has a length."""
    span = samples[-1].t - samples[0].t
    if energy_j is not None and span > 0:
        return energy_j / span
    return sum(s.power_w for s in samples) / len(samples)


def _by_device(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    devices: dict[str, list[Sample]] = {}
    for sample in samples:
        devices.setdefault(sample.device, []).append(sample)
    for series in devices.values():
        series.sort(key=lambda s: s.t)
    return devices


def summarize(gpu: list[Sample], process: list[ProcessSample]) -> RunTelemetry:
    """The telemetry of a run from the GPU and process samples of its window."""
    rss = [p.rss_mb for p in process if p.rss_mb is not None]
    cpu = [p.cpu_seconds for p in process if p.cpu_seconds is not None]
    rss_mb = max(rss) if rss else None
    cpu_seconds = cpu[-1] - cpu[0] if len(cpu) >= 2 else None
    mask = 0
    for sample in gpu:
        mask |= sample.throttle_reasons
    reasons = decode_throttle_reasons(mask)
    if not gpu:
        return RunTelemetry(None, None, None, None, None, bool(reasons), reasons, rss_mb,
                            cpu_seconds)
    devices = _by_device(gpu)
    energies = {uuid: _device_energy_j(series) for uuid, series in devices.items()}
    known = [e for e in energies.values() if e is not None]
    return RunTelemetry(
        # Any GPU without a figure makes the total unknown rather than an undercount.
        energy_j=sum(known) if len(known) == len(energies) else None,
        mean_power_w=sum(_device_power_w(devices[u], e) for u, e in energies.items()),
        max_vram_used_mb=sum(max(s.vram_used_mb for s in series) for series in devices.values()),
        mean_sm_clock_mhz=sum(s.sm_clock_mhz for s in gpu) / len(gpu),
        max_temperature_c=max(s.temperature_c for s in gpu),
        throttled=bool(reasons), throttle_reasons=reasons, rss_mb=rss_mb,
        cpu_seconds=cpu_seconds)
