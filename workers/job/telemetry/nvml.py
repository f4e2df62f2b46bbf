"""The worker's GPUs through NVML: which they are, and one reading of each.

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
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from farm.errors import ConfigError

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


class MemoryInfo(Protocol):
    """What ``nvmlDeviceGetMemoryInfo`` returns (a ``c_nvmlMemory_t``): sizes in bytes."""

    @property
    def total(self) -> int: ...

    @property
    def used(self) -> int: ...


class ProcessInfo(Protocol):
    """What ``nvmlDeviceGetComputeRunningProcesses`` lists (a ``c_nvmlProcessInfo_t``)."""

    @property
    def pid(self) -> int: ...


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

    def nvmlDeviceGetCudaComputeCapability(self, handle: object, /) -> tuple[int, int]: ...

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

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object, /) -> Sequence[ProcessInfo]: ...

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: object, /) -> Sequence[ProcessInfo]: ...


@dataclass(frozen=True)
class GpuInfo:
    """One of the worker's GPUs, as NVML names it."""

    index: int  # NVML index == CUDA index under CUDA_DEVICE_ORDER=PCI_BUS_ID
    uuid: str  # "GPU-xxxxxxxx-..."
    name: str
    driver: str
    vram_total_mb: float  # MiB
    compute_capability: str | None = None  # "8.6": what a CUDA build compiles for


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


def init(nvml: NvmlSource | None) -> NvmlSource | None:
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


def shutdown(nvml: NvmlSource) -> None:
    """Release NVML; a failure is logged, never raised."""
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
    source = init(nvml)
    if source is None:
        return []
    try:
        return _describe(source, devices)
    except Exception as exc:  # a broken driver costs the telemetry, not the benchmark
        log.warning("NVML could not describe devices %s: %s", devices, exc)
        return []
    finally:
        shutdown(source)


def require_gpus(devices: list[int], where: str,
                 nvml: NvmlSource | None = None) -> list[GpuInfo]:
    """``gpus_for_devices``, refusing (``ConfigError``, naming ``where``: the option or file
    that gave them) indices this machine has no GPU for, instead of running on the CPU
    under a GPU's index."""
    gpus = gpus_for_devices(devices, nvml)
    missing = sorted(set(devices) - {gpu.index for gpu in gpus})
    if missing:
        raise ConfigError(f"{where}: this machine has no GPU {', '.join(map(str, missing))} "
                          f"that NVML sees ({len(gpus)} of the {len(devices)} named found; "
                          "no NVIDIA driver, or fewer GPUs); drop the devices to run on the "
                          "CPU")
    return gpus


def all_gpus(nvml: NvmlSource | None = None) -> list[GpuInfo]:
    """Every GPU NVML sees (``farm run`` on a GPU box: llama-server may use them all)."""
    source = init(nvml)
    if source is None:
        return []
    try:
        return _describe(source, list(range(source.nvmlDeviceGetCount())))
    except Exception as exc:  # a broken driver costs the telemetry, not the benchmark
        log.warning("NVML could not list devices: %s", exc)
        return []
    finally:
        shutdown(source)


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
            vram_total_mb=nvml.nvmlDeviceGetMemoryInfo(handle).total / _MIB,
            compute_capability=_capability(nvml, handle)))
    return gpus


def _capability(nvml: NvmlSource, handle: object) -> str | None:
    """The GPU's CUDA compute capability ("8.6"), None where NVML cannot tell."""
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    except Exception as exc:  # pynvml.NVMLError, or a driver too old for the call
        log.warning("NVML gives no compute capability: %s", exc)
        return None
    return f"{major}.{minor}"


def cuda_env(gpus: list[GpuInfo]) -> dict[str, str]:
    """Environment that pins a llama-server to exactly these GPUs, named by UUID.

    CUDA accepts UUIDs in CUDA_VISIBLE_DEVICES, so the server sees the very devices sampled
    here whatever the enumeration order; the order is still set for tools that print indices.
    """
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(gpu.uuid for gpu in gpus)}


def open_devices(gpus: list[GpuInfo],
                 nvml: NvmlSource | None = None) -> tuple[NvmlSource, dict[str, object]] | None:
    """NVML initialised with a handle per GPU (by uuid), or None: then no GPU is sampled."""
    source = init(nvml)
    if source is None:
        log.warning("NVML unavailable: GPU telemetry off for %s", [gpu.uuid for gpu in gpus])
        return None
    try:
        return source, {gpu.uuid: source.nvmlDeviceGetHandleByUUID(gpu.uuid) for gpu in gpus}
    except Exception as exc:  # a GPU gone since gpus_for_devices: sample none, run anyway
        log.warning("NVML handles unavailable: %s", exc)
        shutdown(source)
        return None


def read_sample(nvml: NvmlSource, uuid: str, handle: object, t: float) -> Sample | None:
    """One reading of one GPU at time ``t``, or None when NVML fails to give it."""
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


def other_processes(nvml: NvmlSource, handles: Iterable[object], own: Collection[int]) -> int:
    """Processes using the GPUs (compute or graphics) that are not among ``own``; 0 where
    NVML cannot list them (a process in another PID namespace is listed by NVML under a pid
    this one does not have, and counts as another's)."""
    found: set[int] = set()
    for handle in handles:
        for listing in (nvml.nvmlDeviceGetComputeRunningProcesses,
                        nvml.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                found |= {process.pid for process in listing(handle)}
            except Exception as exc:  # not supported on this GPU or driver: none known
                log.debug("NVML process list failed: %s", exc)
    return len(found - set(own))
