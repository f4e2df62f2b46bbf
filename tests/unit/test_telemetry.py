"""Telemetry: GPU sampling against a hand-written NVML fixture, /proc sampling of a real child.

There is no GPU on the machines these tests run on, so nothing here was recorded from NVML:
the GPU timelines below are written by hand, in NVML's units (mW, mJ, bytes, MHz, bitmasks).
"""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pynvml  # type: ignore[import-untyped]
import pytest

from farm.errors import ConfigError
from workers.job.telemetry import (
    GpuInfo,
    RunTelemetry,
    Sampler,
    cpu_info,
    cuda_env,
    decode_throttle_reasons,
    gpus_for_devices,
    read_process,
)
from workers.job.telemetry.nvml import require_gpus

MIB = 1024 * 1024
IDLE = pynvml.nvmlClocksEventReasonGpuIdle
APP_CLOCKS = pynvml.nvmlClocksEventReasonApplicationsClocksSetting
POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap
HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
SW_THERMAL = pynvml.nvmlClocksEventReasonSwThermalSlowdown


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Row:
    """A GPU's state from time ``t`` on, in NVML's own units."""

    t: float
    power_mw: int
    energy_mj: int | None  # None: the GPU has no energy counter (pre-Volta)
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    temp_c: int = 60
    reasons: int = 0
    vram_used: int = 20_000 * MIB


@dataclass(frozen=True)
class Memory:
    """A c_nvmlMemory_t."""

    total: int
    free: int
    used: int


@dataclass
class Device:
    uuid: str
    name: str
    total: int
    timeline: list[Row] = field(default_factory=list)
    capability: tuple[int, int] | None = (8, 6)  # None: a driver that cannot tell
    processes: list[int] = field(default_factory=list)  # pids using it (compute)


@dataclass(frozen=True)
class ProcessInfo:
    """A c_nvmlProcessInfo_t."""

    pid: int


class FakeNvml:
    """hand-written NVML fixture; there is no GPU here to record from.

    Shaped like the pynvml module: handles are the devices themselves, each getter returns the
    device's timeline row in force at the fake clock's time, and unsupported features raise
    pynvml's own NVMLError subclasses.
    """

    def __init__(self, clock: FakeClock, devices: list[Device], driver: str = "570.133.20",
                 init_error: int | None = None, event_reasons: bool = True) -> None:
        self.clock = clock
        self.devices = devices
        self.driver = driver
        self.init_error = init_error
        self.event_reasons = event_reasons
        self.inits = 0
        self.shutdowns = 0

    def _row(self, handle: object) -> Row:
        assert isinstance(handle, Device)
        rows = [r for r in handle.timeline if r.t <= self.clock.now]
        return rows[-1]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object:
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError_InvalidArgument()
        return self.devices[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str, /) -> object:
        for device in self.devices:
            if device.uuid == uuid:
                return device
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetUUID(self, handle: object, /) -> bytes:
        assert isinstance(handle, Device)
        return handle.uuid.encode()  # old pynvml releases return bytes

    def nvmlDeviceGetName(self, handle: object, /) -> str:
        assert isinstance(handle, Device)
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: object, /) -> Memory:
        assert isinstance(handle, Device)
        used = self._row(handle).vram_used if handle.timeline else 0
        return Memory(total=handle.total, free=handle.total - used, used=used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: object, /) -> tuple[int, int]:
        assert isinstance(handle, Device)
        if handle.capability is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.capability

    def nvmlDeviceGetPowerUsage(self, handle: object, /) -> int:
        return self._row(handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object, /) -> int:
        energy = self._row(handle).energy_mj
        if energy is None:
            raise pynvml.NVMLError_NotSupported()
        return energy

    def nvmlDeviceGetClockInfo(self, handle: object, clock_type: int, /) -> int:
        row = self._row(handle)
        return {pynvml.NVML_CLOCK_SM: row.sm_mhz, pynvml.NVML_CLOCK_MEM: row.mem_mhz}[clock_type]

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int, /) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._row(handle).temp_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object, /) -> int:
        if not self.event_reasons:  # a driver older than the "event reasons" call
            raise pynvml.NVMLError_FunctionNotFound()
        return self._row(handle).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object, /) -> int:
        return self._row(handle).reasons

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object, /) -> list[ProcessInfo]:
        assert isinstance(handle, Device)
        return [ProcessInfo(pid) for pid in handle.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: object, /) -> list[ProcessInfo]:
        raise pynvml.NVMLError_NotSupported()


H100 = "GPU-6f1f6a0e-3c5b-4d7e-9a21-0c4f2b8e9d11"
L4 = "GPU-0b9e1c2d-7a44-4f0e-8d3b-5e6a7c8d9e02"


def gpu(uuid: str = H100) -> GpuInfo:
    return GpuInfo(index=0, uuid=uuid, name="NVIDIA H100 80GB HBM3", driver="570.133.20",
                   vram_total_mb=81559.0)


def run_timeline(nvml: FakeNvml, clock: FakeClock, ticks: list[float],
                 gpus: list[GpuInfo]) -> RunTelemetry:
    """Mark at the first tick, poll at the middle ones, mark at the last, and summarize."""
    with Sampler(gpus, pid=None, interval=3600, nvml=nvml, clock=clock) as sampler:
        clock.now = ticks[0]
        start = sampler.mark()
        for t in ticks[1:-1]:
            clock.now = t
            sampler.poll()
        clock.now = ticks[-1]
        end = sampler.mark()
        # A sample after the run must not count towards it.
        clock.now = ticks[-1] + 1
        sampler.poll()
        return sampler.summarize(start, end)


def test_energy_from_counter_deltas() -> None:
    clock = FakeClock()
    # Power readings say ~300 W, but the counter says 1000 J over 2 s: the counter wins.
    device = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB, [
        Row(100.0, 300_000, 5_000_000, vram_used=70_000 * MIB, temp_c=61),
        Row(101.0, 310_000, 5_400_000, sm_mhz=1755, temp_c=66),
        Row(102.0, 290_000, 6_000_000, temp_c=64),
    ])
    nvml = FakeNvml(clock, [device])
    telemetry = run_timeline(nvml, clock, [100.0, 101.0, 102.0], [gpu()])
    assert telemetry.energy_j == pytest.approx(1000.0)
    assert telemetry.mean_power_w == pytest.approx(500.0)  # energy over the 2 s window
    assert telemetry.max_vram_used_mb == pytest.approx(70_000)
    assert telemetry.mean_sm_clock_mhz == pytest.approx((1980 + 1755 + 1980) / 3)
    assert telemetry.max_temperature_c == 66
    assert not telemetry.throttled and telemetry.throttle_reasons == []
    assert telemetry.rss_mb is None and telemetry.cpu_seconds is None
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_energy_integrates_power_without_counter() -> None:
    clock = FakeClock()
    # A pre-Volta GPU: the counter raises NVMLError_NotSupported, so power is integrated.
    device = Device(H100, "Tesla P100-PCIE-16GB", 16 * 1024 * MIB, [
        Row(100.0, 100_000, None),
        Row(101.0, 200_000, None),
        Row(103.0, 200_000, None),
    ])
    telemetry = run_timeline(FakeNvml(clock, [device]), clock, [100.0, 101.0, 103.0], [gpu()])
    # (100+200)/2 * 1 s + 200 * 2 s
    assert telemetry.energy_j == pytest.approx(150.0 + 400.0)
    assert telemetry.mean_power_w == pytest.approx(550.0 / 3)


def test_energy_integrates_when_a_sample_lacks_the_counter() -> None:
    clock = FakeClock()
    device = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB, [
        Row(100.0, 100_000, 1_000_000),
        Row(101.0, 100_000, None),
        Row(102.0, 100_000, 9_000_000),
    ])
    telemetry = run_timeline(FakeNvml(clock, [device]), clock, [100.0, 101.0, 102.0], [gpu()])
    assert telemetry.energy_j == pytest.approx(200.0)


def test_two_gpus_add_up() -> None:
    clock = FakeClock()
    a = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB,
               [Row(100.0, 300_000, 0, vram_used=30_000 * MIB),
                Row(102.0, 300_000, 600_000, vram_used=29_000 * MIB)])
    b = Device(L4, "NVIDIA L4", 23034 * MIB,
               [Row(100.0, 70_000, None, vram_used=9_000 * MIB),
                Row(102.0, 70_000, None, vram_used=10_000 * MIB)])
    telemetry = run_timeline(FakeNvml(clock, [a, b]), clock, [100.0, 101.0, 102.0],
                             [gpu(H100), gpu(L4)])
    assert telemetry.energy_j == pytest.approx(600.0 + 140.0)
    assert telemetry.mean_power_w == pytest.approx(370.0)
    assert telemetry.max_vram_used_mb == pytest.approx(40_000)


def test_joules_per_token() -> None:
    clock = FakeClock()
    device = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB,
                    [Row(100.0, 250_000, 0), Row(104.0, 250_000, 1_000_000)])
    telemetry = run_timeline(FakeNvml(clock, [device]), clock, [100.0, 102.0, 104.0], [gpu()])
    assert telemetry.joules_per_token(500) == pytest.approx(2.0)
    assert telemetry.joules_per_token(0) is None
    no_gpu = RunTelemetry(None, None, None, None, None, False, [], 10.0, 1.0)
    assert no_gpu.joules_per_token(500) is None


@pytest.mark.parametrize(("reasons", "expected"), [
    (HW_THERMAL, ["hw_thermal_slowdown"]),
    (POWER_CAP, ["sw_power_cap"]),
    (SW_THERMAL | POWER_CAP | IDLE, ["sw_power_cap", "sw_thermal_slowdown"]),
    (IDLE, []),
    (APP_CLOCKS, []),
    (IDLE | APP_CLOCKS, []),
])
@pytest.mark.parametrize("event_reasons", [True, False])
def test_throttle_flag(reasons: int, expected: list[str], event_reasons: bool) -> None:
    clock = FakeClock()
    # The reason shows in one middle sample only; it still flags the whole run.
    device = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB, [
        Row(100.0, 300_000, 0, reasons=IDLE),
        Row(101.0, 700_000, 700_000, reasons=reasons),
        Row(102.0, 300_000, 1_400_000, reasons=APP_CLOCKS),
    ])
    nvml = FakeNvml(clock, [device], event_reasons=event_reasons)
    telemetry = run_timeline(nvml, clock, [100.0, 101.0, 102.0], [gpu()])
    assert telemetry.throttled is bool(expected)
    assert telemetry.throttle_reasons == expected


def test_decode_throttle_reasons_matches_pynvml_names() -> None:
    assert decode_throttle_reasons(pynvml.nvmlClocksEventReasonAll) == [
        "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
        "hw_power_brake_slowdown"]
    assert decode_throttle_reasons(pynvml.nvmlClocksEventReasonSyncBoost) == []


def test_summary_window_excludes_samples_outside_it() -> None:
    clock = FakeClock()
    device = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB, [
        Row(100.0, 100_000, 0, reasons=HW_THERMAL, temp_c=90),
        Row(110.0, 100_000, 1_000_000),
        Row(112.0, 100_000, 1_200_000),
    ])
    with Sampler([gpu()], pid=None, interval=3600, nvml=FakeNvml(clock, [device]),
                 clock=clock) as sampler:
        sampler.poll()  # the previous run, hot and throttled
        clock.now = 110.0
        start = sampler.mark()
        clock.now = 112.0
        end = sampler.mark()
    telemetry = sampler.summarize(start, end)
    assert telemetry.energy_j == pytest.approx(200.0)
    assert not telemetry.throttled and telemetry.max_temperature_c == 60


def test_background_thread_samples() -> None:
    clock = FakeClock()
    device = Device(H100, "NVIDIA H100 80GB HBM3", 80 * 1024 * MIB, [Row(0.0, 100_000, 0)])
    sampler = Sampler([gpu()], pid=None, interval=0.005, nvml=FakeNvml(clock, [device]),
                      clock=clock)
    with sampler:
        deadline = time.monotonic() + 2
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert len(sampler.samples) >= 3
    count = len(sampler.samples)
    time.sleep(0.02)
    assert len(sampler.samples) == count  # stopped


def test_gpus_for_devices_matches_indices_to_uuids() -> None:
    clock = FakeClock()
    devices = [Device(L4, "NVIDIA L4", 23034 * MIB, capability=(8, 9)),
               Device(H100, "NVIDIA H100 80GB HBM3", 81559 * MIB, capability=None)]
    nvml = FakeNvml(clock, devices)
    assert gpus_for_devices([1, 0, 7], nvml) == [
        GpuInfo(1, H100, "NVIDIA H100 80GB HBM3", "570.133.20", 81559.0, None),
        GpuInfo(0, L4, "NVIDIA L4", "570.133.20", 23034.0, "8.9"),
    ]
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    assert cuda_env(gpus_for_devices([1, 0], nvml)) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": f"{H100},{L4}"}


def test_devices_this_machine_lacks_are_refused_naming_where_they_came_from() -> None:
    nvml = FakeNvml(FakeClock(), [Device(L4, "NVIDIA L4", 23034 * MIB)])
    assert [gpu.uuid for gpu in require_gpus([0], "--devices 0", nvml)] == [L4]
    with pytest.raises(ConfigError, match=r"^--devices 0,3: this machine has no GPU 3 that "
                       r"NVML sees \(1 of the 2 named found; no NVIDIA driver, or fewer "
                       r"GPUs\); drop the devices to run on the CPU$"):
        require_gpus([0, 3], "--devices 0,3", nvml)
    blind = FakeNvml(FakeClock(), [], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(ConfigError, match=r"w\.yaml: devices: this machine has no GPU 0 "):
        require_gpus([0], "w.yaml: devices", blind)


def test_gpus_for_devices_without_driver() -> None:
    nvml = FakeNvml(FakeClock(), [], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert gpus_for_devices([0], nvml) == []
    assert gpus_for_devices([], None) == []


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None,
                    reason="this machine has an NVIDIA driver")
def test_gpus_for_devices_on_this_cpu_box() -> None:
    # The real pynvml, which cannot load libnvidia-ml here: no GPUs, no exception.
    assert gpus_for_devices([0, 1]) == []
    with Sampler([gpu()], pid=None, interval=3600) as sampler:
        start, end = sampler.mark(), sampler.mark()
    telemetry = sampler.summarize(start, end)
    assert telemetry.energy_j is None and not telemetry.throttled


def test_cpu_info() -> None:
    info = cpu_info()
    assert isinstance(info["logical_cpus"], int) and info["logical_cpus"] >= 1
    assert info["cpu_model"] is None or isinstance(info["cpu_model"], str)


@pytest.fixture
def busy_child() -> Iterator[subprocess.Popen[bytes]]:
    """A real process burning CPU, with a few MiB resident."""
    child = subprocess.Popen([sys.executable, "-c",
                              "b = bytearray(32 * 1024 * 1024)\nwhile True: pass"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_process_sampling_of_a_real_child(busy_child: subprocess.Popen[bytes]) -> None:
    sampler = Sampler([], pid=busy_child.pid, interval=0.01)
    with sampler:
        time.sleep(0.05)  # let the child allocate its buffer
        start = sampler.mark()
        time.sleep(0.3)
        end = sampler.mark()
    telemetry = sampler.summarize(start, end)
    assert telemetry.rss_mb is not None and telemetry.rss_mb > 32
    assert telemetry.cpu_seconds is not None and 0 < telemetry.cpu_seconds <= (end - start) + 0.05
    assert telemetry.energy_j is None and telemetry.mean_power_w is None
    assert len(sampler.process_samples) > 2  # the thread sampled too


def test_process_sampling_after_exit() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    sample = read_process(child.pid, 1.0)
    assert sample.rss_mb is None and sample.cpu_seconds is None


def test_other_processes_on_the_gpus_leave_the_farms_own_out() -> None:
    clock = FakeClock()
    devices = [Device(H100, "NVIDIA H100", 80 << 30, [Row(0.0, 100_000, None)],
                      processes=[100, 200]),
               Device(L4, "NVIDIA L4", 24 << 30, [Row(0.0, 70_000, None)],
                      processes=[200, 300])]
    with Sampler([gpu(H100), gpu(L4)], None, nvml=FakeNvml(clock, devices),
                 clock=clock) as sampler:
        assert sampler.other_gpu_processes({100}) == 2  # 200 (on both) and 300
        assert sampler.other_gpu_processes({100, 200, 300}) == 0
    assert Sampler([], None).other_gpu_processes({1}) is None
