"""Which cmake options a build may set: an allow-list by name, each option typed.

A matrix's ``cmake:`` (and ``farm build --cmake-arg``) reaches the configure step of every
worker that builds the source, so an option that names a program, a file or a URL is a
way to run code there: a compiler launcher runs anything (``sh;-c;...``), a toolchain or
project-include file is cmake code, RPC reaches the network, dynamically loaded backends
run whatever shared objects sit in a directory. So a build sets only the options a
benchmark varies (``ALLOWED``: llama.cpp's CPU instruction sets and kernels, its CUDA
kernels, ``CMAKE_BUILD_TYPE``), each with a type its value must have and spelled one way
(``-DGGML_AVX512=on`` becomes ``-DGGML_AVX512=ON``). ``FIXED`` are the options the farm
sets itself (static, no downloads, TLS or subprocesses; backend, CUDA architectures,
targets), with where a matrix chooses them instead. Every other option of llama.cpp
b11434 is in ``REFUSED`` with the reason, as are cmake's own families (``REFUSED_FAMILIES``);
an option neither list knows (a later llama.cpp's) is refused too.
``tests/security/test_cmake_options.py`` places every option of the provisioned tree.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from enum import Enum

from farm.errors import ConfigError


class Kind(Enum):
    """What the value of an allowed option must be."""

    SWITCH = "ON or OFF (TRUE/FALSE, YES/NO, 1/0 are read as ON/OFF)"
    NUMBER = "a whole number in the option's range"
    CHOICE = "one of the option's values"
    ARCH = "one architecture name (letters, digits, '.', '+', '_', '-'; e.g. armv8.2-a+dotprod)"
    FA_QUANTS = ("'all' or K-V type pairs separated by ';' or ',' (types: q4_0, q4_1, q5_0, "
                 "q5_1, q8_0, bf16, f16; e.g. q8_0-q8_0;q4_0-q4_0)")


@dataclass(frozen=True)
class Allowed:
    """An option a build may set: the type of its value."""

    kind: Kind
    choices: tuple[str, ...] = ()
    low: int = 0
    high: int = 0

    @property
    def takes(self) -> str:
        """What its value must be, in words."""
        if self.kind is Kind.CHOICE:
            return f"one of {', '.join(self.choices)}"
        if self.kind is Kind.NUMBER:
            return f"a whole number from {self.low} to {self.high}"
        return str(self.kind.value)


def _allowed(kind: Kind, *names: str) -> dict[str, Allowed]:
    return dict.fromkeys(names, Allowed(kind))


ALLOWED: dict[str, Allowed] = {
    # CPU instruction sets the kernels are compiled for.
    **_allowed(Kind.SWITCH, "GGML_NATIVE", "GGML_SSE42", "GGML_AVX", "GGML_AVX_VNNI",
               "GGML_AVX2", "GGML_BMI2", "GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI",
               "GGML_AVX512_BF16", "GGML_FMA", "GGML_F16C", "GGML_AMX_TILE", "GGML_AMX_INT8",
               "GGML_AMX_BF16", "GGML_LASX", "GGML_LSX", "GGML_RVV", "GGML_RV_ZFH",
               "GGML_RV_ZVFH", "GGML_RV_ZICBOP", "GGML_RV_ZIHINTPAUSE", "GGML_RV_ZVFBFWMA",
               "GGML_XTHEADVECTOR", "GGML_VXE"),
    **_allowed(Kind.ARCH, "GGML_CPU_ARM_ARCH", "GGML_CPU_POWERPC_CPUTYPE"),
    # CPU kernels, threading and linking.
    **_allowed(Kind.SWITCH, "GGML_CPU_REPACK", "GGML_CPU_HBM", "GGML_LLAMAFILE",
               "GGML_OPENMP", "GGML_ACCELERATE", "GGML_BLAS", "GGML_LTO"),
    # Not FlexiBLAS: it picks the library it loads at run time from config files and the
    # environment.
    "GGML_BLAS_VENDOR": Allowed(Kind.CHOICE, choices=(
        "Generic", "OpenBLAS", "FLAME", "ATLAS", "Intel10_64lp", "NVHPC", "Apple")),
    "GGML_SCHED_MAX_COPIES": Allowed(Kind.NUMBER, low=1, high=16),
    # CUDA kernels and how they run (GGML_CUDA_F16: older trees; b11434 has none).
    **_allowed(Kind.SWITCH, "GGML_CUDA_FORCE_MMQ", "GGML_CUDA_FORCE_CUBLAS",
               "GGML_CUDA_NO_PEER_COPY", "GGML_CUDA_NO_VMM", "GGML_CUDA_FA",
               "GGML_CUDA_FA_ALL_QUANTS", "GGML_CUDA_GRAPHS", "GGML_CUDA_NCCL", "GGML_CUDA_F16"),
    "GGML_CUDA_FA_QUANTS": Allowed(Kind.FA_QUANTS),
    "GGML_CUDA_COMPRESSION_MODE": Allowed(Kind.CHOICE,
                                          choices=("none", "speed", "balance", "size")),
    # Metal kernels, and the optimisation level.
    **_allowed(Kind.SWITCH, "GGML_METAL_NDEBUG"),
    "CMAKE_BUILD_TYPE": Allowed(Kind.CHOICE, choices=("Release", "RelWithDebInfo")),
}

_SAFE = ("the farm builds llama.cpp statically, without downloads, TLS and subprocesses, so "
         "that no server it starts reaches the network, runs a program or another build's "
         "libraries; remove it")
_BACKEND = ("the farm sets it from the build's `backend:` (cpu, cuda, metal, vulkan; `farm "
            "build --backend`); choose the backend there")
_TARGETS = "the farm sets it from the targets it builds (llama-server); remove it"
# What the farm sets on every build (workers.setup.builds.configure_argv), and how a matrix
# chooses it instead. CMAKE_BUILD_TYPE and GGML_NATIVE are the farm's defaults, which a
# build may change (ALLOWED); the compiler launchers it sets are refused (they run programs).
FIXED: dict[str, str] = {
    **dict.fromkeys(("LLAMA_CURL", "LLAMA_OPENSSL", "LLAMA_SUBPROCESS", "LLAMA_USE_PREBUILT_UI",
                     "BUILD_SHARED_LIBS"), _SAFE),
    **dict.fromkeys(("GGML_CUDA", "GGML_METAL", "GGML_VULKAN"), _BACKEND),
    "CMAKE_CUDA_ARCHITECTURES": ("the farm sets it from the build's `cuda-arch:` (e.g. "
                                 "\"86;89\"; `farm build --cuda-arch`), by default the "
                                 "worker's GPUs; give the architectures there"),
    **dict.fromkeys(("LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES"), _TARGETS),
    "LLAMA_BUILD_NUMBER": ("the farm sets it from an sdist's version (a git tree counts its "
                           "own commits); remove it"),
}


class Reason(Enum):
    """Why an option is refused."""

    RUNS_PROGRAMS = "runs a program"
    LOADS_CODE = "loads code or files"
    DOWNLOADS = "downloads from the internet"
    NETWORK = "reaches the network"
    WRITES_FILES = "writes files"
    FLAGS = "passes its text to a compiler as flags"
    OTHER_BACKEND = "belongs to a backend the farm does not build"
    NOT_BENCHMARK = "is not an engine option a benchmark varies"


@dataclass(frozen=True)
class Refused:
    """An option a build may not set, and why."""

    reason: Reason
    detail: str


def _refused(reason: Reason, detail: str, *names: str) -> dict[str, Refused]:
    return dict.fromkeys(names, Refused(reason, detail))


_OTHER_BACKEND = "the farm builds cpu, cuda, metal and vulkan, chosen by `backend:`"
_PROGRAMS = "chooses which programs the tree builds; the farm builds the one it runs, llama-server"
_WARNINGS = "compiler warnings only"
_DEBUG = "a debugging aid: it checks or slows the engine, it is not a configuration to measure"
_INSTALL = "the install step, which the farm does not run"
_WASM = "WebAssembly builds, which the farm does not make"
_CTEST = "CTest's testing and dashboard settings"
REFUSED: dict[str, Refused] = {
    **_refused(Reason.NETWORK, "a backend that offloads the model to RPC servers over the "
               "network", "GGML_RPC", "GGML_RPC_RDMA"),
    **_refused(Reason.LOADS_CODE, "builds the backends as shared objects that the server "
               "loads at run time from a directory", "GGML_BACKEND_DL"),
    **_refused(Reason.LOADS_CODE, "the directory the server loads backends from at run time",
               "GGML_BACKEND_DIR"),
    **_refused(Reason.LOADS_CODE, "builds every CPU variant as a backend loaded at run time "
               "(needs GGML_BACKEND_DL)", "GGML_CPU_ALL_VARIANTS"),
    **_refused(Reason.LOADS_CODE, "a cmake toolchain file that the shader generator's "
               "configure reads and runs", "GGML_VULKAN_SHADERS_GEN_TOOLCHAIN"),
    **_refused(Reason.LOADS_CODE, "OFF makes the server load its Metal kernels from files at "
               "run time; the farm keeps them embedded", "GGML_METAL_EMBED_LIBRARY"),
    **_refused(Reason.LOADS_CODE, "loads the Vulkan validation layers at run time",
               "GGML_VULKAN_VALIDATE"),
    **_refused(Reason.LOADS_CODE, "links the system's libggml instead of the commit's own",
               "LLAMA_USE_SYSTEM_GGML"),
    **_refused(Reason.LOADS_CODE, "an installation directory the build links from",
               "ZENDNN_ROOT"),
    **_refused(Reason.LOADS_CODE, "a directory of WebGPU sources the build compiles in",
               "EMDAWNWEBGPU_DIR"),
    **_refused(Reason.DOWNLOADS, "configure fetches LLVM OpenMP", "GGML_OPENMP_FETCH"),
    **_refused(Reason.DOWNLOADS, "a CCCL git tag configure fetches", "GGML_CUDA_CCCL_VERSION"),
    **_refused(Reason.DOWNLOADS, "configure fetches KleidiAI's sources", "GGML_CPU_KLEIDIAI"),
    **_refused(Reason.DOWNLOADS, "settings of KleidiAI, which configure fetches "
               "(GGML_CPU_KLEIDIAI)", "KLEIDIAI_BUILD_TESTS", "KLEIDIAI_BUILD_BENCHMARK"),
    **_refused(Reason.DOWNLOADS, "configure fetches LLGuidance and builds it with cargo",
               "LLAMA_LLGUIDANCE"),
    **_refused(Reason.DOWNLOADS, "builds the web UI with npm, which fetches its packages",
               "LLAMA_BUILD_UI"),
    **_refused(Reason.DOWNLOADS, "where the prebuilt web UI is fetched from",
               "LLAMA_UI_HF_BUCKET"),
    **_refused(Reason.DOWNLOADS, "the TLS library configure fetches (the farm builds without "
               "TLS)", "BORINGSSL_GIT", "BORINGSSL_VERSION", "LIBRESSL_VERSION"),
    **_refused(Reason.RUNS_PROGRAMS, "runs ccache around every compile; the farm chooses the "
               "compiler launcher", "GGML_CCACHE"),
    **_refused(Reason.RUNS_PROGRAMS, "the multimodal library's video input runs ffmpeg (it "
               "needs LLAMA_SUBPROCESS)", "MTMD_VIDEO"),
    **_refused(Reason.RUNS_PROGRAMS, "a program cmake or CTest runs (git, gcov, valgrind, "
               "make)", "GIT_EXE", "GIT_EXECUTABLE", "COVERAGE_COMMAND", "MEMORYCHECK_COMMAND",
               "MAKECOMMAND"),
    **_refused(Reason.WRITES_FILES, "gprof instrumentation: the server writes gmon.out where "
               "it runs", "GGML_GPROF"),
    **_refused(Reason.FLAGS, "text the Metal compiler gets as flags; the farm compiles Metal "
               "with the tree's defaults", "GGML_METAL_STD", "GGML_METAL_MACOSX_VERSION_MIN",
               "GGML_METAL_TARGET_OS"),
    **_refused(Reason.OTHER_BACKEND, _OTHER_BACKEND,
               "GGML_MUSA", "GGML_MUSA_GRAPHS", "GGML_MUSA_MUDNN_COPY",
               "GGML_HIP", "GGML_HIP_GRAPHS", "GGML_HIP_RCCL", "GGML_HIP_NO_VMM",
               "GGML_HIP_MMQ_MFMA", "GGML_HIP_EXPORT_METRICS",
               "GGML_SYCL", "GGML_SYCL_F16", "GGML_SYCL_GRAPH", "GGML_SYCL_HOST_MEM_FALLBACK",
               "GGML_SYCL_SUPPORT_LEVEL_ZERO_API", "GGML_SYCL_DNN", "GGML_SYCL_TARGET",
               "GGML_SYCL_DEVICE_ARCH", "GGML_SYCL_MAX_PARALLEL_LINK_JOBS",
               "GGML_OPENCL", "GGML_OPENCL_PROFILING", "GGML_OPENCL_EMBED_KERNELS",
               "GGML_OPENCL_USE_ADRENO_KERNELS", "GGML_OPENCL_TARGET_VERSION",
               "GGML_HEXAGON", "GGML_HEXAGON_HTP_DEBUG", "GGML_HEXAGON_HTP_BUILD_TYPE",
               "GGML_HEXAGON_HTP_CERT",
               "GGML_WEBGPU", "GGML_WEBGPU_DEBUG", "GGML_WEBGPU_CPU_PROFILE",
               "GGML_WEBGPU_GPU_PROFILE", "GGML_WEBGPU_JSPI",
               "GGML_OPENVINO", "GGML_ET", "GGML_ET_SYSEMU", "GGML_ZDNN", "GGML_ZENDNN",
               "GGML_VIRTGPU", "GGML_VIRTGPU_BACKEND", "USE_ACL_GRAPH"),
    **_refused(Reason.NOT_BENCHMARK, "every server needs the CPU backend (it runs what is not "
               "offloaded)", "GGML_CPU"),
    **_refused(Reason.NOT_BENCHMARK, "links the C and C++ runtimes statically; the farm's "
               "builds are self-contained already", "GGML_STATIC"),
    **_refused(Reason.NOT_BENCHMARK, _WARNINGS, "GGML_ALL_WARNINGS", "GGML_ALL_WARNINGS_3RD_PARTY",
               "GGML_FATAL_WARNINGS", "LLAMA_ALL_WARNINGS", "LLAMA_ALL_WARNINGS_3RD_PARTY",
               "LLAMA_FATAL_WARNINGS"),
    **_refused(Reason.NOT_BENCHMARK, _DEBUG, "GGML_SANITIZE_THREAD", "GGML_SANITIZE_ADDRESS",
               "GGML_SANITIZE_UNDEFINED", "LLAMA_SANITIZE_THREAD", "LLAMA_SANITIZE_ADDRESS",
               "LLAMA_SANITIZE_UNDEFINED", "GGML_SCHED_NO_REALLOC", "GGML_METAL_SHADER_DEBUG",
               "GGML_VULKAN_CHECK_RESULTS", "GGML_VULKAN_DEBUG", "GGML_VULKAN_MEMORY_DEBUG",
               "GGML_VULKAN_SHADER_DEBUG_INFO", "GGML_VULKAN_RUN_TESTS"),
    **_refused(Reason.NOT_BENCHMARK, _PROGRAMS, "GGML_BUILD_TESTS", "GGML_BUILD_EXAMPLES",
               "LLAMA_BUILD_COMMON", "LLAMA_BUILD_TOOLS", "LLAMA_BUILD_SERVER",
               "LLAMA_BUILD_APP", "LLAMA_BUILD_MTMD", "BUILD_TESTING", "LLAMA_TEST_USE_SUBDIR"),
    **_refused(Reason.NOT_BENCHMARK, _WASM, "GGML_WASM_SINGLE_FILE", "LLAMA_WASM_MEM64",
               "LLAMA_WASM_SINGLE_FILE", "LLAMA_BUILD_HTML"),
    **_refused(Reason.NOT_BENCHMARK, _INSTALL, "GGML_INCLUDE_INSTALL_DIR", "GGML_LIB_INSTALL_DIR",
               "GGML_BIN_INSTALL_DIR", "LLAMA_INCLUDE_INSTALL_DIR", "LLAMA_LIB_INSTALL_DIR",
               "LLAMA_BIN_INSTALL_DIR", "LLAMA_TOOLS_INSTALL", "LLAMA_TESTS_INSTALL"),
    **_refused(Reason.NOT_BENCHMARK, "changes the version string only", "LLAMA_BUILD_IS_DEV"),
    **_refused(Reason.NOT_BENCHMARK, "the web UI's assets", "LLAMA_UI_GZIP"),
    **_refused(Reason.NOT_BENCHMARK, "settings of the TLS library the farm builds without",
               "OPENSSL_NO_ASM", "FIPS"),
    **_refused(Reason.NOT_BENCHMARK, _CTEST, "COVERAGE_EXTRA_FLAGS",
               "MEMORYCHECK_SUPPRESSIONS_FILE", "CTEST_SUBMIT_RETRY_COUNT",
               "CTEST_SUBMIT_RETRY_DELAY", "DART_TESTING_TIMEOUT", "SITE"),
}

# cmake's own variables and what it found for packages, by family, first match: names no
# llama.cpp release lists (CMAKE_<LANG>_... for every language), each refused with why.
REFUSED_FAMILIES: tuple[tuple[re.Pattern[str], Refused], ...] = tuple(
    (re.compile(pattern), Refused(reason, detail)) for pattern, reason, detail in (
        (r"CMAKE_\w+_(COMPILER|LINKER)_LAUNCHER", Reason.RUNS_PROGRAMS,
         "cmake runs it around every compile or link, so `sh;-c;...` runs anything; the farm "
         "sets its own (ccache)"),
        (r"CMAKE_\w+_(CLANG_TIDY|CPPLINT|CPPCHECK|INCLUDE_WHAT_YOU_USE|ICSTAT)|"
         r"CMAKE_LINK_WHAT_YOU_USE_CHECK|CMAKE_CROSSCOMPILING_EMULATOR|CMAKE_TEST_LAUNCHER",
         Reason.RUNS_PROGRAMS, "cmake runs it beside every compile, link or test"),
        (r"CMAKE_\w*COMPILER(_AR|_RANLIB)?|CMAKE_(AR|RANLIB|LINKER|NM|OBJCOPY|OBJDUMP|STRIP|"
         r"READELF|ADDR2LINE|DLLTOOL|MAKE_PROGRAM|MT|RC_COMPILER|GENERATOR\w*)",
         Reason.RUNS_PROGRAMS, "a compiler, linker or tool the build runs"),
        (r"CMAKE_TOOLCHAIN_FILE|CMAKE_PROJECT_(.+_)?INCLUDE(_BEFORE)?|"
         r"CMAKE_USER_MAKE_RULES_OVERRIDE\w*|CMAKE_\w*(MODULE|PREFIX|INCLUDE|LIBRARY|PROGRAM|"
         r"FRAMEWORK|APPBUNDLE|SYSTEM|FIND_ROOT)_PATH|CMAKE_FIND_\w+|CMAKE_SYSROOT\w*",
         Reason.LOADS_CODE, "cmake code that configure reads and runs, or where it finds "
         "modules, programs and libraries"),
        (r"CMAKE_\w*FLAGS\w*", Reason.FLAGS, "-fplugin=, -B and -Wl,... load or replace "
         "code; the engine's options are the GGML_* ones"),
        (r"CMAKE_INSTALL_\w+", Reason.NOT_BENCHMARK, _INSTALL),
        (r"CMAKE_\w+", Reason.NOT_BENCHMARK, "cmake's own setting; a build sets "
         "CMAKE_BUILD_TYPE (Release or RelWithDebInfo) and nothing else of cmake's"),
        (r"(OpenMP|Threads|BLAS|LAPACK|CUDAToolkit|CUDA|Vulkan)_\w+",
         Reason.LOADS_CODE, "what cmake found for a package: programs, flags and libraries "
         "the build runs or links"),
    ))

_ARG = re.compile(r"-D(?P<name>[A-Za-z_][A-Za-z0-9_.+-]*)(?::[A-Za-z]+)?=(?P<value>.*)",
                  re.DOTALL)
_TRUE = frozenset({"ON", "TRUE", "YES", "Y", "1"})
_FALSE = frozenset({"OFF", "FALSE", "NO", "N", "0"})
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*")
_FA_TYPES = frozenset({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "bf16", "f16"})


def refused(name: str) -> Refused | None:
    """Why ``name`` is refused by the table or a family, None if neither lists it."""
    listed = REFUSED.get(name)
    if listed is not None:
        return listed
    return next((why for pattern, why in REFUSED_FAMILIES if pattern.fullmatch(name)), None)


def _fa_quants(value: str) -> str | None:
    text = value.strip().lower()
    if text == "all":
        return text
    pairs = [pair.strip() for pair in re.split(r"[;,]", text)]
    for pair in pairs:
        key, _, val = pair.partition("-")
        if key not in _FA_TYPES or val not in _FA_TYPES:
            return None
    return ";".join(pairs)


def _normal_value(allowed: Allowed, value: str) -> str | None:
    """``value`` spelled the one way the farm keeps it, None if it is not of the type."""
    upper = value.upper()
    if allowed.kind is Kind.SWITCH:
        return "ON" if upper in _TRUE else "OFF" if upper in _FALSE else None
    if allowed.kind is Kind.NUMBER:
        fits = value.isascii() and value.isdigit() and allowed.low <= int(value) <= allowed.high
        return str(int(value)) if fits else None
    if allowed.kind is Kind.CHOICE:
        return next((choice for choice in allowed.choices if choice.upper() == upper), None)
    if allowed.kind is Kind.ARCH:
        return value if _ARCH.fullmatch(value) else None
    return _fa_quants(value)


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name.upper(), ALLOWED, n=1, cutoff=0.8)
    return f" (did you mean {close[0]}? names are case-sensitive)" if close else ""


def check_cmake_option(arg: str, where: str) -> str:
    """``arg`` as ``-DNAME=VALUE`` in the farm's spelling if a build may set it, else a
    ConfigError at ``where`` naming the option, why, and what to do instead."""
    found = _ARG.fullmatch(arg)
    if found is None:
        raise ConfigError(f"{where}: cmake option {arg!r}: give -DNAME=VALUE (e.g. "
                          "-DGGML_CUDA_FA_ALL_QUANTS=ON); other cmake arguments are not build "
                          "options")
    name, value = found["name"], found["value"]
    allowed = ALLOWED.get(name)
    if allowed is not None:
        normal = _normal_value(allowed, value)
        if normal is None:
            raise ConfigError(f"{where}: cmake option {arg!r}: {name} takes {allowed.takes}")
        return f"-D{name}={normal}"
    if name in FIXED:
        raise ConfigError(f"{where}: cmake option {arg!r}: {FIXED[name]}")
    why = refused(name)
    if why is not None:
        raise ConfigError(f"{where}: cmake option {arg!r}: {name} {why.reason.value}: "
                          f"{why.detail}; remove it")
    raise ConfigError(f"{where}: cmake option {arg!r}: {name} is not on the farm's list of "
                      f"llama.cpp build options a benchmark varies{_did_you_mean(name)}; the "
                      "list, and why each other option is refused, is in docs/builds.md")
