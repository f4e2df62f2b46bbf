"""`farm import` of llama-bench's real outputs (the provisioned build's llama-bench on
SmolLM2, every format), into SQLite and PostgreSQL, all or nothing; and `farm peers`
putting them beside a real `farm run` of the same model, build and threads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from farm.peers.figures import PeerFigure, PeerFile
from farm.store.db import make_engine, upgrade
from farm.store.models import PeerImport, PeerResult
from farm.store.peers import PeerUpload, store_peer_files
from tests.helpers import matrix_dict, run_cli, write_matrix
from workers.setup.provision import Provisioned

pytestmark = [pytest.mark.server, pytest.mark.alone]
# Two runs, each written in two formats at once (stdout and stderr): equal figures.
RUNS = (("json", "sql"), ("jsonl", "csv"))


@pytest.fixture(scope="module")
def bench_files(provisioned: Provisioned, smollm2: Path,
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """llama-bench's own files: pp16 and tg8, two repetitions, two threads."""
    folder = tmp_path_factory.mktemp("llama-bench")
    files = {}
    for out, err in RUNS:
        done = subprocess.run([str(provisioned.bench), "-m", str(smollm2), "-p", "16", "-n", "8",
                               "-r", "2", "-t", "2", "-o", out, "-oe", err],
                              capture_output=True, text=True, timeout=300, check=True)
        for fmt, text in ((out, done.stdout), (err, done.stderr)):
            files[fmt] = folder / f"bench.{fmt}"
            files[fmt].write_text(text)
    return files


def _figures(url: str) -> list[dict[str, Any]]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(PeerImport.format, *PeerResult.__table__.columns)
                .join(PeerImport, PeerResult.import_id == PeerImport.id)
                .order_by(PeerResult.id)).mappings().all()
    finally:
        engine.dispose()
    return [dict(row) for row in rows]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_llama_bench_format_imports_the_same_figures(
        backend: str, bench_files: dict[str, Path], smollm2: Path, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    url = (f"sqlite:///{tmp_path / 'farm.db'}" if backend == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    env = {"FARM_DATABASE_URL": url}
    result = run_cli("import", *(str(bench_files[f]) for f in ("json", "sql", "jsonl", "csv")),
                     env=env)
    assert result.exit_code == 0, result.output
    assert result.output.count("2 figures from llama-bench") == 4, result.output
    figures = _figures(url)
    assert [f["format"] for f in figures] == ["json"] * 2 + ["sql"] * 2 + ["jsonl"] * 2 + \
        ["csv"] * 2
    for figure in figures:
        assert figure["model_file"] == smollm2.name and figure["build_number"] == 11434
        assert figure["n_threads"] == 2 and figure["speculative"] is False
        assert figure["tok_s"] > 0 and figure["tok_s_sd"] is not None
        assert figure["measured_at"] is not None and figure["raw"]["avg_ts"]
    assert [f["test"] for f in figures[:2]] == ["pp16", "tg8"]
    assert [f["measure"] for f in figures[:2]] == ["prompt", "decode"]
    for first, second in ((0, 2), (1, 3), (4, 6), (5, 7)):  # one run, two formats
        a, b = figures[first], figures[second]
        assert a["tok_s"] == pytest.approx(b["tok_s"], rel=1e-5)
        assert (a["test"], a["n_gen"], a["build_commit"]) == (b["test"], b["n_gen"],
                                                              b["build_commit"])
    json_figure = figures[1]  # the JSON formats list the repetitions' values
    assert json_figure["repetitions"] == 2 and len(json_figure["samples"]) == 2
    assert figures[3]["samples"] is None  # SQL has none

    again = run_cli("import", str(bench_files["json"]), env=env)
    assert again.exit_code == 0 and "already imported" in again.output
    assert len(_figures(url)) == 8


def test_an_import_with_one_bad_file_stores_nothing(bench_files: dict[str, Path],
                                                    tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text(bench_files["json"].read_text()[:-40])
    result = run_cli("import", str(bench_files["csv"]), str(bad))
    assert result.exit_code == 2
    assert f"error: {bad}: line" in result.output and "Nothing of" in result.output
    good = run_cli("import", str(bench_files["csv"]))
    assert "stored as import 1" in good.output, good.output  # the first try wrote nothing


def test_a_write_that_fails_midway_leaves_no_figure(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    upgrade(engine)
    figure = PeerFigure(source="line 1", test="tg8", measure="decode", tok_s=5.0, raw={})
    broken = PeerFigure(source="line 2", test="tg8", measure="decode",
                        tok_s=None, raw={})  # type: ignore[arg-type]  # NOT NULL fails
    uploads = [PeerUpload(PeerFile("llama-bench", "json", [figure]), "a.json", b"a"),
               PeerUpload(PeerFile("llama-bench", "json", [figure, broken]), "b.json", b"b")]
    with pytest.raises(Exception, match="NOT NULL"):
        store_peer_files(engine, uploads)
    with engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(PeerImport)) == 0
        assert connection.scalar(select(func.count()).select_from(PeerResult)) == 0
    engine.dispose()


def test_peers_puts_llama_bench_beside_the_farm_baseline_of_the_same_build(
        bench_files: dict[str, Path], smollm2: Path, tmp_path: Path) -> None:
    # The farm's baseline at llama-bench's two threads: peers match by threads.
    matrix = write_matrix(tmp_path, matrix_dict(smollm2, flags={"ctx-size": 1024, "threads": 2}))
    assert run_cli("run", str(matrix)).exit_code == 0
    assert run_cli("import", str(bench_files["json"])).exit_code == 0
    result = run_cli("peers", "--format", "json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    beside = {row["measure"]: row for row in shown["beside"]}
    assert set(beside) == {"decode", "prompt"} and shown["unmatched"] == []
    for row in beside.values():
        assert row["arm"] == "baseline" and row["kind"] == "imported"
        assert row["tool"] == "llama-bench" and row["farm_tok_s"] > 0
        assert row["peer_over_farm"] == pytest.approx(row["peer_tok_s"] / row["farm_tok_s"])
    assert beside["decode"]["test"] == "tg8" and beside["prompt"]["test"] == "pp16"
    table = run_cli("peers")
    assert "imported figures beside the farm's" in table.output
    assert "llama-bench · tg8" in table.output
