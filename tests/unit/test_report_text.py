"""The terminal report: fitted to a narrow terminal, every column with --wide, one formatter."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Hashable
from typing import Any

import pandas as pd
import pytest

from farm.report import cells
from farm.report.sheet import fit, table_text, terminal_width
from farm.report.text import job_sheet

NAN = math.nan

# Every column of the per-job table, in order: what --wide shows.
WIDE_HEADERS = ["job", "model", "variant", "varying flags", "class", "state", "baseline tok/s",
                "variant tok/s", "speedup [95% CI]", "aggregate [95% CI]", "prompt tok", "pairs",
                "accept", "agree", "drafted",
                "draft / verify ms/tok", "memory MiB", "runs", "TPOT p50 ms (base/var)",
                "TPOT p99 ms (base/var)", "flags"]


def _job(variant: str, **values: object) -> dict[str, object]:
    job: dict[str, object] = {
        "job_key": "a1b2c3d4e5" * 6 + "ffff", "model": "qwen3-30b-a3b-instruct-q4_k_m",
        "variant": variant, "varying_flags": "spec-type=ngram-simple spec-draft-n-max=8",
        "gpu_class": "rtx3090", "state": "done", "baseline_tok_s": 101.23,
        "variant_tok_s": 143.9, "speedup": 1.4234, "ci_low": 1.351, "ci_high": 1.4999,
        "speculation": "ok", "pairs": 8, "acceptance_rate": 0.8123, "agreement": 0.98,
        "drafted": 12345, "runs": 96, "agreement_suspect": False, "drift_flag": False,
        "failure_class": None, "throttled_runs": 0, "spilled_runs": 0,
        "draft_ms_per_token": 0.105, "verify_ms_per_token": 6.84, "memory_cost_mb": 22.3,
        "draft_context_mib": 2.13, "stop_mismatch": 0}
    return {**job, **values}


def _report() -> pd.DataFrame:
    frame = pd.DataFrame([
        _job("ngram[spec-draft-n-max=8]", drift_flag=True, throttled_runs=3),
        _job("mtp[spec-draft-n-max=3]", state="failed", baseline_tok_s=NAN,
             variant_tok_s=NAN, speedup=NAN, ci_low=NAN, ci_high=NAN, speculation=None,
             pairs=None, acceptance_rate=NAN, agreement=NAN, drafted=0, runs=0,
             failure_class="server-start"),
        _job("ngram-cache", speedup=NAN, ci_low=NAN, ci_high=NAN, speculation="none",
             acceptance_rate=NAN, agreement_suspect=True, spilled_runs=12),
    ])
    frame["pairs"] = frame["pairs"].astype("Int64")
    return frame


# What a reader must find whole on every row: variant, speedup with its interval, acceptance.
KEY_CELLS = [("ngram[spec-draft-n-max=8]", f"1.42{cells.TIMES} [1.35, 1.50]", "81%"),
             ("mtp[spec-draft-n-max=3]", cells.MISSING, cells.MISSING),
             ("ngram-cache", "no drafts", cells.MISSING)]


def _printed(report: pd.DataFrame, width: int | None) -> str:
    return table_text([job_sheet(report, "campaign x")], width)


def _row_lines(text: str, variant: str) -> str:
    [line] = [line for line in text.splitlines() if f" {variant} " in line]
    return line


def test_at_100_columns_the_key_cells_are_whole_and_hidden_columns_named() -> None:
    text = _printed(_report(), 100)
    assert "\u2026" not in text and max(map(len, text.splitlines())) <= 100
    for variant, speedup, accept in KEY_CELLS:
        line = _row_lines(text, variant)
        assert f" {speedup} " in line and f" {accept} " in line
    assert "hidden at 100 columns: job, model," in text and "--wide" in text


def test_a_wide_enough_console_hides_nothing() -> None:
    table = fit(job_sheet(_report(), "campaign x"), 400)
    assert [str(column.header) for column in table.columns] == WIDE_HEADERS
    assert table.caption is None


def test_wide_shows_every_column_as_before_uncut() -> None:
    table = fit(job_sheet(_report(), "campaign x"))
    assert [str(column.header) for column in table.columns] == WIDE_HEADERS
    text = _printed(_report(), None)
    assert "\u2026" not in text
    header = next(line for line in text.splitlines() if " job " in line)
    assert all(f" {name} " in header for name in WIDE_HEADERS)
    assert "qwen3-30b-a3b-instruct-q4_k_m" in text and "spec-draft-n-max=8 " in text


def test_bracketed_names_are_text_not_markup() -> None:
    text = table_text([job_sheet(_report().assign(model="[bold]m"), "campaign [red]x")], 200)
    assert "ngram[spec-draft-n-max=8]" in text
    assert "[bold]m" in text and "campaign [red]x" in text


def test_the_width_comes_from_the_environment_and_a_pipe_has_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout", io.StringIO())
    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width() is None
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_width() == 100


@pytest.mark.parametrize("value", [None, NAN, pd.NA, float("nan")])
def test_every_missing_value_reads_the_same(value: object) -> None:
    assert cells.missing(value)
    assert cells.number(value) == cells.percent(value) == cells.count(value) == cells.MISSING
    assert cells.ratio(value) == cells.interval(value, 1.0, 2.0) == cells.MISSING
    assert cells.text(value) == "" and cells.flag(value) is False


def test_cells_format_present_values() -> None:
    assert (cells.number(50.06), cells.number(2.6, 2)) == ("50.1", "2.60")
    assert (cells.percent(0.81), cells.percent(0.8123, 0), cells.count(8.0)) == (
        "81.0%", "81%", "8")
    assert cells.interval(1.4234, None, 1.5) == f"1.42{cells.TIMES}"
    assert cells.bracket(1.351, 1.4999) == "[1.35, 1.50]"


def test_plain_rows_print_as_the_frames_json() -> None:
    from farm.report.text import rows_to_json, to_json

    rows: list[dict[str, Any]] = [
        {"job": "a/b", "speedup": 1.5, "low": math.inf, "high": NAN, "pairs": 3},
        {"job": "é\nx", "speedup": None, "low": 0.25, "high": 2.0, "pairs": None}]
    printed = rows_to_json(rows)
    # Its schema and version, then one object per line; JSON has no NaN or infinity: both
    # read null.
    assert printed.splitlines()[:2] == [
        '{"schema":"specfarm.report","version":1,"jobs":[',
        '{"job":"a/b","speedup":1.5,"low":null,"high":null,"pairs":3},']
    frame = pd.DataFrame(rows).astype({"pairs": "Int64"})
    assert printed.count("\n") == to_json(frame).count("\n") == 3
    assert json.loads(printed) == {"schema": "specfarm.report", "version": 1,
                                   "jobs": json.loads(to_json(frame))}
    assert rows_to_json([]) == '{"schema":"specfarm.report","version":1,"jobs":[\n\n]}'
    assert to_json(pd.DataFrame()) == "[\n\n]"


def test_group_rows_pool_jobs_with_a_random_effects_interval_and_tau() -> None:
    from farm.results.groups import category_summary, group_report
    from farm.stats.intervals import log_standard_error
    from farm.stats.speedup import speedup_interval

    jobs = [speedup_interval(values) for values in (
        [0.10, 0.12, 0.08, 0.11], [0.30, 0.33, 0.28, 0.31], [0.20, 0.21, 0.19, 0.22])]
    report = pd.DataFrame({
        "gpu_class": ["a", "a", "b"], "speedup": [j.estimate for j in jobs],
        "ci_low": [j.low for j in jobs], "ci_high": [j.high for j in jobs],
        "log_se": [log_standard_error(j.low, j.high, 4) for j in jobs], "df": [3, 3, 3],
        "pairs": [4, 4, 4], "drafted": [1, 2, 3], "accepted": [1, 1, 1], "runs": [8, 8, 8],
        "kind": "variant"})
    groups = group_report(report, "gpu_class").set_index("gpu_class")
    a, b = groups.loc["a"], groups.loc["b"]
    # An A/A control in class a is a group of its own, never pooled with the variants.
    control = pd.concat([report, report.iloc[[0]].assign(kind="control")])
    by_kind = group_report(control, "gpu_class").set_index(["gpu_class", "kind"])
    assert by_kind.loc[("a", "variant"), "jobs"] == 2
    assert by_kind.loc[("a", "control"), "jobs"] == 1
    assert a["jobs"] == 2 and a["low"] < a["speedup"] < a["high"]
    assert a["tau"] > 0.05  # two jobs 20% apart truly differ
    assert (b["low"], b["high"]) == pytest.approx((jobs[2].low, jobs[2].high))  # one job
    categories = report.rename(columns={"speedup": "estimate", "ci_low": "low",
                                        "ci_high": "high"}).assign(variant="v",
                                                                   category="code")
    [row] = category_summary(categories).to_dict(orient="records")
    assert row["jobs"] == 3 and row["low"] < row["speedup"] < row["high"]


def test_the_best_of_several_variants_is_marked_with_its_simultaneous_interval() -> None:
    from farm.report.text import _flags
    from farm.results.rows import _best_of

    rows: list[dict[str, Any]] = [
        {"campaign": campaign, "model": "m", "gpu_class": "a", "kind": kind,
         "speedup": speedup, "log_se": 0.02, "df": 5}
        for campaign, kind, speedup in (("c", "variant", 1.10), ("c", "variant", 1.30),
                                        ("c", "variant", 1.20), ("c", "control", 1.40),
                                        ("c", "synthetic", 2.00), ("d", "variant", 1.50))]
    marks = _best_of(rows)
    # The fastest of campaign c's three variants (an A/A control and a synthetic arm are no
    # settings to pick); d's one job is alone: nothing picked there.
    assert list(marks) == [1] and marks[1]["best_of"] == 3
    low, high = marks[1]["best_low"], marks[1]["best_high"]
    assert low < 1.30 < high and (high - low) > 2 * 1.3 * 0.02 * 2.571  # wider than plain
    row: dict[Hashable, Any] = dict.fromkeys(("speculation", "agreement_suspect", "drift_flag",
                                            "failure_class", "throttled_runs",
                                            "spilled_runs"))
    row.update(rows[1] | marks[1])
    assert "best of 3: [" in _flags(row)


def test_control_and_synthetic_jobs_are_named_for_what_they_are() -> None:
    from farm.report.cells import variant

    assert variant({"variant": "aa", "kind": "control"}) == "aa · control (A/A)"
    assert variant({"variant": "s", "kind": "synthetic"}) == "s · synthetic (engine cost)"
    assert variant({"variant": "ngram", "kind": "variant"}) == "ngram"


def test_simultaneous_streams_show_their_aggregate_and_what_to_doubt() -> None:
    report = pd.DataFrame([
        _job("ngram", concurrency=4, aggregate_speedup=1.21, aggregate_ci_low=1.1,
             aggregate_ci_high=1.3, overlap_min=0.62, low_slots=[2],
             slot_acceptance={"0": 0.7, "1": 0.72, "2": 0.03, "3": 0.68}, prompt_tokens=1012.0),
        _job("alone", concurrency=1, aggregate_speedup=NAN, overlap_min=NAN, low_slots=None,
             slot_acceptance=None, prompt_tokens=NAN)])
    text = _printed(report, None)
    line = _row_lines(text, "ngram")
    assert f"4x: 1.21{cells.TIMES} [1.10, 1.30]" in line and " 1012 " in line
    assert "streams overlapped 62% at least" in line
    assert "acceptance low on slot 2 (3%) vs 70%" in line
    alone = _row_lines(text, "alone")
    assert "overlapped" not in alone and "slot" not in alone and "4x" not in alone
