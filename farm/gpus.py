"""GPUs as the farm names and measures them: the name of a GPU class (``ClassName``: what a
matrix's ``gpu-classes``, a job, a machine's ``FARM_GPU_CLASS`` and a shared bundle call a
class of machines), and the memory bandwidth of common GPUs, for the decode bound: a token
reads every weight once.

Decode tok/s can at best reach bandwidth / bytes read per token (about the model file's
size for a dense model); the report shows how close a run got. Names are matched by the
substring NVML reports (e.g. "NVIDIA GeForce RTX 3090"). Figures: vendors' spec sheets.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# One class of machines whose runs join one history: lower case, no '/', no leading '.'.
ClassName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9_.-]*$")]

# GB/s (10^9 bytes per second).
MEMORY_BANDWIDTH_GBPS: dict[str, float] = {
    "RTX 3060": 360.0,
    "RTX 3080": 760.0,
    "RTX 3090": 936.0,
    "RTX 4070": 504.0,
    "RTX 4080": 717.0,
    "RTX 4090": 1008.0,
    "RTX 5080": 960.0,
    "RTX 5090": 1792.0,
    "RTX A6000": 768.0,
    "RTX 6000 Ada": 960.0,
    "L4": 300.0,
    "L40S": 864.0,
    "A10": 600.0,
    "A100-SXM4-40GB": 1555.0,
    "A100-SXM4-80GB": 2039.0,
    "A100-PCIE-40GB": 1555.0,
    "A100 80GB PCIe": 1935.0,
    "H100 PCIe": 2000.0,
    "H100 80GB HBM3": 3350.0,
    "H200": 4800.0,
}


def bandwidth_gbps(gpu_name: str | None) -> float | None:
    """The bandwidth of the longest table name contained in ``gpu_name`` (most specific)."""
    if not gpu_name:
        return None
    matches = [name for name in MEMORY_BANDWIDTH_GBPS if name in gpu_name]
    return MEMORY_BANDWIDTH_GBPS[max(matches, key=len)] if matches else None


def bandwidth_bound_share(tok_s: float, gpu_name: str | None, model_bytes: int) -> float | None:
    """Decode tok/s as a share of the bandwidth bound, or None when the GPU is unknown."""
    bandwidth = bandwidth_gbps(gpu_name)
    if bandwidth is None or model_bytes <= 0:
        return None
    return tok_s / (bandwidth * 1e9 / model_bytes)
