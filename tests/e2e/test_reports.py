"""Reports people read: intervals, categories, HTML with plots, exports, comparisons."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from farm.columns import REPORT_COLUMNS
from tests.e2e.test_farm_run import farm, report_rows
from tests.helpers import COPY_PROMPT, matrix_dict, write_matrix
from tests.unit.test_report_text import WIDE_HEADERS

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, smollm2: Path) -> Path:
    """The data dir of two campaigns, run once for the module (each test reads a copy)."""
    root = tmp_path_factory.mktemp("two-campaigns")
    prompts = [{"id": "copy", "category": "rewrite", "text": COPY_PROMPT},
               {"id": "poem", "category": "creative", "text": "Write a poem about rain."}]
    for campaign in ("before", "after"):
        matrix = matrix_dict(smollm2, campaign=campaign, prompts=prompts, repetitions=1,
                             pairs=2, **{"max-pairs": 2, "n-predict": 32})
        result = farm("run", str(write_matrix(root, matrix, f"{campaign}.yaml")),
                      env={"FARM_DATA_DIR": str(root / "farm-data")})
        assert result.returncode == 0, result.stderr
    return root / "farm-data"


@pytest.fixture
def two_campaigns(measured: Path, tmp_path: Path, isolated_data_dir: Path) -> Path:
    """This test's data dir: a copy of the two campaigns'."""
    shutil.copytree(measured, isolated_data_dir)
    return tmp_path


def test_report_rows_carry_interval_pairs_and_checks(two_campaigns: Path) -> None:
    [row] = report_rows("after")
    assert row["pairs"] == 2 and row["stop_reason"] == "max pairs (2) reached"
    assert row["ci_low"] <= row["speedup"] <= row["ci_high"]
    assert 0 <= row["agreement"] <= 1 and isinstance(row["drift_flag"], bool)
    assert row["mean_accepted_length"] >= 1


def test_by_category_html_and_exports(two_campaigns: Path) -> None:
    categories = json.loads(farm("report", "--by-category", "--format", "json").stdout)
    assert {row["category"] for row in categories} == {"rewrite", "creative"}

    page = two_campaigns / "report.html"
    assert farm("report", "--format", "html", "-o", str(page)).returncode == 0
    html = page.read_text()
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    # Speedups, per category, the runs; no speedup against draft length: every job of the
    # campaign drafts at one length (it is drawn over two or more).
    assert len(images) == 3 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert "speedup vs draft length" not in html.lower()
    assert "https://" not in html and "http://" not in html

    parquet, csv = two_campaigns / "runs.parquet", two_campaigns / "runs.csv"
    assert farm("export", "--format", "parquet", "-o", str(parquet)).returncode == 0
    assert farm("export", "after", "-o", str(csv)).returncode == 0
    runs = pd.read_parquet(parquet)
    assert len(runs) == len(pd.read_csv(csv)) == 2 * 2 * 2
    assert {"decode_tok_s", "prompt_category", "text", "model_sha256"} <= set(runs.columns)
    assert set(runs["kind"]) == set(pd.read_csv(csv)["kind"]) == {"variant"}


def test_compare_matches_jobs_across_campaigns(two_campaigns: Path) -> None:
    result = farm("compare", "before", "after", "--format", "json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["variant"] == "ngram" and row["change"] > 0
    assert row["verdict"] in ("faster", "regression", "within noise")
    assert farm("compare", "before", "nope").returncode == 2


def test_report_fits_100_columns_and_wide_shows_every_column(two_campaigns: Path) -> None:
    narrow = farm("report", env={"COLUMNS": "100"})
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 100 and "\u2026" not in narrow.stdout
    [row] = [line for line in lines if " ngram " in line and line.startswith("\u2502")]
    [job] = report_rows("after")
    assert f" {job['speedup']:.2f}\u00d7 [{job['ci_low']:.2f}, {job['ci_high']:.2f}] " in row
    assert f" {job['acceptance_rate']:.0%} " in row
    csv_header = farm("report", "--format", "csv").stdout.splitlines()[0]
    # Each row carries the headline the table opens with (the answer of its campaign, model
    # and GPU class), in JSON and CSV alike.
    assert list(job) == csv_header.split(",") == [*REPORT_COLUMNS, "headline"]
    assert job["headline"].startswith("after · ") and "ngram" in job["headline"]

    wide = farm("report", "--wide", env={"COLUMNS": "100"})
    assert wide.returncode == 0, wide.stderr
    header = next(line for line in wide.stdout.splitlines() if " job " in line)
    assert all(f" {name} " in header for name in WIDE_HEADERS)
    assert "\u2026" not in wide.stdout
