"""The board as text, markdown, JSON and a static site (farm/report/board.py and
board_site.py, through the format registry), from a hand-made board: two models (one named
with markup, as a stranger's bundle may be) x two GPUs x three settings, a row of one
machine, a best that beats its runner-up and one that does not, and `farm recommend`'s
prediction for one model and GPU."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from farm.errors import ConfigError
from farm.report import kinds
from farm.report.board import board_json, board_markdown, board_text
from farm.report.formats import Target, formats_for, render, write

NAN = math.nan
SMOL, EVIL = "a1" * 32, "b2" * 32
EVIL_NAME = "<script>alert(1)</script>"
H200, RTX = "H200 · 140 GiB", "RTX 4090 · 24 GiB"
BUNDLES = ["c3" * 32, "d4" * 32, "e5" * 32, "f6" * 32]
SETTINGS = {4.0: "--spec-draft-n-max 4", 8.0: "--spec-draft-n-max 8",
            16.0: "--spec-draft-n-max 16"}
NGRAM = "--spec-type ngram-cache"
# farm recommend's predictions for SmolLM2 on the H200 (the other rows have none): n-max 6,
# never measured, predicted fastest.
PREDICTED = {4.0: 1.28, 6.0: 1.52, 8.0: 1.44, 16.0: 1.15}
RECOMMENDED = "--spec-draft-n-max 6"


def board_row(model: str, gpu: str, setting: str, draft: float, speedup: float,
              machines: int = 3, **extra: Any) -> dict[str, Any]:
    """One row as ``farm.stats.board.board_rows`` returns it."""
    row = {"model": model, "model_name": EVIL_NAME if model == EVIL else "SmolLM2-135M-Q8_0",
           "gpu": gpu, "backend": "CUDA", "setting": setting, "draft_n_max": draft,
           "machines": machines, "jobs": machines * 2, "speedup": speedup,
           "low": speedup * 0.95, "high": speedup * 1.05, "log_se": 0.02, "df": 8.0,
           "tau": 0.01, "one_machine": machines == 1, "decode_tok_s": 100.0 * speedup,
           "decode_low": 95.0 * speedup, "decode_high": 105.0 * speedup, "acceptance": 0.7,
           "vram_cost_mb": 312.0, "joules_per_token": NAN, "build_min": 4500.0,
           "build_max": 4620.0, "bundles": BUNDLES[:machines],
           **_predicted(model, gpu, draft)}
    return {**row, **extra}


def _predicted(model: str, gpu: str, draft: float) -> dict[str, float]:
    value = PREDICTED.get(draft, NAN) if (model, gpu) == (SMOL, H200) else NAN
    return {"predicted": value, "predicted_low": value * 0.92, "predicted_high": value * 1.08,
            "predicted_machines": NAN if math.isnan(value) else 2}


def predictions_frame() -> pd.DataFrame:
    """What ``farm.stats.board.pool_predictions`` returns for the board."""
    return pd.DataFrame([{"model": SMOL, "gpu": H200, "backend": "CUDA",
                          "setting": f"--spec-draft-n-max {int(draft)}", "draft_n_max": draft,
                          **_predicted(SMOL, H200, draft)} for draft in PREDICTED])


def board_rows() -> pd.DataFrame:
    rows = []
    for model in (SMOL, EVIL):
        for gpu in (H200, RTX):
            speedups = {4.0: 1.30, 8.0: 1.45, 16.0: 1.20} if gpu == H200 else \
                {4.0: 1.40, 8.0: 1.42, 16.0: 1.10}
            for draft, speedup in speedups.items():
                machines = 1 if (model, gpu, draft) == (SMOL, RTX, 16.0) else 3
                setting, shown = SETTINGS[draft], draft
                if (model, gpu, draft) == (EVIL, RTX, 16.0):
                    setting, shown = NGRAM, NAN  # a setting without a draft length
                rows.append(board_row(model, gpu, setting, shown, speedup, machines))
    return pd.DataFrame(rows)


def best_rows() -> pd.DataFrame:
    """Per model x GPU: on the H200 n-max 8 beats n-max 4; on the 4090 it does not."""
    rows = []
    for model in (SMOL, EVIL):
        for gpu, speedup, runner, runner_speedup, beats in (
                (H200, 1.45, SETTINGS[4.0], 1.30, True),
                (RTX, 1.42, SETTINGS[4.0], 1.40, False)):
            rows.append({"model": model, "model_name": EVIL_NAME if model == EVIL
                         else "SmolLM2-135M-Q8_0", "gpu": gpu, "backend": "CUDA",
                         "setting": SETTINGS[8.0], "draft_n_max": 8.0, "machines": 3,
                         "settings": 3, "speedup": speedup, "low": speedup * 0.93,
                         "high": speedup * 1.07, "runner_up": runner,
                         "runner_up_speedup": runner_speedup,
                         "ahead": speedup / runner_speedup,
                         "ahead_low": 1.04 if beats else 0.97,
                         "ahead_high": 1.19 if beats else 1.06, "beats": beats,
                         "build_min": 4500.0, "build_max": 4620.0, "bundles": BUNDLES[:3],
                         **(_recommended() if (model, gpu) == (SMOL, H200) else
                            {"recommended": None, "recommended_speedup": NAN,
                             "recommended_low": NAN, "recommended_high": NAN})})
    return pd.DataFrame(rows)


def _recommended() -> dict[str, Any]:
    value = PREDICTED[6.0]
    return {"recommended": RECOMMENDED, "recommended_speedup": value,
            "recommended_low": value * 0.92, "recommended_high": value * 1.08}


def bundles_frame() -> pd.DataFrame:
    signed = ["known: alice", "unknown key 0123456789abcdef", "unsigned", "unsigned"]
    return pd.DataFrame([{"sha256": sha, "machine": f"{n:x}" * 32, "signed": signed[n],
                          "campaigns": ["smol-ngram", "<img src=x onerror=alert(2)>"],
                          "jobs": 6, "runs": 96, "refused": n % 2, "differences": 0,
                          "created_at": pd.Timestamp("2025-06-01T10:00:00Z"),
                          "added_at": pd.Timestamp("2025-06-02T10:00:00Z")}
                         for n, sha in enumerate(BUNDLES)])


def hand_made_board() -> kinds.Board:
    """The board every test here (and the browser test) reads."""
    return kinds.Board(rows=board_rows(), best=best_rows(), bundles=bundles_frame(),
                       predictions=predictions_frame(), title="board")


def test_the_board_has_a_table_markdown_json_and_a_site() -> None:
    assert formats_for(kinds.Board) == ("table", "md", "json", "site")
    with pytest.raises(ConfigError, match="writes a folder of files: give -o board/"):
        render(hand_made_board(), "site", Target())


def test_the_hand_made_frames_are_the_boards_columns() -> None:
    from farm.board.view import BUNDLE_COLUMNS
    from farm.stats.board import BEST_COLUMNS, PREDICTION_COLUMNS, ROW_COLUMNS

    board = hand_made_board()
    assert list(board.rows.columns) == ROW_COLUMNS
    assert list(board.best.columns) == BEST_COLUMNS
    assert list(board.predictions.columns) == PREDICTION_COLUMNS
    assert list(board.bundles.columns) == BUNDLE_COLUMNS


def test_the_table_says_best_of_m_whether_it_beats_and_marks_one_machine() -> None:
    text = board_text(hand_made_board(), None)
    assert "best of 3; beats the runner-up: 1.12\u00d7 [1.04, 1.19] ahead" in text
    assert "best of 3; not shown to beat the runner-up: 1.01\u00d7 [0.97, 1.06]" in text
    assert re.search(r"--spec-draft-n-max 16 .* 1\.10\u00d7 \[1\.04, 1\.16\] .* 1\*", text)
    assert "b4500-b4620" in text and "312" in text
    assert "1*: one machine, the interval is its own" in text
    # Rows of one model and GPU: best first.
    every = text.split("board: every setting")[1]
    smol = [line for line in every.splitlines() if "SmolLM2" in line and H200 in line]
    assert [SETTINGS[8.0] in smol[0], SETTINGS[4.0] in smol[1]] == [True, True]


def test_a_narrow_table_splits_by_model_and_gpu_and_keeps_every_number() -> None:
    text = board_text(hand_made_board(), 90)
    assert f"board: every setting · SmolLM2-135M-Q8_0 · {H200} (CUDA)" in text
    assert "1.45\u00d7 [1.38, 1.52]" in text and "hidden at 90 columns" in text
    rendered = render(hand_made_board(), "table", Target(wide=True))
    assert isinstance(rendered, str) and "decode tok/s [95% CI]" in rendered


def test_markdown_has_per_model_and_gpu_the_best_line_then_each_setting() -> None:
    text = board_markdown(hand_made_board())
    sections = text.split("\n### ")[1:5]
    assert len(sections) == 4
    for section in sections:
        lines = section.splitlines()
        assert lines[2].startswith("**best: --spec-draft-n-max 8 at ")
        assert "best of 3" in lines[2] and "runner-up --spec-draft-n-max 4 (1." in lines[2]
        assert lines[4].startswith(
            "| setting | speedup [95% CI] | predicted [95% CI] | machines |")
    assert "beats the runner-up" in sections[0] and "not shown to beat" in sections[1]
    assert ("| --spec-draft-n-max 16 | 1.10\u00d7 [1.04, 1.16] | \u2013 | 1\\* | "
            "110.0 [104.5, 115.5] | 70% | b4500-b4620 | +312 | \u2013 | 2 |") in text
    assert EVIL_NAME not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img" not in text


def test_json_has_a_schema_header_and_nulls_for_nan() -> None:
    def no_nan(value: str) -> Any:
        raise AssertionError(f"{value} in JSON")

    found = json.loads(board_json(hand_made_board()), parse_constant=no_nan)
    assert (found["schema"], found["version"]) == ("specfarm-board", 2)
    assert [len(found[name]) for name in ("rows", "best", "bundles")] == [12, 4, 4]
    row = found["rows"][0]
    assert row["joules_per_token"] is None and row["bundles"] == BUNDLES[:3]
    assert [best["beats"] for best in found["best"]] == [True, False, True, False]
    assert found["bundles"][0]["created_at"].startswith("2025-06-01T10:00:00")
    rendered = render(hand_made_board(), "json", Target())
    assert isinstance(rendered, str) and json.loads(rendered) == found


def site_links(site: Path) -> list[tuple[Path, str]]:
    """Every page's links, as (page, href)."""
    return [(page, href) for page in site.rglob("*.html")
            for href in re.findall(r'href="([^"]*)"', page.read_text(encoding="utf-8"))]


@pytest.fixture
def site(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "site"
    out.mkdir()
    (out / "README.txt").write_text("mine")
    (out / "index.html").write_text("old")
    write(hand_made_board(), "site", Target(output=out))
    said = capsys.readouterr()
    assert said.out == "" and re.fullmatch(
        f"wrote 7 files to {re.escape(str(out))} \\(index.html, 2 model pages, 4 bundle "
        r"pages; \d+ KiB\)\n", said.err), said.err
    return out


def test_the_site_is_plain_files_whose_links_all_resolve(site: Path) -> None:
    assert (site / "README.txt").read_text() == "mine"  # not the site's: left alone
    assert sorted(str(path.relative_to(site)) for path in site.rglob("*.html")) == sorted(
        ["index.html", f"models/{SMOL[:16]}.html", f"models/{EVIL[:16]}.html",
         *(f"bundles/{sha[:16]}.html" for sha in BUNDLES)])
    links = site_links(site)
    assert len(links) > 50
    for page, href in links:
        assert not re.match(r"[a-z]+:|/", href), f"{page}: {href} is not a relative link"
        target = (page.parent / href.split("#")[0]).resolve()
        assert target.is_file() and site.resolve() in target.parents, f"{page}: {href}"
    assert not list(site.rglob(".*.partial"))


def test_strings_from_bundles_are_escaped_on_every_page(site: Path) -> None:
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text and "<img" not in text, page
    model = (site / f"models/{EVIL[:16]}.html").read_text(encoding="utf-8")
    assert "<h1>&lt;script&gt;alert(1)&lt;/script&gt;</h1>" in model
    bundle = (site / f"bundles/{BUNDLES[0][:16]}.html").read_text(encoding="utf-8")
    assert "&lt;img src=x onerror=alert(2)&gt;" in bundle and "known: alice" in bundle


def test_a_model_page_plots_by_draft_length_and_links_each_number(site: Path) -> None:
    page = (site / f"models/{EVIL[:16]}.html").read_text(encoding="utf-8")
    assert page.count("<svg") == 1 and page.count("<polyline") == 2
    # 5 points with a draft length (the ngram-cache row has none), each with its bar.
    assert page.count("<circle") == 5
    assert f"without a draft length: {NGRAM} on {RTX} (CUDA)." in page
    speedup = f'<a href="../bundles/{BUNDLES[0][:16]}.html">1.45\u00d7 [1.38, 1.52]</a>'
    assert speedup in page
    assert page.count('<span class="tag">best</span>') == 2
    index = (site / "index.html").read_text(encoding="utf-8")
    assert f'href="models/{SMOL[:16]}.html"' in index and "best of 3; beats" in index


def test_writing_the_site_again_replaces_its_files(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    assert index.startswith("<!DOCTYPE html>")
    write(hand_made_board(), "site", Target(output=site))
    assert (site / "index.html").read_text(encoding="utf-8") == index


def test_an_empty_board_says_how_to_fill_it(tmp_path: Path) -> None:
    from farm.board.view import BUNDLE_COLUMNS
    from farm.stats.board import BEST_COLUMNS, PREDICTION_COLUMNS, ROW_COLUMNS

    empty = kinds.Board(rows=pd.DataFrame(columns=ROW_COLUMNS),
                        best=pd.DataFrame(columns=BEST_COLUMNS),
                        bundles=pd.DataFrame(columns=BUNDLE_COLUMNS),
                        predictions=pd.DataFrame(columns=PREDICTION_COLUMNS))
    assert "farm board add BUNDLE..." in board_text(empty, 80)
    assert "No job on the board yet: `farm board add" in board_markdown(empty)
    assert json.loads(board_json(empty))["rows"] == []
    write(empty, "site", Target(output=tmp_path / "site"))
    assert "farm board add" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_recommends_prediction_sits_beside_the_rows_and_the_best() -> None:
    text = board_text(hand_made_board(), None)
    assert "predicted [95% CI]" in text and "farm recommend predicts" in text
    assert f"{RECOMMENDED} (1.52\u00d7 [1.40, 1.64])" in text
    assert "predicted: `farm recommend`'s prediction for the setting" in text
    markdown = board_markdown(hand_made_board())
    assert f"farm recommend predicts {RECOMMENDED} (1.52\u00d7 [1.40, 1.64])" in markdown
    found = json.loads(board_json(hand_made_board()))
    assert found["version"] == 2 and len(found["predictions"]) == len(PREDICTED)
    assert found["best"][0]["recommended"] == RECOMMENDED


def test_without_engine_curves_no_prediction_column_is_shown() -> None:
    board = hand_made_board()
    bare = kinds.Board(rows=board.rows.assign(predicted=NAN, predicted_low=NAN,
                                              predicted_high=NAN, predicted_machines=NAN),
                       best=board.best.assign(recommended=None, recommended_speedup=NAN),
                       bundles=board.bundles, predictions=board.predictions.iloc[:0])
    for text in (board_text(bare, None), board_markdown(bare)):
        assert "predicted" not in text and "farm recommend" not in text


def test_the_site_shows_the_prediction(site: Path) -> None:
    page = (site / f"models/{SMOL[:16]}.html").read_text(encoding="utf-8")
    assert "<th class=\"n\">predicted [95% CI]</th>" in page
    assert f"farm recommend predicts {RECOMMENDED}" in page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "farm recommend predicts" in index
