"""llama-server's log read for why a start failed and whether weights spilled to the CPU.

The lines are llama.cpp's own (common/arg.cpp, src/llama-context.cpp, tools/server/), as a
server prints them; tests/integration/test_failures.py checks the same against a real one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import (
    RETRYABLE,
    BenchmarkError,
    ConfigError,
    FarmError,
    NoMtpHeads,
    ServerStartError,
    ServiceUnavailable,
    UnsupportedByBuild,
)
from workers.runtime import server_log


@pytest.mark.parametrize(("log", "expected"), [
    ('error while handling argument "--cache-type-k": Unsupported cache type: q9_9\n',
     "unsupported_by_build"),
    ('error while handling argument "--spec-type": unknown speculative type: eagle9\n',
     "unsupported_by_build"),
    ('error while handling argument "--draft-max": the argument has been removed. use '
     "--spec-draft-n-max or --spec-ngram-mod-n-max\n", "unsupported_by_build"),
    ("error: invalid argument: --no-such-flag\n", "bad_flag"),
    ('error while handling argument "--ctx-size": stoi\n', "bad_flag"),
    ("llama_init_from_model: context type MTP requested but model doesn't contain MTP "
     "layers\nsrv    load_model: failed to create MTP context\n", "no_mtp_heads"),
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 40960.00 MiB on device 0: "
     "cudaMalloc failed: out of memory\n", "out_of_memory"),
    ("llama_model_load: error loading model: unable to allocate CUDA0 buffer\n",
     "out_of_memory"),
    ("gguf_init_from_file: failed to open GGUF file '/m/x.gguf' (No such file or directory)\n"
     "llama_model_load_from_file_impl: failed to load model\n", "model_unreadable"),
    ("load_tensors: loading model tensors, this can take a while... (mmap = true)\n", "crash"),
])
def test_a_server_that_exited_is_classified_from_its_own_words(log: str, expected: str) -> None:
    error = server_log.start_error("llama-server exited with code 1 while starting", log)
    assert isinstance(error, ServerStartError)
    assert error.failure_class == expected
    assert error.log_tail == log and log in str(error)


def test_a_server_not_ready_in_time_is_a_timeout_unless_its_log_says_why() -> None:
    waiting = "load_tensors: loading model tensors, this can take a while...\n"
    assert server_log.start_error("slow", waiting, timed_out=True).failure_class == "timeout"
    stuck = waiting + "cudaMalloc failed: out of memory\n"
    assert server_log.start_error("slow", stuck, timed_out=True).failure_class == "out_of_memory"


@pytest.mark.parametrize(("log", "lost"), [
    ("srv    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080\n", True),
    ("error: invalid argument: --no-such-flag\n", False),
])
def test_a_lost_port_race_is_told_from_other_exits(log: str, lost: bool) -> None:
    assert server_log.lost_port_race(log) is lost


def test_the_tail_is_the_last_lines_and_empty_without_a_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert server_log.tail(log, lines=2) == "line 98\nline 99"
    assert server_log.tail(tmp_path / "missing.log") == ""


@pytest.mark.parametrize(("log", "spilled"), [
    ("load_tensors: offloading output layer to GPU\n"
     "load_tensors: offloading 29 repeating layers to GPU\n"
     "load_tensors: offloaded 30/33 layers to GPU\n"
     "load_tensors:        CUDA0 model buffer size =  3745.19 MiB\n"
     "load_tensors:   CPU_Mapped model buffer size =   420.00 MiB\n", True),
    ("load_tensors: offloading output layer to GPU\n"
     "load_tensors: offloading 32 repeating layers to GPU\n"
     "load_tensors: offloaded 33/33 layers to GPU\n", False),
    # main model all on GPU, draft model partly not
    ("load_tensors: offloaded 33/33 layers to GPU\n"
     "load_tensors: offloaded 0/25 layers to GPU\n", True),
    # a CPU-only build never prints the line
    ("load_tensors:   CPU_Mapped model buffer size =   120.00 MiB\n", False),
    ("", False),
])
def test_weights_spilled(log: str, spilled: bool) -> None:
    assert server_log.weights_spilled(log) is spilled


@pytest.mark.parametrize(("error", "expected"), [
    (ConfigError("bad matrix"), "config"),
    (UnsupportedByBuild("no --spec-type eagle9"), "unsupported_by_build"),
    (NoMtpHeads("needs MTP heads"), "no_mtp_heads"),
    (BenchmarkError("POST /completion answered 500"), "request_failed"),
    (ServiceUnavailable("database down"), "error"),
])
def test_errors_raised_before_or_after_the_start_carry_their_class(
        error: FarmError, expected: str) -> None:
    assert error.failure_class == expected


def test_only_passing_failures_are_retried() -> None:
    assert {"timeout", "crash", "request_failed"} == RETRYABLE
