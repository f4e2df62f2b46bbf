"""`farm paths`: where the farm keeps things, then the models it sees (the models dir's
files, the Hub and URL models downloaded), each with its size, or how to get one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    return tmp_path / "models"


def _models_part(stdout: str) -> list[str]:
    """What `farm paths` prints after the places: the lines past the first blank one."""
    return stdout.split("\n\n", 1)[1].splitlines()


def test_no_model_says_none_and_how_to_get_one(models_dir: Path) -> None:
    result = run_cli("paths", env={"FARM_MODELS_DIR": str(models_dir)})
    assert result.exit_code == 0, result.output
    assert _models_part(result.stdout) == [
        f"models: none in {models_dir} yet; `farm provision` fetches the tutorial's there, "
        "`farm ab PATH` takes any GGUF file, and a matrix's model may be a Hub repository's "
        "file (`hf:` and `file:`, docs/models.md) that `farm run` downloads"]


def test_each_model_file_is_listed_with_its_size_downloads_apart(models_dir: Path) -> None:
    (models_dir / "sub").mkdir(parents=True)
    (models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"G" * 1_500_000)
    with (models_dir / "sub" / "big.gguf").open("wb") as handle:
        handle.truncate(2_340_000_000)  # sparse: the size without the bytes
    (models_dir / "notes.txt").write_text("not a model")
    commit = "0123456789abcdef" * 2 + "01234567"
    hub = models_dir / "hub" / "owner--repo" / commit
    hub.mkdir(parents=True)
    (hub / "model-Q4_K_M.gguf").write_bytes(b"G" * 250_000)
    (models_dir / "hub" / "owner--repo" / "pins").mkdir()
    (models_dir / "hub" / "owner--repo" / "pins" / "main.json").write_text("{}")

    result = run_cli("paths", env={"FARM_MODELS_DIR": str(models_dir)})
    assert result.exit_code == 0, result.output
    assert _models_part(result.stdout) == [
        f"models in {models_dir} (a matrix's `file:`, `farm ab NAME`):",
        "  SmolLM2-135M-Instruct.Q4_1.gguf    1.5 MB",
        "  sub/big.gguf                      2.34 GB",
        f"downloaded into {models_dir} (a matrix's `hf:` or `url:`):",
        "  hf owner/repo model-Q4_K_M.gguf (commit 0123456789ab)    0.2 MB"]
