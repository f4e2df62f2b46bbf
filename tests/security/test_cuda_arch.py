"""`cuda-arch` is one type (``farm.matrix.cuda_arch.CudaArch``) wherever a build is asked
for: a matrix's build, `farm build --cuda-arch`, a stored job's source build. Crafted
values are refused in each with one line naming the key and the fix, before git, cmake or
a worker sees them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from farm.matrix.cuda_arch import MAX_ARCHITECTURES, CudaArch
from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from tests.helpers import matrix_dict, new_repository, run_cli, write_matrix

# A value, and what the one line must say of it.
CRAFTED: list[tuple[str, str]] = [
    ("90;-DCMAKE_CUDA_COMPILER_LAUNCHER=x", "holds '-DCMAKE_CUDA_COMPILER_LAUNCHER=x', not a "
     "compute capability"),
    ("90 -DCMAKE_CUDA_HOST_COMPILER=/tmp/x", "is not a compute capability"),
    ("86;$(touch pwned)", "holds '$(touch pwned)'"),
    ("86`id`", "is not a compute capability"),
    ("86|sh", "is not a compute capability"),
    ("native", "is cmake's 'native'"),
    ("all-major", "is cmake's 'all-major'"),
    ("", "is empty"),
    ("86;", "holds '', not a compute capability"),
    ("86\n", r"'86\n' is not a compute capability"),
    ("86\x00", r"'86\x00' is not a compute capability"),
    ("\x1b]0;x\x07", r"'\x1b]0;x\x07' holds '\x1b]0', not a compute capability"),
    (";".join(["86"] * (MAX_ARCHITECTURES + 1)), f"lists {MAX_ARCHITECTURES + 1} "
     f"architectures; at most {MAX_ARCHITECTURES}"),
    ("8" * 100_000, "(100000 characters) is not a compute capability"),
]
IDS = [f"{i}-{value[:12].encode('unicode_escape').decode()}" for i, (value, _) in
       enumerate(CRAFTED)]
FIX = "give compute capabilities such as 86 or 86;89;90a (CMAKE_CUDA_ARCHITECTURES)"


def _one_line(stderr: str) -> str:
    assert stderr.startswith("error: ") and "Traceback" not in stderr, stderr
    [line] = stderr.strip().splitlines()
    assert FIX in line
    return line


@pytest.mark.parametrize(("value", "message"), CRAFTED, ids=IDS)
def test_a_crafted_cuda_arch_is_refused_by_farm_build(value: str, message: str,
                                                      tmp_path: Path) -> None:
    result = run_cli("build", "x", "--source", str(tmp_path), "--backend", "cuda",
                     "--cuda-arch", value, "--dry-run")
    assert result.exit_code == 2, result.output
    line = _one_line(result.stderr)
    assert line.startswith("error: --cuda-arch: ") and message in line, line
    assert "cmake" not in result.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("cuda") / "llama.cpp"
    new_repository(repo, {"CMakeLists.txt": ""}, "c0")
    return repo


def _matrix(source: Path, **build: Any) -> dict[str, Any]:
    return matrix_dict(Path("m.gguf"), build={"name": "pr", "git": str(source),
                                              "ref": "master", "backend": "cuda", **build})


@pytest.mark.parametrize(("value", "message"), CRAFTED, ids=IDS)
def test_a_crafted_cuda_arch_is_refused_by_a_matrix(value: str, message: str,
                                                    tmp_path: Path, source: Path) -> None:
    path = write_matrix(tmp_path, _matrix(source, **{"cuda-arch": value}))
    result = run_cli("run", "--dry-run", str(path))
    assert result.exit_code == 2, result.output
    line = _one_line(result.stderr)
    assert line.startswith(f"error: {path}: build.cuda-arch: ") and message in line, line


@pytest.mark.parametrize(("value", "message"), CRAFTED, ids=IDS)
def test_a_stored_job_cannot_hold_a_crafted_cuda_arch(value: str, message: str,
                                                      tmp_path: Path, source: Path) -> None:
    """A worker validates the row it reads as a ``JobSpec``: the value never reaches a
    ``BuildRequest``."""
    [spec] = load_matrix(write_matrix(tmp_path, _matrix(source, **{"cuda-arch": "86"})))[1]
    stored = spec.model_dump(mode="json")
    assert stored["variant"]["build"]["source"]["cuda_arch"] == "86"
    for arm in ("baseline", "variant"):
        stored[arm]["build"]["source"]["cuda_arch"] = value
    with pytest.raises(ValidationError, match="cuda_arch") as refused:
        JobSpec.model_validate(stored)
    assert message in str(refused.value)


def test_a_valid_list_is_kept_as_written_and_a_job_key_unchanged(tmp_path: Path,
                                                                 source: Path) -> None:
    """The type stores and hashes as the plain string: a job's key is what it was."""
    [spec] = load_matrix(write_matrix(tmp_path, _matrix(source, **{"cuda-arch": "86;89;90a"})))[1]
    arch = spec.build.source.cuda_arch if spec.build.source else None
    assert isinstance(arch, CudaArch) and arch == "86;89;90a"
    assert JobSpec.model_validate(spec.model_dump(mode="json")).job_key == spec.job_key
    with pytest.raises(ValueError, match="is not a compute capability"):
        CudaArch("86 89")
