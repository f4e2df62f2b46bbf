"""One fitter for every table: at 60, 80, 100 and 200 columns no number is cut, a name is
shortened only with a mark ("…"), the columns left out are named in one note, and rows of
several campaigns get a campaign column."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from farm.report import cells, text
from farm.report.history import history_sheets
from farm.report.sheet import _NAME_MIN as NAME_MIN
from farm.report.sheet import ELLIPSIS, Sheet, fit, markdown, plain_sheet, shorten, table_text
from tests.fixtures.histories import one_job_history

WIDTHS = (60, 80, 100, 200)
NAN = math.nan


def _row(campaign: str, variant: str, **values: object) -> dict[str, Any]:
    """A row with every key any table reads, long names and wide numbers included."""
    row: dict[str, Any] = {
        "campaign": campaign, "job_key": "a1b2c3d4e5" * 6 + "ffff",
        "model": "qwen3.6-35b-a3b-mtp-oracle-q4_k_m", "variant": variant, "kind": "variant",
        "varying_flags": "spec-type=ngram-simple spec-draft-n-max=16", "gpu_class": "rtx3090",
        "state": "done", "baseline_tok_s": 1234.56, "variant_tok_s": 1543.21,
        "speedup": 1.2449, "ci_low": 1.1812, "ci_high": 1.3201, "speculation": "ok",
        "pairs": 8, "acceptance_rate": 0.8123, "agreement": 0.98, "drafted": 1234567,
        "accepted": 98765, "runs": 96, "agreement_suspect": True, "drift_flag": True,
        "failure_class": None, "throttled_runs": 3, "spilled_runs": 0, "stop_mismatch": 0,
        "draft_ms_per_token": 0.105, "verify_ms_per_token": 16.84, "memory_cost_mb": 2232.3,
        "draft_context_mib": 212.13, "concurrency": 4, "aggregate_speedup": 1.21,
        "aggregate_ci_low": 1.1, "aggregate_ci_high": 1.3, "prompt_tokens": 1012.0,
        "best_of": NAN, "jobs": 13, "low": 0.9412, "high": 1.3611, "tau": 0.0642,
        "q_value": 0.0031, "verdict": "within noise", "min_speedup": 0.9941,
        "max_speedup": 1.5123, "category": "long-context-summarisation",
        "build_a": "b10587-3f545becc", "build_b": "b10611-08c69e381", "speedup_a": 1.2449,
        "ci_low_a": 1.1812, "ci_high_a": 1.3201, "speedup_b": 1.3012, "ci_low_b": 1.2511,
        "ci_high_b": 1.3566, "change": 1.0452, "change_low": 0.9981, "change_high": 1.0911,
        "baseline_tok_s_a": 1234.56, "baseline_tok_s_b": 1201.11, "build": "b10587",
        "spec_type": "draft-mtp", "draft_n_max": 16, "points": 9, "length_min": 1.0,
        "length_max": 12.5, "step_cost": 1.4321, "step_cost_low": 1.3012,
        "step_cost_high": 1.5523, "break_even": 1.8123, "break_even_low": 1.7012,
        "break_even_high": 1.9544, "speedup_at_max": 2.3344, "speedup_at_max_low": 2.2011,
        "speedup_at_max_high": 2.4512, "shape": "linear", "lack_of_fit_p": 0.412,
        "synth_len": 2.5, "acceptance_length": 2.4812, "recommended": variant,
        "runner_up": "ngram-map-k4v[spec-draft-n-max=8]", "runner_up_speedup": 1.1812,
        "why": "fastest predicted, its interval above the runner-up's", "setting": variant,
        "length": 3.1234, "rank": 1, "extrapolated": False, "speedup_measured": 1.2011,
        "half_width": 0.0412, "arm": "variant", "measure": "decode", "farm_tok_s": 1543.21,
        "farm_low": 1501.1, "farm_high": 1580.2, "tok_s": 1499.87, "tok_s_sd": 12.34,
        "repetitions": 5, "peer_over_farm": 0.9719, "tool": "llama-bench", "test": "tg128",
        "source": "bench-results-from-the-rtx3090-box.json: record 3",
        "model_file": "Qwen3.6-35B-A3B-MTP-Q4_K_M.gguf", "build_commit": "3f545becc",
        "build_number": 10587, "n_threads": 8, "file_name": "bench.json"}
    return {**row, **values}


def _frame() -> pd.DataFrame:
    return pd.DataFrame([
        _row("sweep-2026-12-01", "ngram[spec-draft-n-max=16]"),
        _row("sweep-2026-12-01", "engine-curve-n4[spec-synth-len=2.5]", kind="synthetic"),
        _row("mtp-check", "mtp", speedup=NAN, ci_low=NAN, ci_high=NAN, pairs=None,
             state="failed", failure_class="server-start")]).astype({"pairs": "Int64"})


def _history() -> list[Sheet]:
    """A history of one job over three builds (long build names, every series), its
    changes found as `farm history` finds them."""
    levels = {"speedup": [1.3123, 1.3011, 1.1812], "baseline_tok_s": [1234.56, 1230.12, 1228.9],
              "variant_tok_s": [1617.23, 1599.81, 1450.32], "acceptance_1": [0.8123, 0.8011,
                                                                            0.8045],
              "acceptance_2": [0.6512, 0.6498, 0.6501], "mean_accepted_length": [2.4312, 2.4101,
                                                                                 2.4213],
              "draft_ms_per_token": [0.105, 0.104, 0.931], "verify_ms_per_token": [16.84, 16.9,
                                                                                   16.81]}
    builds = ["b10587-3f545becc12a", "b10611-08c69e381aa3", "b10644-77c1d0e2b9f4"]
    history = one_job_history(
        levels, builds, [10587, 10611, 10644],
        ["nightly-2026-12-01", "nightly-2026-12-02", "bisect"], key="k" * 64,
        label="qwen3.6-35b-a3b-mtp-oracle-q4_k_m · mtp · spec-draft-n-max=3 spec-type=draft-mtp")
    return history_sheets(history, "history of nightly.yaml")


SHEETS: dict[str, Callable[[], list[Sheet]]] = {
    "history": _history,
    "report": lambda: [text.job_sheet(_frame(), "all campaigns")],
    "groups": lambda: [text.group_sheet(_frame().assign(variant="ngram[spec-draft-n-max=16]"),
                                        "variant")],
    "categories": lambda: [text.category_sheet(_frame(), "campaign sweep")],
    "compare": lambda: [text.compare_sheet(_frame(), "sweep-2026-12-01", "mtp-check")],
    "curve": lambda: text.curve_sheets(_frame(), _frame(), "campaign sweep"),
    "recommend": lambda: text.recommendation_sheets(_frame(), _frame(), "campaign sweep"),
    "check": lambda: [text.check_sheet(_frame(), "sweep -> check")],
    "peers": lambda: text.peer_sheets(_frame(), _frame(), "campaign sweep"),
    "status": lambda: [plain_sheet("failed", ("job", "variant", "reason"), [
        ("a1b2c3d4e5", "ngram[spec-draft-n-max=16]", "server-start: llama-server exited 1 "
         "before /health answered: error while handling argument --spec-type")])],
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", SHEETS)
def test_every_table_fits_without_cutting_a_number_or_a_name_unmarked(name: str,
                                                                      width: int) -> None:
    for sheet in SHEETS[name]():
        printed = table_text([sheet], width)
        table = fit(sheet, width)
        shown = [str(column.header) for column in table.columns]
        if max(map(len, printed.splitlines())) > width:
            # Wider than the terminal only when even the columns that always stay do not
            # fit with every name at its shortest: then nothing is cut instead.
            assert all((column.width or 0) <= NAME_MIN for column in table.columns
                       if column.justify == "left"), (name, width, printed)
        for column, texts in zip(sheet.columns, sheet.texts, strict=True):
            if column.header not in shown:
                continue
            place = table.columns[shown.index(column.header)]
            for cell in texts:
                if column.numeric:
                    assert cell in printed, (name, width, column.header, cell)
                    continue
                for word in cell.split():
                    assert word in printed or shorten(word, place.width or 0) in printed, (
                        name, width, column.header, word)
        hidden = [column.header for column in sheet.columns if column.header not in shown]
        if hidden:
            note = f"hidden at {width} columns: {', '.join(hidden)} (--wide shows them)"
            assert " ".join(note.split()) in " ".join(printed.split())


def test_the_columns_a_row_needs_stay_at_60_columns() -> None:
    printed = table_text([text.job_sheet(_frame(), "all campaigns")], 60)
    header = next(line for line in printed.splitlines() if "variant" in line)
    for name in ("campaign", "variant", "speedup", "accept", "flags"):
        assert name in header
    assert f"1.24{cells.TIMES} [1.18, 1.32]" in printed


def test_a_column_of_a_later_rank_never_squeezes_the_names_of_rank_0() -> None:
    # At 200 columns the variant (rank 0) once wrapped to "aa · control" over "(A/A)" so
    # that columns of later ranks fitted; now a later rank shows only where rank 0 keeps
    # its width, and the rest are named as hidden.
    frame = pd.concat([_frame(), pd.DataFrame([_row("sweep-2026-12-01", "aa", kind="control")])])
    printed = table_text([text.job_sheet(frame.astype({"pairs": "Int64"}), "all")], 200)
    assert any(" aa \u00b7 control (A/A) " in line for line in printed.splitlines())
    assert " engine-curve-n4[spec-synth-len=2.5] " in printed and "hidden at 200" in printed
    assert max(map(len, printed.splitlines())) <= 200


def test_a_hidden_model_or_class_splits_the_table_one_per_value() -> None:
    # Three jobs of one variant name on two models and two GPU classes: at 80 columns the
    # model and class columns do not fit, so each (model, class) gets its own table, named
    # in its title; the note on what is hidden comes once, under the last.
    frame = pd.DataFrame([_row("c", "mtp"), _row("c", "mtp", gpu_class="h100"),
                          _row("c", "mtp", model="gemma-3-1b")]).astype({"pairs": "Int64"})
    sheet = text.job_sheet(frame, "campaign c")
    printed = table_text([sheet], 80)
    lines = printed.splitlines()
    assert [line for line in lines if line.startswith("campaign c")] == [
        "campaign c \u00b7 qwen3.6-35b-a3b-mtp-oracle-q4_k_m \u00b7 rtx3090",
        "campaign c \u00b7 qwen3.6-35b-a3b-mtp-oracle-q4_k_m \u00b7 h100",
        "campaign c \u00b7 gemma-3-1b \u00b7 rtx3090"]
    [note] = [n for n, line in enumerate(lines) if line.startswith("hidden at 80 columns")]
    assert note > max(n for n, line in enumerate(lines) if line.startswith("\u2514"))
    assert max(map(len, lines)) <= 80
    # Wide enough for the model and the class: one table; no width (a pipe): one table.
    assert table_text([sheet], None).splitlines()[0] == "campaign c"
    one = text.job_sheet(frame.iloc[:1], "campaign c")
    assert table_text([one], 80).splitlines()[0] == "campaign c"


def test_rows_of_several_campaigns_get_a_campaign_column_and_one_campaign_none() -> None:
    several = text.job_sheet(_frame(), "all campaigns")
    one = text.job_sheet(_frame().assign(campaign="only"), "campaign only")
    assert several.columns[0].header == "campaign" and "mtp-check" in several.texts[0]
    assert "campaign" not in [column.header for column in one.columns]


def test_a_long_word_is_shortened_in_the_middle_keeping_both_ends() -> None:
    assert shorten("ngram[spec-draft-n-max=16]", 15) == f"ngram[s{ELLIPSIS}max=16]"
    assert shorten("short words stay", 6) == "short words stay"


def test_a_pipe_gets_every_column_unpadded() -> None:
    printed = table_text([text.job_sheet(_frame(), "all campaigns")], None)
    assert "hidden" not in printed and ELLIPSIS not in printed
    assert all(line == line.rstrip() for line in printed.splitlines())
    assert printed.splitlines()[0] == "all campaigns"


def test_markdown_has_every_column_numbers_right_aligned_and_pipes_escaped() -> None:
    sheet = plain_sheet("a | b", ("name", "value"), [("x|y", "1")])
    assert markdown([sheet]).splitlines() == [
        "### a \\| b", "", "| name | value |", "|---|---|", "| x\\|y | 1 |"]
    job = markdown([text.job_sheet(_frame(), "all campaigns")])
    assert "| campaign | job | model |" in job and "---:|" in job


def test_a_strangers_control_characters_never_reach_a_table_in_any_format() -> None:
    """ESC sequences (an OSC 8 link, clear screen, a window title), a one-byte CSI (C1) and
    a bidirectional override in a cell, a header, the title or the caption are removed
    once, in the Sheet, for the terminal, a pipe and markdown alike."""
    hostile = ("\x1b]8;;https://evil.example/\x07gpu\x1b]8;;\x07\x1b[2J\x1b]0;title\x07"
               "\x9b31m\u202eA\x00")
    sheet = plain_sheet(f"board {hostile}", (f"speedup {hostile}", "value"), [(hostile, "1")],
                        caption=f"first {hostile}\nsecond line")
    assert sheet.title == "board ]8;;https://evil.example/gpu]8;;[2J]0;title31mA"
    assert sheet.caption == ("first ]8;;https://evil.example/gpu]8;;[2J]0;title31mA\n"
                             "second line")
    for printed in (table_text([sheet], None), table_text([sheet], 80), markdown([sheet])):
        assert not any(cells.clean(char) == "" for char in printed if char != "\n")
