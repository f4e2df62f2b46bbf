"""Per-run hardware telemetry: NVML sampling of the worker's GPUs, and the server process's
RSS and CPU time from /proc.

A worker runs one llama-server per arm block; a :class:`Sampler` runs beside it for the whole
block, and the executor calls :meth:`Sampler.mark` before and after each run, then
:meth:`Sampler.summarize` over the two marks to get that run's :class:`RunTelemetry`.

GPU indices are matched to NVML devices by UUID. NVML always enumerates in PCI bus order, so a
worker's ``devices`` are the CUDA indices under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's default
order is "fastest first", which can differ); :func:`cuda_env` pins the server to the same GPUs by
UUID so the two can never disagree.

NVML is reached through :class:`NvmlSource`, shaped like the ``pynvml`` module of
``nvidia-ml-py``: the real module on a GPU box, a hand-written fixture in the tests. Without a
driver (a CPU box) every entry point degrades to "no GPUs" instead of raising.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, cast

log = logging.getLogger("farm.worker.telemetry")

# NVML constants, copied from nvml.h / pynvml so that this module imports without pynvml.
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_ERROR_NOT_SUPPORTED = 3

_MIB = 1024 * 1024

# Clock event ("throttle") reason bits that mean the GPU ran slower than it could have, so a
# run's speed is not comparable with an unthrottled one. Idle, applications-clocks, sync-boost
# and display-clock bits are left out on purpose: they describe a configuration or an idle GPU,
# not heat or power trouble during the run.
THROTTLE_REASONS: dict[int, str] = {
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
    0x0000000000000200: "board_limit",
    0x0000000000000400: "reliability",
}

# The line llama.cpp's llama_model::load_tensors logs on a build with GPU offload support:
#   LLAMA_LOG_INFO("%s: offloaded %d/%d layers to GPU\n", __func__, ...)
# e.g. "load_tensors: offloaded 30/33 layers to GPU". CPU-only builds never print it.
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


class MemoryInfo(Protocol):
    """What ``nvmlDeviceGetMemoryInfo`` returns (a ``c_nvmlMemory_t``): sizes in bytes."""

    @property
    def total(self) -> int: ...

    @property
    def used(self) -> int: ...


class NvmlSource(Protocol):
    """The seam to NVML: the ``pynvml`` module itself, or a hand-written fixture.

    Method names and argument order are pynvml's; errors are raised as ``pynvml.NVMLError``
    (or anything with an NVML ``value`` code). Handles are opaque.
    """

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object: ...

    def nvmlDeviceGetHandleByUUID(self, uuid: str, /) -> object: ...

    def nvmlDeviceGetUUID(self, handle: object, /) -> str | bytes: ...

    def nvmlDeviceGetName(self, handle: object, /) -> str | bytes: ...

    def nvmlDeviceGetMemoryInfo(self, handle: object, /) -> MemoryInfo: ...

    def nvmlDeviceGetPowerUsage(self, handle: object, /) -> int:
        """Milliwatts."""
        ...

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object, /) -> int:
        """Millijoules since the driver was loaded (Volta and later)."""
        ...

    def nvmlDeviceGetClockInfo(self, handle: object, clock_type: int, /) -> int: ...

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int, /) -> int: ...

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object, /) -> int: ...

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object, /) -> int: ...


@dataclass(frozen=True)
class GpuInfo:
    """One of the worker's GPUs, as NVML names it."""

    index: int  # NVML index == CUDA index under CUDA_DEVICE_ORDER=PCI_BUS_ID
    uuid: str  # "GPU-xxxxxxxx-..."
    name: str
    driver: str
    vram_total_mb: float  # MiB


@dataclass(frozen=True)
class Sample:
    """One NVML reading of one GPU."""

    t: float  # the sampler's clock (monotonic seconds)
    device: str  # uuid
    vram_used_mb: float  # MiB
    power_w: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    temperature_c: int
    throttle_reasons: int  # NVML clock event reasons bitmask
    energy_mj: int | None  # total energy counter; None where the GPU has none


@dataclass(frozen=True)
class ProcessSample:
    """One reading of the server process from /proc."""

    t: float
    rss_mb: float | None  # MiB; None once the process is gone or a zombie
    cpu_seconds: float | None  # utime + stime


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


def decode_throttle_reasons(mask: int) -> list[str]:
    """The names of the real throttling reasons set in an NVML clock event reasons mask."""
    return [name for bit, name in sorted(THROTTLE_REASONS.items()) if mask & bit]


def load_nvml() -> NvmlSource | None:
    """The real pynvml module, or None when it is not installed."""
    try:
        import pynvml  # type: ignore[import-untyped]
    except ImportError:
        return None
    return cast(NvmlSource, pynvml)


def _text(value: str | bytes) -> str:
    # Old pynvml releases return bytes where new ones return str.
    return value.decode() if isinstance(value, bytes) else value


def _init(nvml: NvmlSource | None) -> NvmlSource | None:
    """``nvml`` (or pynvml) initialised, or None when there is no usable driver."""
    source = nvml if nvml is not None else load_nvml()
    if source is None:
        return None
    try:
        source.nvmlInit()
    except Exception as exc:  # no library, no driver, driver/library mismatch...: no GPUs
        log.debug("NVML unavailable: %s", exc)
        return None
    return source


def _shutdown(nvml: NvmlSource) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception as exc:  # shutting down must never mask the caller's result
        log.debug("nvmlShutdown failed: %s", exc)


def gpus_for_devices(devices: list[int], nvml: NvmlSource | None = None) -> list[GpuInfo]:
    """The worker's GPUs (CUDA indices under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) with UUIDs.

    Returns [] when NVML is unavailable (no pynvml, no driver); never raises for that. Indices
    NVML does not have are logged and skipped.
    """
    if not devices:
        return []
    source = _init(nvml)
    if source is None:
        return []
    try:
        return _describe(source, devices)
    except Exception as exc:  # a broken driver costs the telemetry, not the benchmark
        log.warning("NVML could not describe devices %s: %s", devices, exc)
        return []
    finally:
        _shutdown(source)


def all_gpus(nvml: NvmlSource | None = None) -> list[GpuInfo]:
    """Every GPU NVML sees (``farm run`` on a GPU box: llama-server may use them all)."""
    source = _init(nvml)
    if source is None:
        return []
    try:
        return _describe(source, list(range(source.nvmlDeviceGetCount())))
    except Exception as exc:  # a broken driver costs the telemetry, not the benchmark
        log.warning("NVML could not list devices: %s", exc)
        return []
    finally:
        _shutdown(source)


def _describe(nvml: NvmlSource, devices: list[int]) -> list[GpuInfo]:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    count = nvml.nvmlDeviceGetCount()
    gpus: list[GpuInfo] = []
    for index in devices:
        if not 0 <= index < count:
            log.warning("device %d not found: NVML sees %d GPU(s)", index, count)
            continue
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(GpuInfo(
            index=index, uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)), driver=driver,
            vram_total_mb=nvml.nvmlDeviceGetMemoryInfo(handle).total / _MIB))
    return gpus


def cuda_env(gpus: list[GpuInfo]) -> dict[str, str]:
    """Environment that pins a llama-server to exactly these GPUs, named by UUID.

    CUDA accepts UUIDs in CUDA_VISIBLE_DEVICES, so the server sees the very devices sampled
    here whatever the enumeration order; the order is still set for tools that print indices.
    """
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(gpu.uuid for gpu in gpus)}


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


class Sampler:
    """Samples the given GPUs (by uuid) every ``interval`` s in a background thread while an
    arm runs, and the server process's RSS/CPU time from /proc.

    Use as a context manager around the arm block; call :meth:`mark` just before and just after
    each run (it also takes a sample, so every window starts and ends with one), then
    :meth:`summarize` over the two marks.
    """

    def __init__(self, gpus: list[GpuInfo], pid: int | None, interval: float = 0.2,
                 nvml: NvmlSource | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gpus = gpus
        self.pid = pid
        self.interval = interval
        self.clock = clock
        self._nvml_arg = nvml
        self._nvml: NvmlSource | None = None
        self._handles: dict[str, object] = {}
        self._samples: list[Sample] = []
        self._process: list[ProcessSample] = []
        # One lock for reading and appending keeps samples in clock order even though the
        # thread and mark() both sample.
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def samples(self) -> list[Sample]:
        """A copy of the GPU samples taken so far."""
        with self._lock:
            return list(self._samples)

    @property
    def process_samples(self) -> list[ProcessSample]:
        """A copy of the process samples taken so far."""
        with self._lock:
            return list(self._process)

    def start(self) -> None:
        """Open NVML for the GPUs (if any) and start the background thread."""
        if self._thread is not None:
            return
        if self.gpus:
            self._open_nvml()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="telemetry-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background thread and release NVML; samples are kept for summaries."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping.set()
            thread.join()
        if self._nvml is not None:
            _shutdown(self._nvml)
            self._nvml, self._handles = None, {}

    def mark(self) -> float:
        """Sample now and return the time: call just before and just after a run."""
        return self.poll()

    def poll(self) -> float:
        """Take one sample of every GPU and of the process (what the thread does each tick)."""
        with self._lock:
            t = self.clock()
            for uuid, handle in self._handles.items():
                sample = self._read_gpu(uuid, handle, t)
                if sample is not None:
                    self._samples.append(sample)
            if self.pid is not None:
                self._process.append(read_process(self.pid, t))
        return t

    def prune(self, before: float) -> None:
        """Forget samples older than ``before`` (long arm blocks would otherwise pile up)."""
        with self._lock:
            self._samples = [s for s in self._samples if s.t >= before]
            self._process = [p for p in self._process if p.t >= before]

    def summarize(self, start: float, end: float) -> RunTelemetry:
        """The run's telemetry from the samples taken in [start, end] (both ends included)."""
        with self._lock:
            gpu = [s for s in self._samples if start <= s.t <= end]
            process = [p for p in self._process if start <= p.t <= end]
        return _summarize(gpu, process)

    def _open_nvml(self) -> None:
        nvml = _init(self._nvml_arg)
        if nvml is None:
            log.warning("NVML unavailable: GPU telemetry off for %s",
                        [gpu.uuid for gpu in self.gpus])
            return
        try:
            self._handles = {gpu.uuid: nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
                             for gpu in self.gpus}
        except Exception as exc:  # a GPU gone since gpus_for_devices: sample none, run anyway
            log.warning("NVML handles unavailable: %s", exc)
            _shutdown(nvml)
            return
        self._nvml = nvml

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.poll()

    def _read_gpu(self, uuid: str, handle: object, t: float) -> Sample | None:
        nvml = self._nvml
        if nvml is None:
            return None
        try:
            return Sample(
                t=t, device=uuid,
                vram_used_mb=nvml.nvmlDeviceGetMemoryInfo(handle).used / _MIB,
                power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                sm_clock_mhz=nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM),
                mem_clock_mhz=nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_MEM),
                temperature_c=nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU),
                throttle_reasons=_clock_reasons(nvml, handle),
                energy_mj=_energy_mj(nvml, handle))
        except Exception as exc:  # one failed reading must not end the sampling thread
            log.debug("NVML sample of %s failed: %s", uuid, exc)
            return None


def _clock_reasons(nvml: NvmlSource, handle: object) -> int:
    # The "event reasons" call replaced the "throttle reasons" one (same bits); drivers older
    # than it only have the latter.
    try:
        return nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except Exception:
        return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)


def _energy_mj(nvml: NvmlSource, handle: object) -> int | None:
    # Pre-Volta GPUs have no energy counter (NVML_ERROR_NOT_SUPPORTED); any other failure is
    # treated the same way, so the run falls back to integrating power instead of losing it.
    try:
        return nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception as exc:
        if getattr(exc, "value", None) != NVML_ERROR_NOT_SUPPORTED:
            log.debug("NVML energy counter failed: %s", exc)
        return None


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


def _summarize(gpu: list[Sample], process: list[ProcessSample]) -> RunTelemetry:
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


def weights_spilled(log_text: str) -> bool:
    """True when a llama-server log shows a model whose layers were not all offloaded to GPU.

    Looks for llama.cpp's ``load_tensors: offloaded N/M layers to GPU`` lines (one per model
    loaded, so the draft model counts too). A CPU-only build prints none: False.
    """
    return any(int(done) < int(total) for done, total in _OFFLOADED.findall(log_text))
