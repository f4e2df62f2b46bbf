"""The board's statistics (``farm.stats.board``): machines as random effects, the best
setting per GPU with its best-of interval and the runner-up test, GPU names; and the seeded
simulation of boards (``tests.unit.simulate_board``) that measures how often the board picks
and names the known best.

Run with ``-s`` to see the simulation's figures.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from farm.stats.board import (
    BEST_COLUMNS,
    ROW_COLUMNS,
    best_settings,
    board_rows,
    normalise_gpu,
    pool_predictions,
)
from farm.stats.difference import difference
from farm.stats.intervals import best_of_interval, t_margin
from farm.stats.pooling import pool_jobs
from tests.unit.simulate_board import board_rates

BOARDS = 500


def job(machine: str, log_speedup: float, log_se: float = 0.02, df: int = 6,
        **fields: Any) -> dict[str, Any]:
    """One accepted job as ``board_rows`` reads it, on one model, GPU and setting unless
    ``fields`` say otherwise."""
    return {"machine": machine, "model": "a" * 64, "model_name": "SmolLM2",
            "gpu": "RTX 4090 · 24 GiB", "backend": "CUDA", "setting": "--draft-max 8",
            "draft_n_max": 8.0, "build_number": 4100.0, "log_speedup": log_speedup,
            "log_se": log_se, "df": df, "log_variant_tok_s": math.log(100.0),
            "variant_tok_s_se": math.nan, "acceptance": math.nan, "vram_cost_mb": math.nan,
            "joules_per_token": math.nan, "bundle": f"bundle of {machine}", **fields}


def one_row(*jobs: dict[str, Any]) -> pd.Series:
    rows = board_rows(pd.DataFrame(list(jobs)))
    assert len(rows) == 1
    return rows.iloc[0]


def test_two_machines_are_pooled_with_random_effects_over_machines() -> None:
    row = one_row(job("m1", 0.30, 0.02, 6), job("m2", 0.40, 0.03, 8))
    pooled = pool_jobs([0.30, 0.40], [0.02, 0.03], [6, 8])
    assert list(board_rows(pd.DataFrame([job("m1", 0.3)])).columns) == ROW_COLUMNS
    assert (row["machines"], row["jobs"], row["one_machine"]) == (2, 2, False)
    assert (row["speedup"], row["low"], row["high"], row["tau"]) == pytest.approx(
        (pooled.estimate, pooled.low, pooled.high, pooled.tau), nan_ok=True)
    assert (row["log_se"], row["df"]) == pytest.approx((pooled.log_se, 1.0))
    assert row["bundles"] == ["bundle of m1", "bundle of m2"]


def test_a_machine_with_two_jobs_counts_once() -> None:
    row = one_row(job("m1", 0.30, 0.02, 6), job("m1", 0.34, 0.02, 6),
                  job("m2", 0.40, 0.03, 8))
    first = pool_jobs([0.30, 0.34], [0.02, 0.02], [6, 6])
    pooled = pool_jobs([math.log(first.estimate), 0.40], [first.log_se, 0.03],
                       [int(first.df), 8])
    assert (row["machines"], row["jobs"]) == (2, 3)
    assert (row["speedup"], row["low"], row["high"]) == pytest.approx(
        (pooled.estimate, pooled.low, pooled.high))
    assert row["df"] == 1.0


def test_a_cell_with_one_machine_has_its_own_interval_marked() -> None:
    row = one_row(job("m1", 0.30, 0.02, 6))
    margin = t_margin(0.02, 6)
    assert row["one_machine"] and row["machines"] == 1 and math.isnan(row["tau"])
    assert (row["speedup"], row["low"], row["high"]) == pytest.approx(
        (math.exp(0.30), math.exp(0.30 - margin), math.exp(0.30 + margin)))
    two_jobs = one_row(job("m1", 0.30, 0.02, 6), job("m1", 0.34, 0.02, 6))
    alone = pool_jobs([0.30, 0.34], [0.02, 0.02], [6, 6])
    assert two_jobs["one_machine"] and two_jobs["jobs"] == 2
    assert (two_jobs["low"], two_jobs["high"]) == pytest.approx((alone.low, alone.high))


def test_a_job_without_a_standard_error_does_not_enter_the_interval() -> None:
    row = one_row(job("m1", 0.30), job("m2", 0.90, math.nan, 0))
    assert (row["machines"], row["jobs"], row["one_machine"]) == (1, 1, True)
    assert row["speedup"] == pytest.approx(math.exp(0.30))


def test_different_builds_are_kept_as_a_range_and_bundles_as_their_union() -> None:
    row = one_row(job("m1", 0.3, build_number=4100.0, bundle=["b1", "b2"]),
                  job("m2", 0.3, build_number=4012.0, bundle="b3"),
                  job("m3", 0.3, build_number=math.nan, bundle="b1"))
    assert (row["build_min"], row["build_max"]) == (4012.0, 4100.0)
    assert row["bundles"] == ["b1", "b2", "b3"]


def test_models_gpus_backends_and_settings_are_rows_apart() -> None:
    rows = board_rows(pd.DataFrame([
        job("m1", 0.3), job("m1", 0.3, model="b" * 64), job("m2", 0.3, gpu="CPU"),
        job("m2", 0.3, backend="Vulkan"), job("m1", 0.3, setting="--draft-max 4")]))
    assert len(rows) == 5 and set(rows["machines"]) == {1}


def test_means_count_each_machine_once_and_decode_without_errors_has_no_interval() -> None:
    row = one_row(job("m1", 0.3, acceptance=0.5, log_variant_tok_s=math.log(100.0)),
                  job("m1", 0.3, acceptance=0.7, log_variant_tok_s=math.log(100.0)),
                  job("m2", 0.3, acceptance=0.8, log_variant_tok_s=math.log(400.0)))
    assert row["acceptance"] == pytest.approx(0.7)
    assert row["decode_tok_s"] == pytest.approx(200.0)
    assert math.isnan(row["decode_low"]) and math.isnan(row["decode_high"])
    assert math.isnan(row["vram_cost_mb"])


def test_decode_with_standard_errors_is_pooled_like_the_speedup() -> None:
    row = one_row(job("m1", 0.3, log_variant_tok_s=math.log(100.0), variant_tok_s_se=0.02),
                  job("m2", 0.3, log_variant_tok_s=math.log(120.0), variant_tok_s_se=0.02))
    pooled = pool_jobs([math.log(100.0), math.log(120.0)], [0.02, 0.02], [6, 6])
    assert (row["decode_tok_s"], row["decode_low"], row["decode_high"]) == pytest.approx(
        (pooled.estimate, pooled.low, pooled.high))


def test_missing_columns_are_named() -> None:
    with pytest.raises(ValueError, match="bundle"):
        board_rows(pd.DataFrame([job("m1", 0.3)]).drop(columns="bundle"))


def rows_of(settings: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    """Board rows of one model x GPU x backend: setting -> (log speedup, log se, df)."""
    return board_rows(pd.DataFrame([
        job("m1", log_speedup, log_se, int(df), setting=setting, bundle=f"b {setting}")
        for setting, (log_speedup, log_se, df) in settings.items()]))


def test_the_best_setting_has_a_best_of_interval_and_beats_a_clear_runner_up() -> None:
    best = best_settings(rows_of({"a": (0.50, 0.01, 10), "b": (0.30, 0.01, 10),
                                  "c": (0.10, 0.01, 10), "d": (math.nan, math.nan, 0)}))
    assert list(best.columns) == BEST_COLUMNS and len(best) == 1
    found = best.iloc[0]
    low, high = best_of_interval(0.50, 0.01, 10, 3)
    assert (found["setting"], found["settings"], found["runner_up"]) == ("a", 3, "b")
    assert (found["speedup"], found["low"], found["high"]) == pytest.approx(
        (math.exp(0.5), low, high))
    lead = difference(0.30, 0.01, 10, 0.50, 0.01, 10, level=1 - 0.05 / 2)
    assert (found["ahead"], found["ahead_low"]) == pytest.approx((lead.change, lead.low))
    assert found["beats"] and found["bundles"] == ["b a", "b b"]


def test_a_lead_within_the_adjusted_interval_is_not_named() -> None:
    # 0.05 apart at 0.02 each: p = 0.10 two-sided, above 0.05 / 3.
    best = best_settings(rows_of({"a": (0.35, 0.02, 12), "b": (0.30, 0.02, 12),
                                  "c": (0.10, 0.02, 12), "d": (0.05, 0.02, 12)})).iloc[0]
    assert best["setting"] == "a" and best["runner_up"] == "b" and not best["beats"]
    assert best["ahead_low"] < 1.0 < best["ahead_high"]


def test_one_setting_has_no_runner_up() -> None:
    best = best_settings(rows_of({"a": (0.3, 0.02, 6)})).iloc[0]
    low, high = best_of_interval(0.3, 0.02, 6, 1)
    assert (best["low"], best["high"]) == pytest.approx((low, high))
    assert best["runner_up"] is None and not best["beats"] and math.isnan(best["ahead"])


@pytest.mark.parametrize(("name", "memory_mb", "expected"), [
    ("NVIDIA H200", 143771.0, "H200 · 140 GiB"),
    ("NVIDIA GeForce RTX 4090", 24564.0, "RTX 4090 · 24 GiB"),
    ("NVIDIA H200 141GB", None, "H200 · 141 GiB"),
    ("NVIDIA H100 80GB HBM3", 81559.0, "H100 HBM3 · 80 GiB"),
    ("NVIDIA A100-SXM4-40GB", 40960.0, "A100-SXM4 · 40 GiB"),
    ("AMD Radeon RX 7900 XTX", 24560.0, "Radeon RX 7900 XTX · 24 GiB"),
    ("Apple M2 Max", math.nan, "Apple M2 Max"),
    (None, None, "CPU"),
    ("  ", 8192.0, "CPU"),
])
def test_gpu_names_are_normalised(name: str | None, memory_mb: float | None,
                                  expected: str) -> None:
    assert normalise_gpu(name, memory_mb) == expected


def test_simulated_boards_pick_the_known_best_and_rarely_name_a_wrong_one() -> None:
    """20 machines x 3 GPUs x 4 settings, the best 5% ahead, machines' SD 3%, the farm's
    job noise: 500 boards (1,500 GPUs) in about 7 s."""
    rates = board_rates(BOARDS, 39)
    print(f"\n{BOARDS} boards: {rates}")
    assert rates.picked >= 0.90
    assert rates.wrong <= 0.05
    # Naming nothing would never name a wrong best: the test must name the right one too.
    assert rates.named >= 0.80


def prediction(machine: str, setting: str, log_speedup: float, draft: float) -> dict[str, Any]:
    """One machine's ``farm recommend`` prediction, as ``farm.board.predict`` makes it."""
    return {"model": "a" * 64, "gpu": "RTX 4090 · 24 GiB", "backend": "CUDA",
            "setting": setting, "draft_n_max": draft, "machine": machine,
            "log_speedup": log_speedup, "log_se": 0.03, "df": 10.0}


def test_predictions_are_pooled_over_machines_and_the_fastest_is_recommended() -> None:
    predictions = pool_predictions(pd.DataFrame([
        prediction("m1", "--draft-max 8", 0.30, 8.0), prediction("m2", "--draft-max 8", 0.36, 8.0),
        prediction("m1", "--draft-max 4", 0.45, 4.0)]))
    pooled = pool_jobs([0.30, 0.36], [0.03, 0.03], [10, 10])
    by_setting = predictions.set_index("setting")
    assert by_setting.loc["--draft-max 8", "predicted"] == pytest.approx(pooled.estimate)
    assert by_setting.loc["--draft-max 8", "predicted_machines"] == 2
    assert by_setting.loc["--draft-max 4", "predicted_machines"] == 1
    rows = board_rows(pd.DataFrame([job("m1", 0.3), job("m2", 0.35)]), predictions)
    assert list(rows.columns) == ROW_COLUMNS
    assert rows.iloc[0]["predicted"] == pytest.approx(pooled.estimate)
    # Never measured, predicted fastest: recommend's pick beside the measured best.
    [best] = best_settings(rows, predictions).to_dict("records")
    assert (best["setting"], best["recommended"]) == ("--draft-max 8", "--draft-max 4")
    assert best["recommended_speedup"] == pytest.approx(math.exp(0.45))
    assert list(best_settings(rows).columns) == BEST_COLUMNS
    assert best_settings(rows)["recommended"].isna().all()
