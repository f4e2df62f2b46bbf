"""Sampling beside one arm block: the GPUs through NVML and the server process from /proc."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection

from workers.job.started import Started
from workers.job.telemetry.nvml import (
    GpuInfo,
    NvmlSource,
    Sample,
    open_devices,
    other_processes,
    read_sample,
    shutdown,
)
from workers.job.telemetry.procfs import ProcessSample, read_process
from workers.job.telemetry.summary import RunTelemetry, summarize


class Sampler(Started):
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
        opened = open_devices(self.gpus, self._nvml_arg) if self.gpus else None
        if opened is not None:
            self._nvml, self._handles = opened
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
            shutdown(self._nvml)
            self._nvml, self._handles = None, {}

    def mark(self) -> float:
        """Sample now and return the time: call just before and just after a run."""
        return self.poll()

    def poll(self) -> float:
        """Take one sample of every GPU and of the process (what the thread does each tick)."""
        with self._lock:
            t = self.clock()
            if self._nvml is not None:
                for uuid, handle in self._handles.items():
                    sample = read_sample(self._nvml, uuid, handle, t)
                    if sample is not None:
                        self._samples.append(sample)
            if self.pid is not None:
                self._process.append(read_process(self.pid, t))
        return t

    def other_gpu_processes(self, own: Collection[int]) -> int | None:
        """Processes on the sampled GPUs outside ``own`` now; None without NVML."""
        with self._lock:
            if self._nvml is None:
                return None
            return other_processes(self._nvml, self._handles.values(), own)

    def summarize(self, start: float, end: float) -> RunTelemetry:
        """The run's telemetry from the samples taken in [start, end] (both ends included)."""
        with self._lock:
            gpu = [s for s in self._samples if start <= s.t <= end]
            process = [p for p in self._process if start <= p.t <= end]
        return summarize(gpu, process)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.poll()
