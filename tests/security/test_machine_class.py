"""This machine's GPU class comes from the operator (FARM_GPU_CLASS) or the command line
(--as-class): crafted values are refused with one line naming where they came from, and
nothing runs or is written. A class is a label of the matrix's own alphabet, so it can
never name a path, a queue outside `gpu.*` or a shell word."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_dry_run import _fleet_matrix
from tests.helpers import run_cli, write_matrix

CRAFTED = ["../../etc", "RTX 3090", "a;rm -rf /", "x\ny", "-rf", "", "a" * 101,
           "gpu.*", "\u0430pple"]


@pytest.fixture
def matrix(tmp_path: Path, smollm2: Path) -> Path:
    return write_matrix(tmp_path, {**_fleet_matrix("x"), "gpu-classes": ["rtx3090"],
                                   "models": [{"name": "m", "path": str(smollm2)}]})


@pytest.mark.parametrize("value", CRAFTED)
def test_a_crafted_machine_class_is_refused_naming_its_setting(
        matrix: Path, value: str, isolated_data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_GPU_CLASS", value)
    result = run_cli("run", "--dry-run", str(matrix))
    if value == "":  # an empty setting is unset: this machine is `default`
        assert result.exit_code == 2 and "GPU class default" in result.stderr
    else:
        assert result.exit_code == 2 and "FARM_GPU_CLASS" in result.stderr, result.output
        assert "Traceback" not in result.output
    assert result.stdout == "" and not isolated_data_dir.exists()


@pytest.mark.parametrize("value", CRAFTED)
def test_a_crafted_as_class_is_refused_as_not_the_matrixs(
        matrix: Path, value: str, isolated_data_dir: Path) -> None:
    result = run_cli("run", "--dry-run", "--as-class", value, str(matrix))
    assert result.exit_code == 2, result.output
    assert "gpu-classes" in result.stderr and "Traceback" not in result.output
    assert result.stdout == "" and not isolated_data_dir.exists()
