"""`farm tune`'s command line is a matrix's `tune:` space by another route: crafted spaces
(options that run code, listen or name files; shell syntax and control characters in
values; empty sweeps), a margin of zero or less, budgets of nothing or smaller than one
round, and a drafter whose vocabulary is not the model's are refused with one line and exit
2, before any file is left behind or any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli
from workers.setup.provision import Provisioned


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A file named like a GGUF: every refusal here comes before it is opened."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    return tmp_path / "m.gguf"


def _refused(result: object, data_dir: Path) -> None:
    output, stderr = result.output, result.stderr  # type: ignore[attr-defined]
    assert result.exit_code == 2, output  # type: ignore[attr-defined]
    assert stderr.splitlines()[-1].startswith("error: "), stderr
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in output and "\x1b" not in stderr and "\x07" not in stderr
    # Nothing left behind: no matrix, no trial of one, no store.
    assert not [path for path in data_dir.rglob("*") if path.is_file()]
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize("space", [
    "", "=1,2", "spec-draft-n-max=", "spec-draft-n-max=1,,2",
    "tools=1,2",                                   # runs programs
    "host=0.0.0.0,127.0.0.2",                      # a listener
    "log-file=/tmp/a,/tmp/b",                      # writes files
    "spec-draft-model=/etc/passwd,../../x.gguf",   # files outside the models dir
    "spec-type=ngram-simple;touch /tmp/pwned,ngram-mod",
    "spec-type=$(touch /tmp/pwned),ngram-mod",
    "spec-type=ngram\x1b]0;owned\x07,ngram-mod",   # a terminal's title
    "spec-draft-n-max=1\n2,3",
])
def test_a_crafted_space_is_refused_before_anything_is_written(
        model: Path, isolated_data_dir: Path, space: str) -> None:
    _refused(run_cli("tune", str(model), "--space", space), isolated_data_dir)


@pytest.mark.parametrize("option", [
    ("--epsilon", "0"), ("--epsilon", "-0.02"), ("--budget", "0"), ("--budget", "-5m"),
    ("--budget", "lots"), ("--budget", "2.5"),
    ("--budget", "7"),  # one round is 3 candidates x 4 pairs
])
def test_a_margin_or_budget_it_cannot_run_is_refused(
        model: Path, isolated_data_dir: Path, option: tuple[str, str]) -> None:
    _refused(run_cli("tune", str(model), "--space", "spec-draft-n-max=1,2,3", *option),
             isolated_data_dir)


def test_a_drafter_of_another_vocabulary_is_refused_before_a_server_starts(
        provisioned: Provisioned, smollm2: Path, isolated_data_dir: Path) -> None:
    oracle = provisioned.models["qwen35-mtp-oracle-cpu"]
    result = run_cli("tune", str(oracle), "--drafter", str(smollm2), "--space",
                     "spec-draft-n-max=2,3", "--prompt-mode", "completion")
    _refused(result, isolated_data_dir)
    assert "vocabulary" in result.stderr


def test_an_option_the_build_lacks_is_refused_before_a_server_starts(
        smollm2: Path, isolated_data_dir: Path) -> None:
    result = run_cli("tune", str(smollm2), "--space", "spec-ngram-size-n=2,3")
    _refused(result, isolated_data_dir)
    assert "removed --spec-ngram-size-n" in result.stderr


def test_a_tune_matrix_submitted_is_raced_never_posted_whole(
        tmp_path: Path, isolated_data_dir: Path) -> None:
    """`farm submit` of a `tune:` matrix races it round by round (tests/e2e/test_fleet.py);
    a retry or an allowance, which a race does not take, and an unreachable fleet are each
    one line before anything is stored or posted, never the whole space at max pairs."""
    matrix = tmp_path / "tune.yaml"
    matrix.write_text("campaign: raced\nmodels: [{name: m, file: m.gguf}]\nprompts: [hi]\n"
                      "tune: {space: {spec-type: draft-mtp, spec-draft-n-max: [1, 2, 3]}}\n")
    env = {"FARM_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
           "FARM_BROKER_URL": "redis://127.0.0.1:1/0"}
    for flag in ("--retry-failed", "--retry-cancelled", "--allow-option=spec-p-min"):
        result = run_cli("submit", flag, str(matrix), env=env)
        _refused(result, isolated_data_dir)
        assert "a race posts its rounds itself and takes no --retry-failed" in result.stderr
    dry = run_cli("submit", "--dry-run", str(matrix), env=env)
    assert dry.exit_code == 0 and "raced: 3 candidates" in dry.stdout, dry.output
    down = run_cli("submit", str(matrix), env=env)
    assert down.exit_code != 0 and "Traceback" not in down.output
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr
    assert not [path for path in isolated_data_dir.rglob("*") if path.is_file()]


@pytest.mark.parametrize("tune", [
    "{space: {tools: [a, b]}}",                                  # runs programs
    "{space: {log-file: [/tmp/a, /tmp/b]}}",                     # writes files
    "{space: {spec-draft-model: [../../x.gguf, /etc/passwd]}}",  # files outside the models dir
    "{space: {spec-type: ['ngram-simple;touch /tmp/pwned', ngram-mod]}}",
    "{space: {spec-type: [\"ngram\\e]0;owned\\a\", ngram-mod]}}",  # a terminal's title
    "{space: {}}",
    "{space: {spec-draft-n-max: [1, 2]}, epsilon: 0}",
    "{space: {spec-draft-n-max: [1, 2]}, epsilon: .nan}",
    "{space: {spec-draft-n-max: [1, 2]}, budget-pairs: 100000000000000000000}",
    "{space: {spec-draft-n-max: [1, 2]}, unknown-key: 1}",
])
def test_a_crafted_tune_section_of_a_matrix_is_refused_before_anything_is_written(
        tmp_path: Path, isolated_data_dir: Path, tune: str) -> None:
    """A matrix's `tune:` section is the same space by the file's route: refused before
    anything is written (the store included) or started."""
    matrix = tmp_path / "tune.yaml"
    matrix.write_text(f"campaign: raced\nmodels: [{{name: m, file: m.gguf}}]\nprompts: [hi]\n"
                      f"tune: {tune}\n")
    for args in (("run", "--dry-run", str(matrix)), ("run", str(matrix))):
        result = run_cli(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines()[-1].startswith(f"error: {matrix}"), result.stderr
        assert "Traceback" not in result.output and "\x1b" not in result.stderr
        assert not [path for path in isolated_data_dir.rglob("*") if path.is_file()]
        assert not Path("/tmp/pwned").exists()
