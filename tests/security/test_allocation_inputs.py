"""What bounds a worker's life and what `farm slurm launch` submits are new inputs: crafted
values of `farm worker --exit-when-idle/--max-jobs/--deadline`, of what squeue prints, and of
`farm slurm launch`'s class and sbatch options are refused in one line, exit 2, before any
service or sbatch is reached; nothing goes through a shell."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result

from farm.errors import ConfigError
from tests.helpers import run_cli
from workers.fleet.allocation import slurm_end

NOT_SECONDS = ["0", "-5", "nan", "inf", "-inf", "1e400", "", "five", "$(id)", "5;reboot",
               "\x00", "9" * 5000]
NOT_JOBS = ["0", "-1", "1.5", "nan", "1e3", "", "$(id)", "x" * 5000]
NOT_TIMES = ["yesterday", "2026-13-01T00:00:00", "-60", "0", "nan", "1e400", "$(date)",
             "2000-01-01T00:00:00Z", "9" * 5000, "2026-12-07T18:00:00+99:00"]


def _one_line(result: Result, option: str) -> None:
    assert result.exit_code == 2, result.output
    stderr = result.stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith(f"error: {option} "), stderr
    assert "Traceback" not in stderr and len(stderr) < 400


@pytest.mark.parametrize("value", NOT_SECONDS)
def test_a_crafted_idle_window_is_refused_in_one_line(value: str) -> None:
    _one_line(run_cli("worker", "--gpu-class", "x", "--exit-when-idle", value),
              "--exit-when-idle")


@pytest.mark.parametrize("value", NOT_JOBS)
def test_a_crafted_job_count_is_refused_in_one_line(value: str) -> None:
    _one_line(run_cli("worker", "--gpu-class", "x", "--max-jobs", value), "--max-jobs")


@pytest.mark.parametrize("value", NOT_TIMES)
def test_a_crafted_deadline_is_refused_in_one_line(value: str) -> None:
    _one_line(run_cli("worker", "--gpu-class", "x", "--deadline", value), "--deadline")


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> Path:
    """A ``name`` command first on PATH that runs ``body`` (sh) and leaves a mark."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\ntouch {tmp_path}/{name}-ran\n{body}\n")
    (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    return tmp_path / f"{name}-ran"


@pytest.mark.parametrize("shown", ["garbage", "2026-12-07T25:00:00", "\x1b[2J", "x" * 100_000,
                                   "2026-12-07T18:00:00\n2026-12-07T19:00:00"])
def test_what_squeue_prints_is_read_as_a_time_or_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shown: str) -> None:
    (tmp_path / "shown").write_text(shown)
    _fake(tmp_path, monkeypatch, "squeue", f"cat {tmp_path}/shown")
    with pytest.raises(ConfigError) as refused:
        slurm_end("42", None)
    assert len(str(refused.value)) < 200 and "\n" not in str(refused.value)
    assert "\x1b" not in str(refused.value)


def test_a_job_without_a_time_limit_has_no_deadline_and_a_crafted_job_id_runs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _fake(tmp_path, monkeypatch, "squeue", "echo UNLIMITED")
    assert slurm_end("42", None) is None and ran.exists()
    ran.unlink()
    with pytest.raises(ConfigError, match="is not a job id"):
        slurm_end("42; reboot", None)
    assert not ran.exists()


@pytest.mark.parametrize("gpu_class", ["h100; rm -rf /", "../x", "$(id)", "-rf", "H100", ""])
def test_a_crafted_class_never_reaches_sbatch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu_class: str) -> None:
    ran = _fake(tmp_path, monkeypatch, "sbatch", "echo 1")
    script = tmp_path / "worker.sbatch"
    script.write_text("#!/bin/sh\n")
    result = run_cli("slurm", "launch", "--script", str(script), "--", gpu_class)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
    assert not ran.exists()


@pytest.mark.parametrize("option", ["reboot", "x y", "$(id)"])
def test_an_sbatch_option_that_is_not_an_option_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    ran = _fake(tmp_path, monkeypatch, "sbatch", "echo 1")
    script = tmp_path / "worker.sbatch"
    script.write_text("#!/bin/sh\n")
    result = run_cli("slurm", "launch", "h100", "--script", str(script), "--", option)
    assert result.exit_code == 2 and "sbatch option" in result.stderr, result.output
    assert not ran.exists()
