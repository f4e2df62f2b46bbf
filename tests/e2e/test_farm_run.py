"""`farm run` as a user runs it: a real CLI process, real llama-server, real SQLite."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from farm.results.runs import runs_frame
from farm.store.db import make_engine
from tests.helpers import matrix_dict, write_matrix
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
FARM = str(Path(sys.executable).with_name("farm"))


def farm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FARM, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, check=False)


def report_rows(*args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    result = farm("report", *args, "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)["jobs"]
    return rows


def test_run_stores_every_run_with_provenance_and_reports_the_drafting(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, matrix_dict(smollm2))
    result = farm("run", str(matrix))
    assert result.returncode == 0, result.stderr
    assert "test-campaign" in result.stdout

    [row] = report_rows()
    assert row["model"] == "smollm2" and row["variant"] == "ngram"
    assert row["varying_flags"] == "spec-type=ngram-simple"
    assert row["drafted"] > 0 and row["accepted"] > 0
    assert 0 < row["acceptance_rate"] <= 1
    assert row["speedup"] is not None and row["speedup"] > 0
    assert row["baseline_tok_s"] > 0 and row["variant_tok_s"] > 0
    assert row["runs"] == 4 and row["state"] == "done"

    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        rows = db.execute("select arm, generated_tokens, server_version, model_file, "
                          "model_sha256, host, argv, text, machine_class, gpu_memory_mb "
                          "from run").fetchall()
    assert len(rows) == 4
    for arm, tokens, version, model_file, sha, host, argv, text, machine, memory in rows:
        # This machine's own class (FARM_GPU_CLASS unset), no GPU memory on a CPU node.
        assert (machine, memory) == ("default", None)
        assert tokens == 32 and "build 11434" in version
        assert model_file == smollm2.name and len(sha) == 64 and host
        assert ("--spec-type" in json.loads(argv)) == (arm == "variant")
        assert text

    frame = runs_frame(make_engine(f"sqlite:///{isolated_data_dir / 'farm.db'}"))
    assert len(frame) == 4
    assert {"job_key", "arm", "block", "decode_tok_s", "spec_accepted", "text",
            "model_sha256", "server_version", "argv"} <= set(frame.columns)
    assert frame.loc[frame["arm"] == "variant", "spec_drafted"].sum() == row["drafted"]
    # Each run keeps its block's server start and warm-up: one value a block, in seconds.
    starts = frame.groupby("block")[["server_start_s", "warmup_s"]].nunique()
    assert (starts == 1).all().all(), frame[["block", "server_start_s", "warmup_s"]]
    assert (frame["server_start_s"] > 0).all() and (frame["warmup_s"] > 0).all()
    assert (frame["server_start_s"] < 60).all() and (frame["warmup_s"] < 60).all()

    again = farm("run", str(matrix))
    assert again.returncode == 0, again.stderr
    assert "1 of 1 job already done" in again.stderr
    assert report_rows()[0]["runs"] == 4

    csv = farm("report", "test-campaign", "--format", "csv")
    assert csv.stdout.splitlines()[0].startswith("campaign,job_key,model,variant")
    assert "speedup" in farm("report").stdout


def test_dry_run_prints_each_arms_argv_and_writes_nothing(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    result = farm("run", "--dry-run", str(write_matrix(tmp_path, matrix_dict(smollm2))))
    assert result.returncode == 0, result.stderr
    # The farm's own flags, as the run starts the server (--offline where the build knows
    # it), then the arm's.
    assert "--log-verbosity 4 --parallel 1 --metrics" in result.stdout
    assert "--ctx-size 1024 --threads 1 --spec-type ngram-simple" in result.stdout
    assert not isolated_data_dir.exists()


@pytest.mark.parametrize(("change", "expected"), [
    ({"variants": [{"name": "v", "flags": {"spec-typo": "ngram-simple"}}]},
     "--spec-typo is not on the farm's list of benchmark options (did you mean --spec-type?)"),
    ({"variants": [{"name": "v", "flags": {"cache-type-k": "q9_0"}}]}, "does not accept"),
    ({"flags": {"threads": "2 && reboot"}}, "shell"),
    ({"variants": []}, "variants"),
    ({"models": [{"name": "m", "path": "missing.gguf"}]}, "does not exist"),
    ({"unknown-key": 1}, "unknown key"),
    ({"flags": {"ctx-size": "big", "threads": 2}}, "--ctx-size N takes a number, not 'big'"),
])
def test_bad_matrix_exits_2_with_one_message_and_writes_nothing(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path,
        change: dict[str, Any], expected: str) -> None:
    result = farm("run", str(write_matrix(tmp_path, matrix_dict(smollm2, **change))))
    assert result.returncode == 2
    assert expected in result.stderr and "matrix.yaml" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    assert not isolated_data_dir.exists()


def test_a_key_given_twice_exits_2_naming_it_and_both_lines(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, matrix_dict(smollm2))
    lines = matrix.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("n-predict:"))
    matrix.write_text("\n".join([*lines, "n-predict: 64", ""]))
    result = farm("run", str(matrix))
    assert result.returncode == 2
    assert f"{matrix}: key 'n-predict' is given twice, on lines {first + 1} and " \
           f"{len(lines) + 1}" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    assert not isolated_data_dir.exists()


def _servers_using(model: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(model).encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def _stored_runs(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=30) as connection:
            return int(connection.execute("select count(*) from run").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def test_ctrl_c_stops_the_server_keeps_finished_runs_and_the_next_run_resumes(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    model = tmp_path / "interrupt-me.gguf"  # its own path, to find its servers in /proc
    try:
        model.hardlink_to(smollm2)
    except OSError:
        shutil.copyfile(smollm2, model)
    matrix = write_matrix(tmp_path, matrix_dict(model, repetitions=6))
    # As in a terminal: a suite started in the background (`tests/run &` in a script)
    # ignores SIGINT, and its children would inherit that.
    process = subprocess.Popen([FARM, "run", str(matrix)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    db = isolated_data_dir / "farm.db"
    deadline = time.monotonic() + 120
    while _stored_runs(db) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _servers_using(model), "a server should be running mid-job"
    [live] = report_rows()  # WAL: reading while `farm run` writes
    assert live["state"] == "running" and live["runs"] >= 2
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert _servers_using(model) == []
    kept = _stored_runs(db)
    assert 2 <= kept < 12

    resumed = farm("run", str(matrix))
    assert resumed.returncode == 0, resumed.stderr
    [row] = report_rows()
    assert row["runs"] == 12 and row["state"] == "done"


def test_run_on_postgresql(tmp_path: Path, smollm2: Path, postgres_url: str) -> None:
    env = {"FARM_DATABASE_URL": postgres_url}
    matrix = write_matrix(tmp_path, matrix_dict(smollm2, repetitions=1))
    result = farm("run", str(matrix), env=env)
    assert result.returncode == 0, result.stderr
    [row] = report_rows(env=env)
    assert row["runs"] == 2 and row["drafted"] > 0


def test_a_control_arm_runs_the_baseline_twice_and_is_reported_as_such(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = matrix_dict(smollm2, repetitions=1, variants=[{"name": "aa", "control": True}],
                         **{"n-predict": 16})
    assert farm("run", str(write_matrix(tmp_path, matrix))).returncode == 0
    [row] = report_rows()
    assert row["kind"] == "control" and row["speculation"] == "not-requested"
    assert row["agreement"] == 1.0 and row["best_of"] is None
    text = farm("report", "--wide")  # unfitted: the variant's label on one line
    assert "aa · control (A/A)" in text.stdout
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        argv = {arm: json.loads(text) for arm, text in db.execute("select arm, argv from run")}
    # The same command line: each server's socket has the same path inside its sandbox.
    assert argv["baseline"] == argv["variant"]


def test_a_precision_job_stops_once_its_interval_meets_the_target_and_says_when(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    # The CPU-paying MTP oracle (every draft accepted, about 1.5x), a matrix's default
    # rule: a look after each pair from the fourth, until the interval is within ±20%.
    oracle = provisioned.models["qwen35-mtp-oracle-cpu"]
    matrix = matrix_dict(oracle, **{
        "prompt-mode": "completion", "repetitions": 1, "pairs": 4, "max-pairs": 7,
        "target-ci": 0.2, "models": [{"name": "oracle", "path": str(oracle)}],
        "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp",
                                               "spec-draft-n-max": 3}}]})
    assert "stop-rule" not in matrix
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr
    [row] = report_rows()
    assert row["interval_method"] == "sequential crossover, adjusted"
    assert 4 <= row["pairs"] <= 7 and row["runs"] == row["pairs"] * 2
    half_width = (row["ci_high"] - row["ci_low"]) / 2 / row["speedup"]
    if half_width <= 0.2:
        assert row["stop_reason"] == (f"target met at {row['pairs']} of at most 7 pairs "
                                      f"(±{half_width:.1%})")
    else:  # a machine too noisy for ±20% in 7 pairs says so
        assert row["pairs"] == 7 and row["stop_reason"].startswith("target not reachable")
    assert row["stop_reason"] in farm("report", "--wide").stdout  # among its flags
