"""``farm run``'s progress: the runs as the design plans them (a range until the first stage
fixes the plan), the time left at the plan's upper bound on a fake clock, never 0 while a
run is left; up front, the design's runs and time; in a pipe, a plain line per finished
block with both, a failed job's line with its error as written, no bar drawn."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from rich.console import Console

from farm.cli.dry_run import design_totals
from farm.cli.forecast import JobRuns, RunForecast
from farm.cli.progress import RunProgress
from farm.errors import ServerStartError
from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from farm.results.runs import ArmCost
from farm.stats.design import StopDecision
from tests.helpers import matrix_dict, write_matrix
from workers.job.executor import pair_slots
from workers.job.results import RunResult

# The default design of `farm ab`'s tutorial prompts: 36 runs a pair, 8 to 12 pairs.
DEFAULT = JobRuns(per_pair=36, least=8 * 36, most=12 * 36)


def _forecast(*jobs: JobRuns) -> RunForecast:
    return RunForecast([JobRuns(job.per_pair, job.least, job.most) for job in jobs], 0.0)


def _run(forecast: RunForecast, count: int, seconds: float) -> None:
    """``count`` runs of ``seconds`` each, after the forecast's last."""
    for _ in range(count):
        forecast.ran(forecast.last + seconds)


def test_the_total_is_the_designs_range_until_the_first_stage_fixes_the_plan() -> None:
    forecast = _forecast(DEFAULT)
    forecast.job_started(0, 0)
    assert (forecast.runs_text(), forecast.left_text()) == ("runs 0 of 288-432", "left -:--:--")
    _run(forecast, 144, 2.0)
    forecast.planned((8, 12))  # the first stage's last pair: still the design's range
    assert forecast.runs_text() == "runs 144 of 288-432"
    # The time per run so far times the runs left at the upper bound: 2 s x 288.
    assert forecast.left_text() == "left up to 0:09:36"
    forecast.planned((11, 11))
    assert (forecast.runs_text(), forecast.left_text()) == ("runs 144 of 396", "left 0:08:24")


def test_the_time_left_is_never_0_while_a_run_is_left() -> None:
    forecast = _forecast(DEFAULT)
    forecast.job_started(0, 0)
    _run(forecast, 395, 0.0)  # runs that took no time on the clock
    forecast.planned((11, 11))
    assert forecast.seconds_left() == 1.0
    _run(forecast, 1, 0.0)
    forecast.planned((11, 11))
    assert (forecast.runs_text(), forecast.seconds_left()) == ("runs 396 of 396", 0.0)


def test_a_stopped_or_failed_job_leaves_the_next_jobs_range() -> None:
    forecast = _forecast(DEFAULT, DEFAULT)
    forecast.job_started(0, 0)
    _run(forecast, 10, 3.0)
    forecast.ended()
    assert forecast.runs_text() == "runs 10 of 298-442"
    forecast.job_started(1, 0)
    _run(forecast, 36, 3.0)
    forecast.planned((8, 8))
    assert (forecast.runs_text(), forecast.seconds_left()) == ("runs 46 of 298", 756.0)


def test_a_resumed_jobs_stored_runs_count_as_done_but_not_as_time() -> None:
    forecast = _forecast(DEFAULT)
    forecast.job_started(0, 100)
    _run(forecast, 8, 5.0)
    forecast.planned((8, 8))
    assert forecast.runs_text() == "runs 108 of 288"
    assert forecast.seconds_left() == 5.0 * 180


def _spec(tmp_path: Path, **design: Any) -> JobSpec:
    _, [spec] = load_matrix(write_matrix(tmp_path, matrix_dict(tmp_path / "m.gguf", **design)))
    return spec


def _result(pair: int, position: int, tok_s: float) -> RunResult:
    slot = pair_slots(pair)[position]
    return cast(RunResult, SimpleNamespace(
        key=SimpleNamespace(arm=slot.role), slot=slot,
        generation=SimpleNamespace(decode_tok_s=tok_s)))


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_pipe_gets_the_design_up_front_then_a_line_per_block_with_runs_and_time_left(
        tmp_path: Path) -> None:
    # 2 runs a block, 8 to 12 pairs (a two-stage design: the first stage plans the rest).
    spec = _spec(tmp_path, pairs=4, **{"max-pairs": 12, "stop-rule": "two-stage"})
    out, clock = io.StringIO(), Clock()
    progress = RunProgress(Console(file=out, force_terminal=False, width=300), {}, clock)
    progress.start([spec], 0)
    progress.job(1, 1, spec, 0)
    for pair in range(4):
        for position in (0, 1):
            for tok_s in (10.0, 14.0):
                clock.now += 10.0
                progress.run(_result(pair, position, tok_s))
        pairs = (9, 9) if pair == 3 else (8, 12)
        progress.decision(StopDecision(False, "", pairs))
    progress.close()
    label = "job 1/1 smollm2 ngram"
    assert out.getvalue().splitlines() == [
        "to run: 32-48 runs in 1 job; no time estimate: the store has no run of every build "
        "on its model",
        f"{label} · baseline block 0 · 12.0 tok/s · runs 2 of 32-48 · left up to 0:07:40",
        f"{label} · variant block 1 · 12.0 tok/s · runs 4 of 32-48 · left up to 0:07:20",
        f"{label} · variant block 2 · 12.0 tok/s · runs 6 of 32-48 · left up to 0:07:00",
        f"{label} · baseline block 3 · 12.0 tok/s · runs 8 of 32-48 · left up to 0:06:40",
        f"{label} · baseline block 4 · 12.0 tok/s · runs 10 of 32-48 · left up to 0:06:20",
        f"{label} · variant block 5 · 12.0 tok/s · runs 12 of 32-48 · left up to 0:06:00",
        f"{label} · variant block 6 · 12.0 tok/s · runs 14 of 32-48 · left up to 0:05:40",
        # The first stage's end fixes the plan at 9 pairs: 36 runs.
        f"{label} · baseline block 7 · 12.0 tok/s · runs 16 of 36 · left 0:03:20"]
    assert (progress.bar.tasks[0].total, progress.bar.tasks[0].completed) == (36, 16)


def test_a_failed_job_is_one_plain_line_with_its_error_as_written(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    out = io.StringIO()
    progress = RunProgress(Console(file=out, force_terminal=False, width=200))
    progress.start([spec], 0)
    progress.failed(spec, ServerStartError("[request_failed] llama-server exited 1"))
    progress.close()
    assert out.getvalue() == (f"job {spec.job_key[:10]} failed: [request_failed] "
                              "llama-server exited 1\n")


def test_the_plan_line_says_the_starts_share_where_the_store_kept_them(tmp_path: Path
                                                                       ) -> None:
    # 4 to 12 pairs of 2 runs a block (one prompt, two repetitions): each arm makes 8 to 24
    # runs of 1 s and starts 4 to 12 blocks of 0.5 s.
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    spec = _spec(tmp_path, pairs=4, **{"max-pairs": 12, "stop-rule": "decision"})
    key = (spec.baseline.build.name, "m.gguf")
    assert design_totals([spec], {key: ArmCost(1.0, 0.5)}) == (
        "16-48 runs in 1 job; about 20 s to 60 s, server starts and warm-ups 20% of it, "
        "from the store's runs of the same builds and models")
    assert design_totals([spec], {key: ArmCost(1.0, None)}) == (
        "16-48 runs in 1 job; about 16 s to 48 s of generation, from the store's runs of the "
        "same builds and models")
    assert design_totals([spec], {}).endswith("no time estimate: the store has no run of "
                                              "every build on its model")
