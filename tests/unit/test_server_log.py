"""llama-server's log read for why a start failed, whether weights spilled to the CPU, and
each request's speculative statistics.

The lines are llama.cpp's own (common/arg.cpp, src/llama-context.cpp, tools/server/), as a
server prints them; tests/integration/test_failures.py checks the same against a real one.
"""

from __future__ import annotations

import threading
import time
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
from workers.job.runtime import server_log
from workers.job.runtime.server_log import SpecStats, SpecStatsLog, context_memory


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
    assert error.log_tail == server_log.failure_lines(log) and error.log_tail in str(error)


def test_a_failed_start_keeps_its_failure_lines_and_never_the_template() -> None:
    log = ("0.00.797.079 I srv          init: init: chat template, example_format: "
           "'<|im_start|>system\nKEEP-OUT-7f3a\n'\n"
           "0.00.800.001 I llama_kv_cache: size = 12.00 MiB\n"
           "0.00.900.002 E llama_model_load: error loading model: unable to allocate CUDA0 "
           "buffer\n")
    error = server_log.start_error("llama-server exited with code 1 while starting", log)
    assert error.failure_class == "out_of_memory"
    assert "unable to allocate CUDA0 buffer" in str(error)
    assert "KEEP-OUT-7f3a" not in str(error) and "chat template" not in str(error)


def test_a_server_not_ready_in_time_is_a_timeout_unless_its_log_says_why() -> None:
    waiting = "load_tensors: loading model tensors, this can take a while...\n"
    assert server_log.start_error("slow", waiting, timed_out=True).failure_class == "timeout"
    stuck = waiting + "cudaMalloc failed: out of memory\n"
    assert server_log.start_error("slow", stuck, timed_out=True).failure_class == "out_of_memory"


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
    # node_busy: a block refused under busy-node: refuse runs once the other work is gone.
    assert {"timeout", "crash", "request_failed", "internal", "node_busy"} == RETRYABLE


# Captured from llama-server b11434 at --log-verbosity 4 (SmolLM2, --spec-type
# ngram-simple,ngram-mod, two chat requests), with the lines around the first print.
TWO_METHODS = [
    "0.00.265.624 I spec common_specu: adding speculative implementation 'ngram-simple'",
    "0.00.276.466 I spec common_specu: adding speculative implementation 'ngram-mod'",
    "0.01.612.598 I slot print_timing: id  0 | task 0 |    graphs reused =         58",
    "0.01.612.632 I slot print_timing: id  0 | task 0 | draft acceptance = 0.07317 (    3 "
    "accepted /    41 generated), mean len =  4.00",
    "0.01.612.681 I spec common_specu: statistics     ngram-simple: #calls(b,g,a) =    1     "
    "59      1, #gen drafts =      1, #acc drafts =     1, #gen tokens =     41, #acc tokens "
    "=     3, #mean acc len = 4.00, #acc rate/pos = (1.000, 1.000, 1.000), dur(b,g,a) = "
    "0.001, 0.134, 0.005 ms",
    "0.01.612.689 I spec common_specu: statistics        ngram-mod: #calls(b,g,a) =    1     "
    "58      0, #gen drafts =      0, #acc drafts =     0, #gen tokens =      0, #acc tokens "
    "=     0, dur(b,g,a) = 0.048, 0.160, 0.000 ms",
    "0.01.612.725 I slot      release: id  0 | task 0 | stop processing: n_tokens = 146, "
    "truncated = 0",
    "0.02.401.433 I spec common_specu: statistics     ngram-simple: #calls(b,g,a) =    2     "
    "65      1, #gen drafts =      1, #acc drafts =     1, #gen tokens =     41, #acc tokens "
    "=     3, #mean acc len = 4.00, #acc rate/pos = (1.000, 1.000, 1.000), dur(b,g,a) = "
    "0.001, 0.145, 0.005 ms",
    # The draft was 56 tokens long, so 56 rates of 1.000, as logged.
    "0.02.401.453 I spec common_specu: statistics        ngram-mod: #calls(b,g,a) =    2     "
    "64      1, #gen drafts =      1, #acc drafts =     1, #gen tokens =     56, #acc tokens "
    "=    56, #mean acc len = 57.00, #acc rate/pos = (" + ", ".join(["1.000"] * 56)
    + "), dur(b,g,a) = 0.087, 0.205, 0.004 ms",
]
# The same build on the generated MTP oracle (--spec-type draft-mtp --spec-draft-n-max 3).
MTP = [
    "0.00.105.659 I spec common_specu: adding speculative implementation 'draft-mtp'",
    "0.00.240.595 I spec common_specu: statistics        draft-mtp: #calls(b,g,a) =    1     "
    "32     32, #gen drafts =     32, #acc drafts =    32, #gen tokens =     95, #acc tokens "
    "=    95, #mean acc len = 3.97, #acc rate/pos = (1.000, 1.000, 0.969), dur(b,g,a) = "
    "0.015, 13.171, 0.013 ms",
    "0.00.290.277 I spec common_specu: statistics        draft-mtp: #calls(b,g,a) =    2     "
    "64     64, #gen drafts =     64, #acc drafts =    64, #gen tokens =    190, #acc tokens "
    "=   190, #mean acc len = 3.97, #acc rate/pos = (1.000, 1.000, 0.969), dur(b,g,a) = "
    "0.026, 27.119, 0.021 ms",
]


def _log(tmp_path: Path, lines: list[str], before: str = "") -> Path:
    path = tmp_path / "block0-variant.log"
    path.write_text(before + "\n".join(lines) + "\n")
    return path


def test_statistics_are_read_per_method_and_print_in_b11434s_words() -> None:
    text = "\n".join(TWO_METHODS)
    assert server_log.spec_methods(text) == ["ngram-simple", "ngram-mod"]
    first, second = server_log.spec_stats_prints(text)
    assert first["ngram-simple"] == SpecStats(
        draft_calls=59, accept_calls=1, gen_drafts=1, acc_drafts=1, gen_tokens=41,
        acc_tokens=3, begin_ms=0.001, draft_ms=0.134, accept_ms=0.005)
    assert first["ngram-mod"] == SpecStats(draft_calls=58, begin_ms=0.048, draft_ms=0.160)
    assert second["ngram-mod"].acc_tokens == 56 and second["ngram-mod"].draft_ms == 0.205


def test_a_request_gets_its_print_less_the_one_before_summed_over_methods(
        tmp_path: Path) -> None:
    stats = SpecStatsLog(_log(tmp_path, TWO_METHODS), 0)
    assert stats.request(0) == SpecStats(
        draft_calls=117, accept_calls=1, gen_drafts=1, acc_drafts=1, gen_tokens=41,
        acc_tokens=3, begin_ms=0.049, draft_ms=0.294, accept_ms=0.005)
    assert stats.request(1) == SpecStats(
        draft_calls=12, accept_calls=1, gen_drafts=1, acc_drafts=1, gen_tokens=56,
        acc_tokens=56, begin_ms=0.039, draft_ms=0.056, accept_ms=0.004)
    assert SpecStatsLog(_log(tmp_path, MTP), 0).request(1) == SpecStats(
        draft_calls=32, accept_calls=32, gen_drafts=32, acc_drafts=32, gen_tokens=95,
        acc_tokens=95, begin_ms=0.011, draft_ms=13.948, accept_ms=0.008)


def test_an_earlier_server_in_the_same_log_is_not_counted(tmp_path: Path) -> None:
    earlier = "$ llama-server (the block's first attempt)\n" + "\n".join(MTP) + "\n"
    path = _log(tmp_path, ["$ llama-server (the retry)", *MTP[:2]], before=earlier)
    stats = SpecStatsLog(path, len(earlier.encode()), wait=0.0)
    assert stats.request(0) == SpecStats(
        draft_calls=32, accept_calls=32, gen_drafts=32, acc_drafts=32, gen_tokens=95,
        acc_tokens=95, begin_ms=0.015, draft_ms=13.171, accept_ms=0.013)
    assert stats.request(1) is None


def test_a_server_that_does_not_speculate_has_no_statistics_and_is_not_waited_for(
        tmp_path: Path) -> None:
    path = _log(tmp_path, ["0.00.240.629 I slot      release: id  0 | task 0 | stop "
                           "processing: n_tokens = 144, truncated = 0"])
    started = time.monotonic()
    assert SpecStatsLog(path, 0, wait=5.0).request(0) is None
    assert time.monotonic() - started < 3.0  # not the 5 s wait, with room for a loaded box


def test_a_print_that_lands_after_the_response_is_waited_for_whole(tmp_path: Path) -> None:
    # llama.cpp logs from its own thread: the response can come before the print, and a
    # print of two methods is two lines, written one after the other.
    path = _log(tmp_path, TWO_METHODS[:5])

    def finish_print() -> None:
        time.sleep(0.2)
        with path.open("a") as log:
            log.write(TWO_METHODS[5] + "\n")

    writer = threading.Thread(target=finish_print)
    writer.start()
    try:
        stats = SpecStatsLog(path, 0, wait=5.0).request(0)
    finally:
        writer.join()
    assert stats is not None and stats.draft_calls == 59 + 58


def test_a_print_that_never_comes_is_none_after_the_wait(tmp_path: Path) -> None:
    started = time.monotonic()
    assert SpecStatsLog(_log(tmp_path, MTP[:1]), 0, wait=0.1).request(0) is None
    assert time.monotonic() - started < 1.0


# llama-server b11434 starting the MTP oracle with --spec-type draft-mtp (lines as logged).
MTP_START = """\
0.00.028.131 I load_tensors:   CPU_Mapped model buffer size =     8.16 MiB
0.00.028.700 I llama_context:        CPU  output buffer size =     0.00 MiB
0.00.028.753 I llama_kv_cache:        CPU KV buffer size =     0.25 MiB
0.00.028.857 I llama_kv_cache: size =    0.25 MiB (   256 cells,   1 layers,  1/1 seqs), K (f16):    0.12 MiB, V (f16):    0.12 MiB
0.00.029.147 I llama_memory_recurrent:        CPU RS buffer size =     0.40 MiB
0.00.029.196 I llama_memory_recurrent: size =    0.40 MiB (     1 cells,   2 layers,  1 seqs  2 rs_seq), R (f32):    0.03 MiB, S (f32):    0.38 MiB, P (f32):    0.00 MiB
0.00.033.828 I sched_reserve:        CPU compute buffer size =     3.26 MiB
0.00.038.356 I common_speculative_init_result: creating MTP draft context against the target model '/models/qwen35-mtp-oracle.gguf'
0.00.038.619 I llama_context:        CPU  output buffer size =     0.00 MiB
0.00.038.694 I llama_kv_cache:        CPU KV buffer size =     0.25 MiB
0.00.038.878 I llama_kv_cache: size =    0.25 MiB (   256 cells,   1 layers,  1/1 seqs), K (f16):    0.12 MiB, V (f16):    0.12 MiB
0.00.043.196 I sched_reserve:        CPU compute buffer size =     1.88 MiB
0.00.048.050 I sched_reserve:        CPU compute buffer size =     1.88 MiB
"""  # noqa: E501


def test_context_memory_splits_the_target_caches_from_the_draft_context() -> None:
    memory = context_memory(MTP_START)
    assert memory is not None
    # Target: KV 0.25 + recurrent state 0.40. Draft: KV 0.25 + its compute buffer, reserved
    # twice at the same size, once.
    assert memory.kv_mib == pytest.approx(0.65)
    assert memory.draft_context_mib == pytest.approx(0.25 + 1.88)
    baseline = context_memory(MTP_START.split("0.00.038.356")[0])
    assert baseline is not None and baseline.draft_context_mib == 0.0
    assert context_memory("no caches here\n") is None
