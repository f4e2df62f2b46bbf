"""One output contract for every command that writes results: ``-o FILE`` writes the chosen
format, the same bytes the command prints without it, for every format of every command;
nothing but the result on stdout; HTML and Parquet only to a file; tables in a pipe
unpadded and uncut; the report CSV's nested cells as JSON."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import run_cli
from tests.integration.test_golden_reports import load_fixture

# The fixture's campaigns (tests/fixtures/summaries): "history", then "today".
COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("report",): ("table", "md", "csv", "json"),
    ("report", "--all"): ("table", "md", "csv", "json"),
    ("report", "--group-by", "model"): ("table", "md", "csv", "json"),
    ("report", "--by-category"): ("table", "md", "csv", "json"),
    ("compare", "today", "today"): ("table", "md", "csv", "json"),
    ("curve", "today"): ("table", "md", "csv", "json"),
    ("recommend", "today"): ("table", "md", "csv", "json"),
    ("peers", "today"): ("table", "md", "csv", "json"),
    ("history", "00e5ab2af5da"): ("table", "md", "json"),
    ("export", "today"): ("csv", "json"),
    ("export", "--all"): ("csv", "json"),
}


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The golden fixture's store, and a pipe's environment (no COLUMNS)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    load_fixture(url)
    return {"FARM_DATABASE_URL": url}


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_o_writes_what_the_command_prints_in_every_format(args: tuple[str, ...],
                                                          store: dict[str, str],
                                                          tmp_path: Path) -> None:
    for fmt in COMMANDS[args]:
        printed = run_cli(*args, "--format", fmt, env=store)
        assert printed.exit_code == 0, (fmt, printed.output)
        output = tmp_path / f"out.{fmt}"
        written = run_cli(*args, "--format", fmt, "-o", str(output), env=store)
        assert written.exit_code == 0, (fmt, written.output)
        assert written.stdout == "", fmt
        # After any warning (compare of a campaign with itself says so first).
        assert written.stderr.splitlines()[-1].startswith("wrote ") and str(output) in \
            written.stderr
        assert output.read_text(encoding="utf-8") == printed.stdout, fmt
        if fmt == "json":
            json.loads(printed.stdout)
        if fmt == "table":
            lines = printed.stdout.splitlines()
            assert all(line == line.rstrip() for line in lines) and "\u2026" not in printed.stdout
            assert "hidden at" not in printed.stdout


def test_html_and_parquet_go_to_the_file_o_names(store: dict[str, str], tmp_path: Path) -> None:
    page, runs = tmp_path / "r.html", tmp_path / "runs.parquet"
    assert run_cli("report", "--format", "html", "-o", str(page), env=store).exit_code == 0
    assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    result = run_cli("export", "--all", "--format", "parquet", "-o", str(runs), env=store)
    assert result.exit_code == 0 and result.stdout == ""
    assert "runs to" in result.stderr
    assert set(pd.read_parquet(runs)["campaign"]) == {"history", "today"}
    for args in (("report", "--format", "html"), ("export", "--format", "parquet")):
        refused = run_cli(*args, env=store)
        assert refused.exit_code == 2 and "give -o" in refused.stderr, refused.output


def test_report_csv_writes_nested_cells_as_json(store: dict[str, str]) -> None:
    printed = run_cli("report", "--format", "csv", env=store).stdout
    rows = list(csv.DictReader(io.StringIO(printed)))
    varying = [json.loads(row["varying"]) for row in rows if row["varying"]]
    assert varying and all(isinstance(value, dict) for value in varying)
    assert {"spec-type": "ngram-simple", "spec-draft-n-max": "4"} in varying


def test_csv_and_json_rows_carry_the_headline_the_table_opens_with(store: dict[str, str]
                                                                   ) -> None:
    answer = ("today \u00b7 qwen3-8b \u00b7 rtx4090: mtp 1.51\u00d7 [1.50, 1.52], best-of-5 "
              "interval [1.50, 1.53]")
    assert answer in run_cli("report", env=store).stdout
    rows = list(csv.DictReader(io.StringIO(run_cli("report", "--format", "csv",
                                                   env=store).stdout)))
    printed = json.loads(run_cli("report", "--format", "json", env=store).stdout)["jobs"]
    for found in (rows, printed):
        said = {row["headline"] for row in found if row["gpu_class"] == "rtx4090"}
        assert said == {answer}, said


def test_html_has_the_group_by_table_and_plots_every_draft_length(store: dict[str, str],
                                                                  tmp_path: Path) -> None:
    import sqlalchemy as sa

    from farm.results.groups import with_design_columns
    from farm.results.rows import job_report
    from farm.results.runs import draft_lengths_of, job_specs

    page = tmp_path / "r.html"
    assert run_cli("report", "--group-by", "model", "--format", "html", "-o", str(page),
                   env=store).exit_code == 0
    html = page.read_text(encoding="utf-8")
    assert "<h2>By model</h2>" in html and html.index("By model") < html.index("<h2>Jobs</h2>")
    assert ">qwen3-8b<" in html
    # The n-gram jobs vary --spec-draft-n-max, which ngram-simple does not read: their
    # varying flags give no draft length (once dropped from the plot), their specs do
    # (--spec-ngram-simple-size-m's default, 48).
    engine = sa.create_engine(store["FARM_DATABASE_URL"])
    report = job_report(engine, "today")
    jobs = with_design_columns(report, draft_lengths_of(job_specs(engine, "today")))
    engine.dispose()
    ngram = report["variant"].str.startswith("ngram[")
    assert ngram.any() and with_design_columns(report)["draft_n_max"][ngram].isna().all()
    assert set(jobs["draft_n_max"][ngram]) == {48}
    assert set(jobs["draft_n_max"][jobs["variant"] == "mtp"]) == {3}


def test_tpot_percentiles_show_in_markdown_and_wide_tables_not_at_80_columns(
        store: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    rows = json.loads(run_cli("report", "--format", "json", env=store).stdout)["jobs"]
    timed = [row for row in rows if row["tpot_p50_ms_variant"] is not None]
    assert timed
    markdown = run_cli("report", "--format", "md", env=store).stdout
    header = next(line for line in markdown.splitlines() if line.startswith("| job |"))
    assert "| TPOT p50 ms (base/var) | TPOT p99 ms (base/var) |" in header
    for row in timed:
        line = next(line for line in markdown.splitlines()
                    if line.startswith(f"| {row['job_key'][:10]} |"))
        for percentile in ("p50", "p99"):
            base, var = (row[f"tpot_{percentile}_ms_{arm}"] for arm in ("baseline", "variant"))
            assert f"| {base:.1f} / {var:.1f} |" in line, (percentile, line)
    wide = run_cli("report", "--wide", env=store).stdout
    assert "TPOT p50 ms (base/var)" in wide and "TPOT p99 ms (base/var)" in wide
    monkeypatch.setenv("COLUMNS", "80")
    narrow = run_cli("report", env=store).stdout
    assert max(map(len, narrow.splitlines())) <= 80
    assert "TPOT p50 ms (base/var), TPOT p99 ms (base/var) (--wide shows them)" in " ".join(
        narrow.split())


def test_speedup_vs_draft_length_is_drawn_only_where_jobs_ran_at_two_lengths(
        store: dict[str, str], tmp_path: Path) -> None:
    # "today" ran MTP at 3 and n-grams at 48; every job of "history" that drafts ran at 48.
    for campaign, drawn in (("today", True), ("history", False)):
        page = tmp_path / f"{campaign}.html"
        assert run_cli("report", campaign, "--format", "html", "-o", str(page),
                       env=store).exit_code == 0
        html = page.read_text(encoding="utf-8")
        assert ('alt="speedup_vs_draft_length"' in html) is drawn, campaign
        assert 'alt="speedup_intervals"' in html


def test_a_narrow_terminal_gets_the_fitted_table_and_the_note(store: dict[str, str],
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    printed = run_cli("report", "--all", env=store).stdout
    assert max(map(len, printed.splitlines())) <= 80
    header = next(line for line in printed.splitlines() if " variant " in line)
    assert header.split()[1:3] == ["campaign", "\u2503"]
    # The answer first, wrapped to the width: the best of today's five mtp/ngram variants
    # on the RTX 4090.
    assert ("today \u00b7 qwen3-8b \u00b7 rtx4090: mtp 1.51\u00d7 [1.50, 1.52], best-of-5 "
            "interval [1.50, 1.53]") in " ".join(printed.split())
    assert "hidden at 80 columns: job, model," in printed


def test_cpu_and_gpu_shaped_exports_concatenate(store: dict[str, str], tmp_path: Path) -> None:
    """A CPU node's runs leave the GPU columns (and every other optional one) empty: its
    Parquet export has the same column types as a GPU node's, and times carry UTC."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import sqlalchemy as sa

    from farm.store.models import Run

    cpu_url = f"sqlite:///{tmp_path / 'cpu.sqlite'}"
    load_fixture(cpu_url)
    optional = {column.name: None for column in Run.__table__.columns
                if column.nullable and not column.primary_key}
    engine = sa.create_engine(cpu_url)
    with engine.begin() as connection:
        connection.execute(sa.update(Run).values(**optional))
    engine.dispose()
    gpu, cpu = tmp_path / "gpu.parquet", tmp_path / "cpu.parquet"
    for env, output in ((store, gpu), ({"FARM_DATABASE_URL": cpu_url}, cpu)):
        result = run_cli("export", "today", "--format", "parquet", "-o", str(output), env=env)
        assert result.exit_code == 0, result.output
    assert pq.read_schema(cpu) == pq.read_schema(gpu)
    assert not [field.name for field in pq.read_schema(cpu) if pa.types.is_null(field.type)]
    assert pq.read_table(cpu).column("gpu_name").null_count == pq.read_table(cpu).num_rows
    both = pa.concat_tables([pq.read_table(gpu), pq.read_table(cpu)])
    frame = pd.concat([pd.read_parquet(gpu), pd.read_parquet(cpu)])
    assert len(frame) == both.num_rows == 2 * pq.read_table(gpu).num_rows
    assert str(frame["started_at"].dt.tz) == "UTC"
    printed = run_cli("export", "today", "--format", "csv", env=store).stdout
    [first] = list(csv.DictReader(io.StringIO(printed)))[:1]
    assert first["started_at"].endswith("+00:00")
