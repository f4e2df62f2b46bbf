"""The per-job report as plain rows (what ``farm report --format json`` prints, without
pandas) and as the frame every other report works on: the same values from one store;
and ``farm export``'s runs with their job's kind."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from farm.columns import REPORT_COLUMNS
from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from farm.report import cells
from farm.report.headline import with_headlines
from farm.report.text import rows_to_json, to_json
from farm.results.finish import job_summary_values
from farm.results.rows import job_report, job_rows, run_facts
from farm.results.runs import job_runs
from farm.stats.design import Design
from farm.store import repo
from farm.store.db import make_engine, upgrade
from farm.store.models import Job, Run
from tests.helpers import matrix_dict, run_cli, write_matrix

REPO = Path(__file__).resolve().parents[2]
PAIRS = 3


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite_engine", "pg_engine"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """The store at the newest schema: embedded, and on PostgreSQL (``pg_engine``)."""
    engine: Engine = request.getfixturevalue(request.param)
    return engine


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _specs(tmp_path: Path) -> dict[str, JobSpec]:
    """Four draft lengths of ngram, an A/A control and a synthetic arm, by variant name."""
    matrix = matrix_dict(Path("m.gguf"), campaign="rows", variants=[
        {"name": "ngram", "flags": {"spec-type": "ngram-simple",
                                    "spec-draft-n-max": [2, 4, 8, 16]}},
        {"name": "aa", "control": True}], **{"engine-curve": {
            "spec-type": "ngram-simple", "draft-n-max": [2], "synth-len": [1.5],
            # Its lookup n-gram no longer than the draft: a curve that drafts.
            "flags": {"spec-ngram-simple-size-n": 2}}})
    specs = load_matrix(write_matrix(tmp_path, matrix))[1]
    return {spec.variant.name: spec for spec in specs}


def _runs(job_id: int, ratio: float) -> list[Run]:
    """Three block pairs (AB, BA, AB) of one prompt, two repetitions per block."""
    runs = []
    for block in range(2 * PAIRS):
        pair = block // 2
        arm = "baseline" if (block % 2 == 0) == (pair % 2 == 0) else "variant"
        for rep in range(2):
            # The variant's ratio wobbles by 1% from pair to pair: an interval with a width.
            wobble = ratio * (1.0 + 0.01 * (pair - 1)) if arm == "variant" else 1.0
            tok_s = (100.0 + 5 * pair + rep) * wobble
            runs.append(Run(
                job_id=job_id, arm=arm, arm_name=arm, block=block, pair=pair, position=block % 2,
                prompt_id="copy", prompt_category="rewrite", repetition=rep, prompt_tokens=10,
                generated_tokens=32, decode_tok_s=tok_s, ttft_ms=5.0, e2e_ms=100.0,
                tpot_ms=1000.0 / tok_s, spec_drafts=4 if arm == "variant" else 0,
                spec_drafted=10 if arm == "variant" else 0,
                spec_accepted=7 if arm == "variant" else 0, text="t", tokens=[1, 2, 3],
                server_version="v", build_name="cpu", model_file="m.gguf",
                model_size=4_000_000_000, model_sha256="0" * 64, host="h", argv=[],
                gpu_name="NVIDIA GeForce RTX 3090", started_at=datetime.now(UTC)))
    return runs


def _finish(engine: Engine, job_id: int, spec: JobSpec) -> None:
    """What a worker writes when the job finishes: its summary and typed statistics."""
    values = job_summary_values(job_runs(engine, job_id), run_facts(engine, job_id),
                                kind=spec.kind, asked=not spec.control, pairs=PAIRS,
                                stop_reason=f"max pairs ({PAIRS}) reached",
                                design=Design(PAIRS, PAIRS), no_agreement=spec.outputs_differ)
    repo.mark_finished(engine, job_id, "done", summary=values)


def _fill(engine: Engine, tmp_path: Path) -> dict[str, int]:
    """Finished jobs (two measured variants, a synthetic arm), an A/A control still
    running, a variant that drafted nothing, one never run; their ids by variant name."""
    specs = _specs(tmp_path)
    ids = dict(zip(specs, repo.register(engine, "rows", "m.yaml", list(specs.values())),
                   strict=True))
    ratios = {"ngram[spec-draft-n-max=2]": 1.2, "ngram[spec-draft-n-max=4]": 1.5,
              "ngram[spec-draft-n-max=8]": 1.1, "aa": 1.0,
              "engine-curve-n2[spec-synth-len=1.5]": 0.9}
    with Session(engine) as session, session.begin():
        for name, ratio in ratios.items():
            session.add_all(_runs(ids[name], ratio))
    for name in ("ngram[spec-draft-n-max=2]", "ngram[spec-draft-n-max=4]",
                 "engine-curve-n2[spec-synth-len=1.5]"):
        _finish(engine, ids[name], specs[name])
    with engine.begin() as connection:
        connection.execute(update(Job).where(Job.id == ids["ngram[spec-draft-n-max=8]"])
                           .values(speculation="none", state="running"))
        connection.execute(update(Job).where(Job.id == ids["aa"]).values(state="running"))
    return ids


def _plain(value: Any) -> Any:
    """A frame's cell as a row holds it: None for NaN and NA."""
    return None if cells.missing(value) else value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return bool(a == b)


def test_json_rows_are_the_report_frames_rows(engine: Engine, tmp_path: Path) -> None:
    ids = _fill(engine, tmp_path)
    # Setting a summary to None stores JSON's null, not SQL's NULL: no summary either way.
    with engine.begin() as connection:
        connection.execute(update(Job).where(Job.id == ids["ngram[spec-draft-n-max=16]"])
                           .values(summary=None))
    rows = job_rows(engine, "rows")
    frame = job_report(engine, "rows")
    assert list(frame.columns) == REPORT_COLUMNS and all(list(r) == REPORT_COLUMNS for r in rows)
    assert [{k: _plain(v) for k, v in r.items()} for r in frame.to_dict(orient="records")] == rows
    # What `farm report --format json` prints is what the frame's JSON says.
    printed, framed = json.loads(rows_to_json(rows))["jobs"], json.loads(to_json(frame))
    assert all(_same(row[k], other[k]) for row, other in zip(printed, framed, strict=True)
               for k in REPORT_COLUMNS)

    by_variant = {row["variant"]: row for row in rows}
    best = by_variant["ngram[spec-draft-n-max=4]"]
    assert best["speedup"] == pytest.approx(1.5, rel=0.01) and best["best_of"] == 2
    assert best["best_low"] < best["ci_low"] < best["ci_high"] < best["best_high"]
    assert by_variant["ngram[spec-draft-n-max=2]"]["best_of"] is None
    assert by_variant["engine-curve-n2[spec-synth-len=1.5]"]["kind"] == "synthetic"
    # Unfinished: facts from the runs, no interval; a variant that drafted nothing has no
    # speedup to quote; a job never run counts nothing.
    running = by_variant["aa"]
    assert running["speedup"] == pytest.approx(1.0, rel=0.01) and running["ci_low"] is None
    assert running["runs"] == 2 * PAIRS * 2 and running["kind"] == "variant"
    assert by_variant["ngram[spec-draft-n-max=8]"]["speedup"] is None
    never = by_variant["ngram[spec-draft-n-max=16]"]
    assert (never["runs"], never["drafted"], never["acceptance_rate"]) == (0, 0, None)
    assert best["acceptance_rate"] == pytest.approx(0.7) and best["bandwidth_bound"] > 0


def test_report_json_loads_neither_pandas_nor_numpy(sqlite_engine: Engine,
                                                    tmp_path: Path) -> None:
    _fill(sqlite_engine, tmp_path)
    expected = json.loads(rows_to_json(with_headlines(job_rows(sqlite_engine, "rows"))))
    # A fresh interpreter on this tree, as the `farm` command starts.
    script = ("import sys\nfrom farm.cli import main\n"
              "sys.argv = ['farm', 'report', 'rows', '--format', 'json']\n"
              "try:\n    main()\nexcept SystemExit as end:\n    assert not end.code, end.code\n"
              "print(sorted({'pandas', 'numpy', 'yaml'} & set(sys.modules)), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120, check=False,
                            env={**os.environ, "FARM_DATABASE_URL": _url(sqlite_engine)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected
    assert result.stderr.splitlines()[-1] == "[]"


def test_export_gives_each_run_its_jobs_kind(engine: Engine, tmp_path: Path) -> None:
    ids = _fill(engine, tmp_path)
    # The synthetic arm's kind comes from its summary, even when its spec cannot be read
    # (a much older farm's); the running A/A control's from its spec; a job with neither
    # reads as a variant, as in reports.
    with engine.begin() as connection:
        for name in ("engine-curve-n2[spec-synth-len=1.5]", "ngram[spec-draft-n-max=8]"):
            connection.execute(update(Job).where(Job.id == ids[name]).values(spec={}))
    output = tmp_path / "runs.csv"
    result = run_cli("export", "rows", "-o", str(output),
                     env={"FARM_DATABASE_URL": _url(engine)})
    assert result.exit_code == 0, result.output
    runs = pd.read_csv(output)
    kinds = runs.groupby("variant")["kind"].agg(set).to_dict()
    assert kinds == {"ngram[spec-draft-n-max=2]": {"variant"},
                     "ngram[spec-draft-n-max=4]": {"variant"},
                     "ngram[spec-draft-n-max=8]": {"variant"}, "aa": {"control"},
                     "engine-curve-n2[spec-synth-len=1.5]": {"synthetic"}}


def test_exports_carry_the_nodes_other_processes_as_records(engine: Engine,
                                                             tmp_path: Path) -> None:
    """A run's busiest other processes, stored as [name, pid, cores], export as records: a
    typed list of structs in Parquet, JSON in CSV; runs without them stay empty."""
    _fill(engine, tmp_path)
    with engine.begin() as connection:
        first = connection.execute(select(func.min(Run.id))).scalar_one()
        connection.execute(update(Run).where(Run.id == first).values(
            node_top=[["mypy", 4242, 0.97], ["pylint", 17, 0.05]]))
    env = {"FARM_DATABASE_URL": _url(engine)}
    parquet, csv_file = tmp_path / "runs.parquet", tmp_path / "runs.csv"
    for output, fmt in ((parquet, "parquet"), (csv_file, "csv")):
        result = run_cli("export", "rows", "--format", fmt, "-o", str(output), env=env)
        assert result.exit_code == 0, result.output
    expected = [{"process": "mypy", "pid": 4242, "cores": 0.97},
                {"process": "pylint", "pid": 17, "cores": 0.05}]
    from_parquet = pd.read_parquet(parquet).set_index("id")["node_top"]
    assert [dict(record) for record in from_parquet[first]] == expected
    assert from_parquet.drop(index=first).isna().all()
    from_csv = pd.read_csv(csv_file).set_index("id")["node_top"]
    assert json.loads(from_csv[first]) == expected
    assert from_csv.drop(index=first).isna().all()


def test_each_row_says_where_its_job_ran(engine: Engine, tmp_path: Path) -> None:
    ids = _fill(engine, tmp_path)
    moved = ids["ngram[spec-draft-n-max=4]"]
    with engine.begin() as connection:  # half its runs on a second host
        connection.execute(update(Run).where(Run.job_id == moved, Run.pair == 1)
                           .values(host="h2", server_version="v2\nbuilt by x"))
    rows = {row["variant"]: row for row in job_rows(engine, "rows")}
    assert rows["ngram[spec-draft-n-max=4]"]["hosts"] == "2 hosts"
    assert rows["ngram[spec-draft-n-max=2]"]["hosts"] == "h"
    assert rows["ngram[spec-draft-n-max=2]"]["device"] == "NVIDIA GeForce RTX 3090"
    assert rows["ngram[spec-draft-n-max=4]"]["server_version"] == "v"
    assert str(rows["aa"]["measured_at"]).endswith("+00:00")
    never = [row for row in rows.values() if row["runs"] == 0]
    assert never and all(row["hosts"] is None and row["device"] is None for row in never)


def _resume(engine: Engine, job_id: int) -> None:
    """The job's first pair measured by cpu-0 (attempt 1, lost), the rest by cpu-1 on
    another host (attempt 2), which holds the job now."""
    with engine.begin() as connection:
        connection.execute(update(Run).where(Run.job_id == job_id, Run.pair == 0).values(
            worker_name="cpu-0", attempt=1, started_at=datetime(2026, 12, 7, 2, 40, tzinfo=UTC)))
        connection.execute(update(Run).where(Run.job_id == job_id, Run.pair > 0).values(
            worker_name="cpu-1", attempt=2, host="h2"))
        connection.execute(update(Job).where(Job.id == job_id).values(lease_owner="cpu-1"))


def test_a_job_resumed_on_another_worker_names_both(engine: Engine, tmp_path: Path) -> None:
    ids = _fill(engine, tmp_path)
    _resume(engine, ids["ngram[spec-draft-n-max=4]"])
    with engine.begin() as connection:  # one worker all along: its name as the job has it
        connection.execute(update(Run).where(Run.job_id == ids["ngram[spec-draft-n-max=2]"])
                           .values(worker_name="cpu-0"))
        connection.execute(update(Job).where(Job.id == ids["ngram[spec-draft-n-max=2]"])
                           .values(lease_owner="cpu-0"))
    rows = {row["variant"]: row for row in job_rows(engine, "rows")}
    assert rows["ngram[spec-draft-n-max=4]"]["worker"] == "cpu-0, cpu-1"
    assert rows["ngram[spec-draft-n-max=4]"]["hosts"] == "2 hosts"
    assert rows["ngram[spec-draft-n-max=2]"]["worker"] == "cpu-0"
    assert rows["aa"]["worker"] is None  # runs of `farm run`: no worker


def test_the_page_says_which_worker_and_host_ran_each_block(sqlite_engine: Engine,
                                                            tmp_path: Path) -> None:
    ids = _fill(sqlite_engine, tmp_path)
    page = tmp_path / "page.html"
    env = {"FARM_DATABASE_URL": _url(sqlite_engine)}
    result = run_cli("report", "rows", "--format", "html", "-o", str(page), env=env)
    assert result.exit_code == 0, result.output
    assert "where each block ran" not in page.read_text().lower()  # one place: no section
    _resume(sqlite_engine, ids["ngram[spec-draft-n-max=4]"])
    result = run_cli("report", "rows", "--format", "html", "-o", str(page), env=env)
    assert result.exit_code == 0, result.output
    html = page.read_text()
    section = html[html.index("<h2>Where each block ran"):]
    section = section[:section.index("</table>")]
    with Session(sqlite_engine) as session:
        key = session.get_one(Job, ids["ngram[spec-draft-n-max=4]"]).job_key[:10]
    # Pair 0 is blocks 0-1 (cpu-0, attempt 1), pairs 1-2 blocks 2-5 (cpu-1 on h2, attempt 2).
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in section.split("<tr>")[2:]]
    assert rows == [[key, "ngram[spec-draft-n-max=4]", "1", "cpu-0", "h", "0-1"],
                    [key, "ngram[spec-draft-n-max=4]", "2", "cpu-1", "h2", "2-5"]]

