"""`farm ab`'s input, checked before any server starts: the model, the variant's flags and
where they go, each a one-line error with the fix (the run itself: tests/e2e/test_ab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.matrix.starter import flag_map
from tests.helpers import run_cli


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A file named like a GGUF (the loader's checks stop before it is opened)."""
    path = tmp_path / "My Model Q4.gguf"
    path.write_bytes(b"GGUF")
    return path


def test_a_model_that_is_nowhere_is_named_with_the_models_dir(tmp_path: Path) -> None:
    result = run_cli("ab", "nothere.gguf", "--", "--spec-type", "ngram-simple",
                     env={"FARM_MODELS_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert result.stderr == (f"error: nothere.gguf: no such GGUF file, here or in the models "
                             f"dir {tmp_path} (FARM_MODELS_DIR); give its path\n")


def test_no_variant_flags_says_where_they_go(model: Path) -> None:
    result = run_cli("ab", str(model))
    assert result.exit_code == 2
    assert result.stderr == ("error: farm ab: give the variant's flags after `--`, e.g. `farm "
                             "ab MODEL -- --spec-type draft-mtp --spec-draft-n-max 3`\n")


def test_variant_flags_before_the_double_dash_get_the_hint(model: Path) -> None:
    result = run_cli("ab", str(model), "--spec-type", "draft-mtp")
    assert result.exit_code == 2
    assert result.stderr.endswith("error: No such option '--spec-type'. The variant's flags go "
                                  "after `--`: farm ab MODEL -- --spec-type ...\n")


def test_a_bad_flag_is_refused_by_the_matrix_checks_naming_the_matrix_written(
        model: Path, isolated_data_dir: Path) -> None:
    result = run_cli("ab", str(model), "-c", "2048", "--pairs", "2", "--",
                     "--spec-typ", "draft-mtp")
    assert result.exit_code == 2
    [written] = (isolated_data_dir / "ab").glob("ab-My-Model-Q4-*.yaml")
    assert result.stderr.startswith(f"error: {written}: variants[0].flags.spec-typ: --spec-typ "
                                    "is not on the farm's list of benchmark options (did you "
                                    "mean --spec-type?)")
    text = written.read_text()
    assert text.startswith(f"# Written by `farm ab`; `farm run {written}` runs it again.\n")
    assert f"path: {model}" in text and "ctx-size: 2048" in text and "max-pairs: 2" in text


def test_flags_as_typed_become_a_matrix_flags_mapping() -> None:
    typed = ("--spec-type draft-mtp --spec-draft-n-max 3 -fa on --spec-p-min 0.75 "
             "--chat-template-kwargs '{\"a\": 1}' --no-warmup")
    assert flag_map(typed, "x") == {
        "spec-type": "draft-mtp", "spec-draft-n-max": 3, "fa": "on", "spec-p-min": 0.75,
        "chat-template-kwargs": '{"a": 1}', "no-warmup": True}
    assert flag_map("  ", "x") == {}
