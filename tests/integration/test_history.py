"""`farm history` and the regression gates on stored jobs (SQLite and PostgreSQL): three
nightly campaigns of one matrix on three builds, the third with a planted cost per draft
(variant tok/s -17%, draft ms/token up, acceptance and the baseline unchanged)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from farm.store.db import upgrade
from tests.fixtures.nights import store_nights
from tests.helpers import matrix_dict, run_cli, write_matrix


@pytest.fixture
def nights(engine: Engine, tmp_path: Path) -> tuple[str, Path]:
    """The three nights stored (tests/fixtures/nights.py): the comparable key and a matrix
    file of the experiment."""
    upgrade(engine)
    return store_nights(engine, tmp_path)


def _farm(url: str, *args: str) -> Any:
    return run_cli(*args, env={"FARM_DATABASE_URL": url})


def test_history_orders_builds_by_number_and_marks_the_change_on_the_moved_series(
        url: str, nights: tuple[str, Path]) -> None:
    key, matrix = nights
    result = _farm(url, "history", str(matrix), "--format", "json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert [build["build_name"] for build in found["builds"]] == ["b1", "b2", "b3"]
    assert [build["build"] for build in found["builds"]] == ["1" * 12, "2" * 12, "3" * 12]
    called = {(change["series"], change["build_b"]): change["verdict"]
              for change in found["changes"] if change["verdict"] != "unchanged"}
    assert called == {("variant_tok_s", "3" * 12): "regression",
                      ("speedup", "3" * 12): "regression",
                      ("draft_ms_per_token", "3" * 12): "regression"}
    [late] = [row["text"] for row in found["described"] if row["build_b"] == "3" * 12]
    assert late.startswith("engine: speedup -16% [") and "variant tok/s -16%" in late
    assert late.endswith("baseline tok/s, acceptance, acceptance length, verify ms/token "
                         "unchanged")
    series = {point["series"] for point in found["points"]}
    assert series == {"speedup", "baseline_tok_s", "variant_tok_s", "acceptance_1",
                      "acceptance_2", "acceptance_3", "mean_accepted_length",
                      "draft_ms_per_token", "verify_ms_per_token"}
    # Each figure names the campaign of the job it comes from (the latest per build).
    campaigns = {job["build"]: job["campaign"] for job in found["jobs"]}
    assert campaigns == {"1" * 12: "night-1", "2" * 12: "night-2", "3" * 12: "night-3"}
    assert all(point["campaign"] == campaigns[point["build"]] for point in found["points"])
    by_key = _farm(url, "history", key[:10])
    assert by_key.exit_code == 0, by_key.output
    assert f"history of key {key[:10]}" in by_key.output and "\u25bc" in by_key.output


def test_history_gate_exits_3_on_a_regression_beyond_its_threshold(
        url: str, nights: tuple[str, Path]) -> None:
    _, matrix = nights
    gated = _farm(url, "history", str(matrix), "--fail-on-regression")
    assert gated.exit_code == 3, gated.output
    assert "regression: job" in gated.output and "variant_tok_s -16" in gated.output
    for quiet in ("baseline_tok_s", "variant_tok_s:30", "acceptance:0"):
        result = _farm(url, "history", str(matrix), f"--fail-on-regression={quiet}")
        assert result.exit_code == 0, (quiet, result.output)
    costly = _farm(url, "history", str(matrix), "--fail-on-regression=draft_ms_per_token:100")
    assert costly.exit_code == 3, costly.output
    bad = _farm(url, "history", str(matrix), "--fail-on-regression=tok_s:x")
    assert bad.exit_code == 2 and "give SERIES or SERIES:PERCENT" in bad.output


def test_compare_gate_exits_3_only_where_the_speedup_regressed(
        url: str, nights: tuple[str, Path]) -> None:
    assert _farm(url, "compare", "night-1", "night-2", "--fail-on-regression").exit_code == 0
    late = _farm(url, "compare", "night-2", "night-3", "--fail-on-regression")
    assert late.exit_code == 3 and "speedup -16" in late.output
    assert _farm(url, "compare", "night-2", "night-3",
                 "--fail-on-regression=speedup:25").exit_code == 0
    bad = _farm(url, "compare", "night-2", "night-3", "--fail-on-regression=verify_ms_per_token")
    assert bad.exit_code == 2
    assert bad.output.rstrip().endswith("SERIES one of speedup, all"), bad.output


def test_history_writes_markdown_and_a_page_with_a_trend_plot(
        url: str, nights: tuple[str, Path], tmp_path: Path) -> None:
    _, matrix = nights
    markdown = _farm(url, "history", str(matrix), "--format", "md")
    assert markdown.exit_code == 0, markdown.output
    assert "| build | number | campaign | speedup |" in markdown.output
    assert "| 111111111111 | 101 | night-1 | 1.49" in markdown.output
    assert "- 222222222222 -> 333333333333: engine: speedup -16%" in markdown.output
    page = tmp_path / "history.html"
    result = _farm(url, "history", str(matrix), "--format", "html", "-o", str(page))
    assert result.exit_code == 0, result.output
    html = page.read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 1 and "variant tok/s -16%" in html


def test_history_of_nothing_stored_says_what_to_run(url: str, engine: Engine,
                                                    tmp_path: Path) -> None:
    upgrade(engine)
    path = write_matrix(tmp_path, matrix_dict(Path("m.gguf")))
    result = _farm(url, "history", str(path))
    assert result.exit_code == 2 and "no finished job has these comparable keys" in result.output
    result = _farm(url, "history", "not-a-key")
    assert result.exit_code == 2 and "neither a matrix file nor a comparable key" in result.output
