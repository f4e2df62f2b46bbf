"""Which cmake options a build may set, on the provisioned b11434 tree's own CMake cache.

Every option of the tree is placed in one class (allowed with its type, fixed by the farm,
or refused with its reason): the cache of the provisioned CPU build (``cmake -N -LAH``,
cmake's own and found packages' entries included) and every ``option(`` and ``set(...
CACHE`` of the tree's CMakeLists files (the CUDA, Vulkan, Metal and other backends' options
the CPU build never configured). A later llama.cpp with a new option fails here until it
is placed in farm/matrix/cmake_options.py. Matrices and job rows that name an option that
runs, loads or downloads code are refused with the reason, before anything is resolved.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.matrix.cmake_options import (
    ALLOWED,
    FIXED,
    REFUSED,
    REFUSED_FAMILIES,
    Reason,
    check_cmake_option,
    refused,
)
from farm.matrix.spec import BuildSource
from farm.settings import load_settings
from tests.helpers import matrix_dict, new_repository, run_cli, write_matrix
from workers.job.runtime.sandbox import Sandbox
from workers.paths import NodePaths
from workers.setup.builds import INSIDE_TREE, BuildRequest, configure_argv
from workers.setup.manifests import load_manifest
from workers.setup.provision import CPU_BUILD_NAME, Provisioned

ROOT = Path(__file__).resolve().parents[2]
# Names the tables keep that the CPU build's cache and the tree's CMakeLists lack: an older
# tree's CUDA option, the farm's download switch for older trees, the build number (a plain
# variable, not an option) and cmake's CUDA architectures (in a CUDA build's cache).
ELSEWHERE = {"GGML_CUDA_F16", "LLAMA_CURL", "LLAMA_BUILD_NUMBER", "CMAKE_CUDA_ARCHITECTURES"}
_CACHE_ENTRY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.+-]*):([A-Z]+)=", re.MULTILINE)
_OPTION = re.compile(r"\boption\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_SET_CACHE = re.compile(r"\bset\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s[^)]*?\bCACHE\s+([A-Z]+)",
                        re.IGNORECASE)


@pytest.fixture(scope="module")
def tree(provisioned: Provisioned) -> tuple[Path, Path]:
    """The provisioned build's source tree, and its build directory as the build saw it
    (``cmake -B BUILD``: in the sandbox, inside the tree at INSIDE_TREE)."""
    manifest = load_manifest(CPU_BUILD_NAME, NodePaths.of(load_settings()))
    assert manifest is not None and manifest.tree is not None
    return Path(manifest.tree), Path(manifest.configure[manifest.configure.index("-B") + 1])


@pytest.fixture(scope="module")
def cached(tree: tuple[Path, Path]) -> set[str]:
    """Every entry of the build's cache a user can set (``cmake -N -LAH``: read, not run),
    seeing the tree where the build saw it."""
    argv = Sandbox().command(["cmake", "-N", "-LAH", str(tree[1])], {"PATH": "/usr/bin:/bin"},
                             trusted=True, placed=[(tree[0], str(INSIDE_TREE))])
    listed = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout
    return {name for name, kind in _CACHE_ENTRY.findall(listed)
            if kind not in ("INTERNAL", "STATIC")}


@pytest.fixture(scope="module")
def declared(tree: tuple[Path, Path]) -> set[str]:
    """Every ``option(NAME`` and ``set(NAME ... CACHE`` of the tree's CMakeLists files."""
    names = set()
    for path in tree[0].rglob("CMakeLists.txt"):
        if any(part.startswith("build-specfarm-") for part in path.relative_to(tree[0]).parts):
            continue
        text = re.sub(r"(?m)^\s*#.*$", "", path.read_text(errors="replace"))
        names |= set(_OPTION.findall(text))
        names |= {name for name, kind in _SET_CACHE.findall(text)
                  if kind.upper() != "INTERNAL"}
    return names


def placement(name: str) -> str | None:
    """The one class ``name`` is in, None if no list places it; a name in two lists fails."""
    classes = [label for label, member in (("allowed", name in ALLOWED),
                                           ("fixed", name in FIXED),
                                           ("refused", name in REFUSED)) if member]
    assert len(classes) <= 1, f"{name} is {' and '.join(classes)}"
    if classes:
        return classes[0]
    return "refused by family" if refused(name) is not None else None


def test_every_option_of_the_tree_is_allowed_fixed_or_refused_with_a_reason(
        cached: set[str], declared: set[str]) -> None:
    universe = cached | declared
    assert len(cached) > 200 and len(declared) > 150
    # The GPU backends' options are there, and those only the backends' own CMakeLists
    # declare (which the CPU build never read) from the files.
    assert {"GGML_CUDA_FA_ALL_QUANTS", "GGML_VULKAN_VALIDATE", "GGML_METAL_NDEBUG"} <= declared
    assert {"GGML_RPC_RDMA", "GGML_HEXAGON_HTP_CERT", "KLEIDIAI_BUILD_TESTS"} <= (declared
                                                                               - cached)
    placed = {name: placement(name) for name in sorted(universe)}
    unplaced = [name for name, where in placed.items() if where is None]
    assert not unplaced, f"place these in farm/matrix/cmake_options.py: {unplaced}"
    # llama.cpp's own options are each named in a table: no family decides for them.
    project = [name for name in universe if name.startswith(("GGML_", "LLAMA_"))]
    by_family = [name for name in project if placed[name] == "refused by family"]
    assert not by_family, by_family
    listed = [name for name in [*ALLOWED, *FIXED, *REFUSED] if name.startswith(("GGML_", "LLAMA_"))]
    assert not any(pattern.fullmatch(name) for pattern, _ in REFUSED_FAMILIES for name in listed)
    # Nothing in the tables the tree lacks (a typo would leave the real option unplaced).
    assert (set(ALLOWED) | set(FIXED) | set(REFUSED)) - universe == ELSEWHERE
    counts = {label: sum(where == label for where in placed.values())
              for label in ("allowed", "fixed", "refused", "refused by family")}
    print(f"{len(universe)} options: {counts}")


def test_the_fixed_options_are_the_ones_the_farm_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    set_by_farm = set()
    for backend in ("cpu", "cuda", "metal", "vulkan"):
        request = BuildRequest(name="x", source="y", backend=backend, build_number=1)
        for arg in configure_argv(request, Path("/s"), Path("/s/b")):
            if arg.startswith("-D"):
                set_by_farm.add(arg[2:].partition("=")[0])
    # Every name the farm sets is fixed, a default a build may change, or refused because
    # it runs a program (the farm's own ccache launchers).
    defaults = {name for name in set_by_farm if name in ALLOWED}
    assert defaults == {"CMAKE_BUILD_TYPE", "GGML_NATIVE"}
    launchers = set_by_farm - set(FIXED) - defaults
    assert launchers == {"CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER",
                         "CMAKE_CUDA_COMPILER_LAUNCHER"}
    assert all((why := refused(name)) and why.reason is Reason.RUNS_PROGRAMS
               for name in launchers)
    assert set(FIXED) <= set_by_farm
    for name in sorted(FIXED):
        with pytest.raises(ConfigError, match=f"'-D{name}=ON': the farm "):
            configure_argv(BuildRequest(name="x", source="y", cmake_args=(f"-D{name}=ON",)),
                           Path("/s"), Path("/s/b"))


def test_every_allowed_option_is_in_the_docs() -> None:
    docs = (ROOT / "docs" / "builds.md").read_text()
    assert [name for name in ALLOWED if f"`{name}`" not in docs] == []


@pytest.mark.parametrize(("arg", "normal"), [
    ("-DGGML_CUDA_FA_ALL_QUANTS=on", "-DGGML_CUDA_FA_ALL_QUANTS=ON"),
    ("-DGGML_AVX512:BOOL=true", "-DGGML_AVX512=ON"),
    ("-DGGML_CUDA_GRAPHS=0", "-DGGML_CUDA_GRAPHS=OFF"),
    ("-DGGML_NATIVE=Yes", "-DGGML_NATIVE=ON"),
    ("-DCMAKE_BUILD_TYPE=relwithdebinfo", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"),
    ("-DGGML_SCHED_MAX_COPIES=08", "-DGGML_SCHED_MAX_COPIES=8"),
    ("-DGGML_CUDA_FA_QUANTS=Q8_0-Q8_0,q4_0-q4_0", "-DGGML_CUDA_FA_QUANTS=q8_0-q8_0;q4_0-q4_0"),
    ("-DGGML_CUDA_FA_QUANTS=ALL", "-DGGML_CUDA_FA_QUANTS=all"),
    ("-DGGML_CUDA_COMPRESSION_MODE=SPEED", "-DGGML_CUDA_COMPRESSION_MODE=speed"),
    ("-DGGML_BLAS_VENDOR=openblas", "-DGGML_BLAS_VENDOR=OpenBLAS"),
    ("-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod", "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod"),
])
def test_an_allowed_option_is_kept_in_one_spelling(arg: str, normal: str) -> None:
    assert check_cmake_option(arg, "cmake[0]") == normal


@pytest.mark.parametrize(("arg", "message"), [
    ("-DGGML_AVX512=maybe", "GGML_AVX512 takes ON or OFF"),
    ("-DGGML_AVX512=", "GGML_AVX512 takes ON or OFF"),
    ("-DCMAKE_BUILD_TYPE=Debug", "CMAKE_BUILD_TYPE takes one of Release, RelWithDebInfo"),
    ("-DGGML_SCHED_MAX_COPIES=0", "takes a whole number from 1 to 16"),
    ("-DGGML_SCHED_MAX_COPIES=4;5", "takes a whole number from 1 to 16"),
    ("-DGGML_CUDA_FA_QUANTS=q8_0-q9_9", "GGML_CUDA_FA_QUANTS takes 'all' or K-V type pairs"),
    ("-DGGML_CUDA_FA_QUANTS=q8_0-q8_0;", "GGML_CUDA_FA_QUANTS takes 'all' or K-V type pairs"),
    ("-DGGML_CPU_ARM_ARCH=armv8;-fplugin=/tmp/x.so", "GGML_CPU_ARM_ARCH takes one architecture"),
    ("-DGGML_CPU_ARM_ARCH=-fplugin=/tmp/x.so", "GGML_CPU_ARM_ARCH takes one architecture"),
    ("-DGGML_BLAS_VENDOR=/tmp/libx.so", "GGML_BLAS_VENDOR takes one of Generic, OpenBLAS"),
    ("-DGGML_BLAS_VENDOR=FlexiBLAS", "GGML_BLAS_VENDOR takes one of Generic, OpenBLAS"),
])
def test_an_allowed_option_with_a_value_of_another_type_is_refused(arg: str,
                                                                   message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_cmake_option(arg, "cmake[0]")
    assert str(caught.value).startswith(f"cmake[0]: cmake option {arg!r}: ")
    assert message in str(caught.value)


# (a build's cmake option, what the one-line error must say)
CRAFTED: list[tuple[str, str]] = [
    ("-DCMAKE_CXX_COMPILER_LAUNCHER=sh;-c;touch /tmp/pwned",
     "CMAKE_CXX_COMPILER_LAUNCHER runs a program: cmake runs it around every compile or link"),
    ("-DCMAKE_C_COMPILER_LAUNCHER=/tmp/evil", "CMAKE_C_COMPILER_LAUNCHER runs a program"),
    ("-DCMAKE_CUDA_COMPILER_LAUNCHER=/tmp/evil", "CMAKE_CUDA_COMPILER_LAUNCHER runs a program"),
    ("-DCMAKE_CXX_LINKER_LAUNCHER=/tmp/evil", "CMAKE_CXX_LINKER_LAUNCHER runs a program"),
    ("-DCMAKE_CXX_COMPILER=/tmp/evil", "CMAKE_CXX_COMPILER runs a program: a compiler, linker"),
    ("-DCMAKE_CUDA_HOST_COMPILER=/tmp/evil",
     "CMAKE_CUDA_HOST_COMPILER runs a program: a compiler, linker or tool the build runs"),
    ("-DCMAKE_CXX_CLANG_TIDY=/tmp/evil", "CMAKE_CXX_CLANG_TIDY runs a program"),
    ("-DCMAKE_PROJECT_INCLUDE=/tmp/evil.cmake",
     "CMAKE_PROJECT_INCLUDE loads code or files: cmake code that configure reads and runs"),
    ("-DCMAKE_PROJECT_llama.cpp_INCLUDE=/tmp/evil.cmake",
     "CMAKE_PROJECT_llama.cpp_INCLUDE loads code or files"),
    ("-DCMAKE_PROJECT_ggml_INCLUDE_BEFORE=/tmp/evil.cmake",
     "CMAKE_PROJECT_ggml_INCLUDE_BEFORE loads code or files"),
    ("-DCMAKE_TOOLCHAIN_FILE=/tmp/evil.cmake", "CMAKE_TOOLCHAIN_FILE loads code or files"),
    ("-DCMAKE_USER_MAKE_RULES_OVERRIDE=/tmp/evil.cmake",
     "CMAKE_USER_MAKE_RULES_OVERRIDE loads code or files"),
    ("-DCMAKE_MODULE_PATH=/tmp", "CMAKE_MODULE_PATH loads code or files"),
    ("-DCMAKE_CXX_FLAGS=-fplugin=/tmp/evil.so",
     "CMAKE_CXX_FLAGS passes its text to a compiler as flags: -fplugin="),
    ("-DCMAKE_EXE_LINKER_FLAGS=-Wl,--wrap=main", "CMAKE_EXE_LINKER_FLAGS passes its text"),
    ("-DCMAKE_INSTALL_PREFIX=/", "CMAKE_INSTALL_PREFIX is not an engine option"),
    ("-DGGML_RPC=ON", "GGML_RPC reaches the network: a backend that offloads the model to RPC"),
    ("-DGGML_BACKEND_DL=ON", "GGML_BACKEND_DL loads code or files: builds the backends as "
     "shared objects that the server loads at run time"),
    ("-DGGML_BACKEND_DIR=/tmp", "GGML_BACKEND_DIR loads code or files"),
    ("-DGGML_CPU_ALL_VARIANTS=ON", "GGML_CPU_ALL_VARIANTS loads code or files"),
    ("-DGGML_VULKAN_SHADERS_GEN_TOOLCHAIN=/tmp/evil.cmake",
     "GGML_VULKAN_SHADERS_GEN_TOOLCHAIN loads code or files: a cmake toolchain file"),
    ("-DGGML_METAL_EMBED_LIBRARY=OFF", "GGML_METAL_EMBED_LIBRARY loads code or files"),
    ("-DLLAMA_USE_SYSTEM_GGML=ON", "LLAMA_USE_SYSTEM_GGML loads code or files"),
    ("-DGGML_OPENMP_FETCH=ON", "GGML_OPENMP_FETCH downloads from the internet"),
    ("-DGGML_CUDA_CCCL_VERSION=v3.0.0", "GGML_CUDA_CCCL_VERSION downloads from the internet"),
    ("-DGGML_CPU_KLEIDIAI=ON", "GGML_CPU_KLEIDIAI downloads from the internet"),
    ("-DLLAMA_LLGUIDANCE=ON", "LLAMA_LLGUIDANCE downloads from the internet"),
    ("-DLLAMA_BUILD_UI=ON", "LLAMA_BUILD_UI downloads from the internet"),
    ("-DLLAMA_UI_HF_BUCKET=evil/ui", "LLAMA_UI_HF_BUCKET downloads from the internet"),
    ("-DGGML_CCACHE=ON", "GGML_CCACHE runs a program"),
    ("-DMTMD_VIDEO=ON", "MTMD_VIDEO runs a program"),
    ("-DGIT_EXECUTABLE=/tmp/evil", "GIT_EXECUTABLE runs a program"),
    ("-DGGML_GPROF=ON", "GGML_GPROF writes files"),
    ("-DGGML_METAL_STD=metal3.1;-fplugin=/tmp/x", "GGML_METAL_STD passes its text to a compiler"),
    ("-DGGML_HIP=ON", "GGML_HIP belongs to a backend the farm does not build"),
    ("-DLLAMA_BUILD_TOOLS=ON", "LLAMA_BUILD_TOOLS is not an engine option a benchmark varies"),
    ("-DLLAMA_BUILD_SERVER=OFF", "LLAMA_BUILD_SERVER is not an engine option"),
    ("-DLLAMA_CURL=ON", "the farm builds llama.cpp statically, without downloads, TLS and "
     "subprocesses"),
    ("-DLLAMA_OPENSSL=ON", "without downloads, TLS and subprocesses"),
    ("-DLLAMA_SUBPROCESS=ON", "without downloads, TLS and subprocesses"),
    ("-DLLAMA_USE_PREBUILT_UI=ON", "without downloads, TLS and subprocesses"),
    ("-DBUILD_SHARED_LIBS=ON", "the farm builds llama.cpp statically"),
    ("-DLLAMA_BUILD_TESTS=ON", "the farm sets it from the targets it builds"),
    ("-DGGML_CUDA=ON", "the farm sets it from the build's `backend:`"),
    ("-DCMAKE_CUDA_ARCHITECTURES=90", "the farm sets it from the build's `cuda-arch:`"),
    ("-DLLAMA_BUILD_NUMBER=99999", "the farm sets it from an sdist's version"),
    ("-Dggml_avx512=ON", "ggml_avx512 is not on the farm's list of llama.cpp build options a "
     "benchmark varies (did you mean GGML_AVX512? names are case-sensitive)"),
    ("-DGGML_NEW_OPTION=ON", "GGML_NEW_OPTION is not on the farm's list"),
    ("-DCMAKE_CXX_COMPILER_LAUNCHER\n=x", "give -DNAME=VALUE"),
    ("--trace-expand", "give -DNAME=VALUE"),
    ("-C/tmp/evil.cmake", "give -DNAME=VALUE"),
    ("-DGGML_CPU_ARM_ARCH=armv8;-fplugin=/tmp/x.so", "GGML_CPU_ARM_ARCH takes one architecture"),
]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A local git repository a matrix's build names (one commit)."""
    repo = tmp_path / "llama.cpp"
    new_repository(repo, {"CMakeLists.txt": "project(llama.cpp)\n"}, "A")
    return repo


def _matrix(tmp_path: Path, smollm2: Path, source: Path, cmake: list[str]) -> Path:
    return write_matrix(tmp_path, matrix_dict(smollm2, build={
        "name": "pr", "git": str(source), "ref": "master", "cmake": cmake}))


@pytest.mark.parametrize(("arg", "message"), CRAFTED,
                         ids=[f"{i}-{arg[:40]}" for i, (arg, _) in enumerate(CRAFTED)])
@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_crafted_cmake_option_is_refused_with_its_reason_and_exit_2(
        tmp_path: Path, smollm2: Path, source: Path, arg: str, message: str,
        command: str) -> None:
    path = _matrix(tmp_path, smollm2, source, ["-DGGML_AVX2=OFF", arg])
    result = run_cli(command, "--dry-run", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {path}: build.cmake[1]: cmake option {arg!r}: ")
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "farm-data" / "farm.db").exists()  # nothing written


def test_the_same_matrix_with_allowed_options_runs_them_in_one_spelling(
        tmp_path: Path, smollm2: Path, source: Path) -> None:
    path = _matrix(tmp_path, smollm2, source, ["-DGGML_AVX2=off", "-DGGML_CUDA_FA_ALL_QUANTS=on",
                                               "-DCMAKE_BUILD_TYPE=relwithdebinfo"])
    result = run_cli("run", "--dry-run", str(path), width=400)
    assert result.exit_code == 0, result.output
    assert ("cpu -DGGML_AVX2=OFF -DGGML_CUDA_FA_ALL_QUANTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"
            in result.output), result.output


@pytest.mark.parametrize(("arg", "message"), CRAFTED[:20],
                         ids=[f"{i}-{arg[:40]}" for i, (arg, _) in enumerate(CRAFTED[:20])])
def test_a_job_row_with_a_refused_cmake_option_does_not_parse(arg: str, message: str) -> None:
    row = {"git": "https://github.com/ggml-org/llama.cpp", "ref": "master", "commit": "a" * 40,
           "backend": "cuda", "cmake": ["-DGGML_CUDA_GRAPHS=ON", arg]}
    with pytest.raises(ConfigError) as caught:
        BuildSource.model_validate(row)
    assert message in str(caught.value)
    row["cmake"] = ["-DGGML_CUDA_GRAPHS=on"]
    assert BuildSource.model_validate(row).cmake == ("-DGGML_CUDA_GRAPHS=ON",)
