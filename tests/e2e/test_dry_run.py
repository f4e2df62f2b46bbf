"""`farm run --dry-run` and `farm submit --dry-run` make every check the run makes, against
the real build and models: they print the argv that would really run (renames applied),
refuse what the run refuses with the same words, and write nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_mtp import _tutorial
from tests.helpers import matrix_dict, run_cli, write_matrix
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server


def test_run_dry_run_prints_the_tutorial_line_as_this_build_runs_it(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    oracle = provisioned.models["qwen35-mtp-oracle"]
    matrix = write_matrix(tmp_path, _tutorial([{"name": "oracle", "path": str(oracle)}]))
    result = run_cli("run", "--dry-run", str(matrix))
    assert result.exit_code == 0, result.output
    [variant] = [line for line in result.stdout.splitlines()
                 if line.lstrip().startswith("variant ")]
    assert variant.endswith(" --spec-type draft-mtp --spec-draft-n-max 3")
    assert f"--model {oracle}" in variant
    assert "--draft-max" not in result.stdout and "--spec-type mtp" not in result.stdout
    assert not isolated_data_dir.exists()


def test_run_dry_run_refuses_what_the_run_refuses_in_the_same_words(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, {**_tutorial([{"name": "smollm2", "path": str(smollm2)}]),
                                     "prompt-mode": "chat"})
    dry = run_cli("run", "--dry-run", str(matrix))
    real = run_cli("run", str(matrix))
    assert dry.exit_code == real.exit_code == 2
    assert dry.stderr == real.stderr
    assert "--spec-type draft-mtp needs MTP heads" in dry.stderr
    assert "nextn_predict_layers is 0" in dry.stderr
    assert dry.stdout == "" and dry.stderr.startswith(f"error: {matrix}: ")
    assert not isolated_data_dir.exists()


def _fleet_matrix(model_file: str, **flags: Any) -> dict[str, Any]:
    return {"campaign": "fleet-dry", "build": "cpu", "gpu-classes": ["cpu"],
            "models": [{"name": "m", "file": model_file}], "prompts": ["hello"],
            "flags": {"ctx-size": 256, "threads": 1, **flags},
            "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]}


def test_submit_dry_run_shows_a_job_whose_model_is_elsewhere_as_not_checked(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, _fleet_matrix("only-on-the-gpu-node.gguf"))
    result = run_cli("submit", "--dry-run", str(matrix))
    assert result.exit_code == 0, result.output
    assert "MODELS_DIR/only-on-the-gpu-node.gguf" in result.stdout
    assert " --spec-type ngram-simple" in result.stdout
    [note] = [line for line in result.stdout.splitlines() if "not checked" in line]
    assert note.startswith("job ") and "flags checked against the build" in note and (
        f"not checked on this machine: {matrix}: models[0].file: model 'm' "
        "'only-on-the-gpu-node.gguf' not found in the models dir ") in note
    assert not isolated_data_dir.exists()


def test_submit_dry_run_checks_the_flags_even_when_the_model_is_elsewhere(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, _fleet_matrix("only-on-the-gpu-node.gguf",
                                                  **{"cache-type-k": "q9_0"}))
    result = run_cli("submit", "--dry-run", str(matrix))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {matrix}: flags (baseline): ")
    assert "does not accept" in result.stderr and "q9_0" in result.stderr
    assert not isolated_data_dir.exists()


def test_submit_dry_run_refuses_a_value_the_build_does_not_accept(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, _fleet_matrix(smollm2.name, **{"cache-type-k": "q9_0"}))
    result = run_cli("submit", "--dry-run", str(matrix))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {matrix}: flags (baseline): ")
    assert "does not accept" in result.stderr and "q9_0" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    assert not isolated_data_dir.exists()


def test_submit_dry_run_matches_run_dry_run_for_a_model_on_this_machine(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    by_name = write_matrix(tmp_path, _fleet_matrix(smollm2.name), "by-name.yaml")
    by_path = write_matrix(tmp_path, matrix_dict(smollm2, variants=[
        {"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]), "by-path.yaml")
    submitted = run_cli("submit", "--dry-run", str(by_name))
    ran = run_cli("run", "--dry-run", str(by_path))
    assert submitted.exit_code == ran.exit_code == 0, submitted.output + ran.output
    for result in (submitted, ran):
        assert f"--model {smollm2.resolve()} " in result.stdout
        assert "not checked" not in result.stdout
    assert not isolated_data_dir.exists()


@pytest.mark.parametrize("streams", [1, 4])
def test_the_dry_runs_argv_is_the_argv_the_run_stores(streams: int, tmp_path: Path,
                                                     smollm2: Path,
                                                     isolated_data_dir: Path) -> None:
    """Farm-owned flags included (--parallel per stream, --log-verbosity, --offline where
    the build knows it); the socket the run makes is the dry run's SOCKET. Once the store holds
    runs of the build on the model, the dry run also says about how long the jobs take."""
    import shlex
    import sqlite3

    matrix = write_matrix(tmp_path, matrix_dict(smollm2, concurrency=streams))
    dry = run_cli("run", "--dry-run", str(matrix))
    assert dry.exit_code == 0, dry.output
    printed = {line.split()[0]: shlex.split(line)[1:] for line in dry.stdout.splitlines()
               if line.startswith(("  baseline ", "  variant "))}
    assert "4 runs in 1 job; no time estimate" in dry.stdout
    real = run_cli("run", str(matrix))
    assert real.exit_code == 0, real.output
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        stored = dict(db.execute("select arm, argv from run group by arm").fetchall())
    for arm, argv in stored.items():
        ran = json.loads(argv)
        ran[ran.index("--host") + 1] = "SOCKET"
        assert printed[arm] == ran, arm
        assert ran[ran.index("--parallel") + 1] == str(streams) and "--log-verbosity" in ran
    again = run_cli("run", "--dry-run", str(matrix))
    assert re.search(r"4 runs in 1 job; about \d+ s, server starts and warm-ups \d+% of it, "
                     r"from the store's runs", again.stdout), again.stdout


def test_run_refuses_jobs_of_another_gpu_class_unless_run_as_it(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine is class `default` (FARM_GPU_CLASS unset): an RTX 3090 matrix's runs
    would join that class's history, so `farm run` refuses them, saying the three ways
    out; --as-class and FARM_GPU_CLASS each let it run."""
    matrix = write_matrix(tmp_path, {**_fleet_matrix("x"), "gpu-classes": ["rtx3090"],
                                     "models": [{"name": "m", "path": str(smollm2)}]})
    refused = run_cli("run", "--dry-run", str(matrix))
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"error: {matrix}: gpu-classes: this machine is GPU class default (FARM_GPU_CLASS) "
        "and the jobs to run are rtx3090")
    for way in ("`farm submit`", "FARM_GPU_CLASS=rtx3090", "--as-class rtx3090"):
        assert way in refused.stderr
    assert run_cli("run", "--dry-run", "--as-class", "rtx3090",
                   str(matrix)).exit_code == 0
    both = run_cli("run", "--dry-run", "--gpu-class", "cpu", "--as-class", "rtx3090",
                   str(matrix))
    assert both.exit_code == 2 and "give one" in both.stderr
    monkeypatch.setenv("FARM_GPU_CLASS", "rtx3090")
    assert run_cli("run", "--dry-run", str(matrix)).exit_code == 0
    # Of several classes, this machine's is run without --gpu-class.
    several = write_matrix(tmp_path, {
        **_fleet_matrix("x"), "gpu-classes": ["cpu", "rtx3090"],
        "models": [{"name": "m", "path": str(smollm2)}]}, "several.yaml")
    assert run_cli("run", "--dry-run", str(several)).exit_code == 0
    monkeypatch.setenv("FARM_GPU_CLASS", "RTX 3090")
    bad = run_cli("run", "--dry-run", str(matrix))
    assert bad.exit_code == 2 and "FARM_GPU_CLASS" in bad.stderr
    assert not isolated_data_dir.exists()
