"""Per-run hardware telemetry: NVML sampling of the worker's GPUs, the server process's
RSS and CPU time from /proc, and the node's other work.

A worker runs one llama-server per arm block; a :class:`Sampler` runs beside it for the whole
block, and the executor calls :meth:`Sampler.mark` before and after each run, then
:meth:`Sampler.summarize` over the two marks to get that run's :class:`RunTelemetry`.

    nvml.py     which GPUs (by UUID), the environment pinning a server to them, one reading
    procfs.py   the host CPU, and one reading of the server process (RSS, CPU time)
    summary.py  a run's energy, power, peaks and throttling from its window's readings
    sampler.py  the background thread that takes the readings while an arm runs
    node.py     the node's other work: every other process's CPU time, from /proc
"""

from workers.job.telemetry.nvml import (
    GpuInfo,
    NvmlSource,
    Sample,
    all_gpus,
    cuda_env,
    decode_throttle_reasons,
    gpus_for_devices,
)
from workers.job.telemetry.procfs import ProcessSample, cpu_info, read_process
from workers.job.telemetry.sampler import Sampler
from workers.job.telemetry.summary import RunTelemetry

__all__ = [
    "GpuInfo",
    "NvmlSource",
    "ProcessSample",
    "RunTelemetry",
    "Sample",
    "Sampler",
    "all_gpus",
    "cpu_info",
    "cuda_env",
    "decode_throttle_reasons",
    "gpus_for_devices",
    "read_process",
]
