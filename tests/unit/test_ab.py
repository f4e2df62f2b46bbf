"""`farm ab`'s input, checked before any server starts: the model, the variant's flags and
where they go, each a one-line error with the fix (the run itself: tests/e2e/test_ab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.matrix.starter import flag_map, model_entry
from tests.helpers import run_cli
from workers.setup.provision import Provisioned


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


def _left_in(data_dir: Path) -> list[Path]:
    """The files a `farm ab` left in the data dir's matrices folder."""
    return sorted(path for path in (data_dir / "ab").rglob("*") if path.is_file())


def test_an_unknown_option_after_the_double_dash_is_named_as_typed_and_leaves_no_file(
        model: Path, isolated_data_dir: Path) -> None:
    result = run_cli("ab", str(model), "-c", "2048", "--pairs", "2", "--", "--foo-bar", "3")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: farm ab: --foo-bar is not on the farm's list of benchmark options; if it is "
        "a fork's and harmless, an operator who needs it can allow it on a node "
        "(`allow-options: [foo-bar]` in the worker's config, `farm run --allow-option "
        "foo-bar` on one machine)\n")
    assert _left_in(isolated_data_dir) == []


@pytest.mark.parametrize(("typed", "said"), [
    (("--spec-typ", "draft-mtp"), "farm ab: --spec-typ is not on the farm's list of benchmark "
                                  "options (did you mean --spec-type?)"),
    (("-zz", "3"), "farm ab: -zz: --zz is not on the farm's list of benchmark options"),
    (("--spec-type", "a;b"), "farm ab: --spec-type: value 'a;b' contains ';'"),
    (("-c", "6", "--ctx-size", "7"), "farm ab: -c and --ctx-size set one option (--ctx-size); "
                                     "give it once"),
    (("-c", "2048"), "farm ab: the variant's flags (after `--`) set what the baseline sets "
                     "already"),
])
def test_a_variant_flag_the_matrix_checks_refuse_is_named_as_typed(
        model: Path, isolated_data_dir: Path, typed: tuple[str, ...], said: str) -> None:
    result = run_cli("ab", str(model), "-c", "2048", "--", *typed)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {said}"), result.stderr
    assert ".yaml" not in result.stderr
    assert _left_in(isolated_data_dir) == []


def test_a_baseline_option_given_twice_is_refused(model: Path) -> None:
    result = run_cli("ab", str(model), "-c", "2048", "--args", "-c 4096 -fa on", "--",
                     "--spec-type", "ngram-simple")
    assert result.exit_code == 2
    assert result.stderr == ("error: farm ab: --ctx-size is given as an option and in --args; "
                             "give it once\n")


def test_a_check_failing_on_this_machine_names_no_file_and_leaves_none(
        model: Path, tmp_path: Path, isolated_data_dir: Path) -> None:
    result = run_cli("ab", str(model), "--build", "mine", "--", "--spec-type", "ngram-simple",
                     env={"FARM_CACHE_DIR": str(tmp_path / "empty-cache")})
    assert result.exit_code == 2
    assert result.stderr.startswith("error: farm ab: build 'mine' is not on this machine "
                                    "(it has: none); run `farm provision`"), result.stderr
    assert ".yaml" not in result.stderr and ".checking" not in result.stderr
    assert _left_in(isolated_data_dir) == []


def test_a_check_failing_on_the_build_names_the_variant_flags_not_the_matrix(
        provisioned: Provisioned, model: Path, isolated_data_dir: Path) -> None:
    result = run_cli("ab", str(model), "--", "--spec-type", "nonsense")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: farm ab: the variant's flags (after `--`): variant "
                                    "arm 'nonsense': --spec-type nonsense: build 'cpu' does "
                                    "not accept 'nonsense'; it accepts: none, "), result.stderr
    assert ".yaml" not in result.stderr
    assert _left_in(isolated_data_dir) == []


@pytest.mark.parametrize("given", ["SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf"])
def test_a_dotted_model_name_finds_its_gguf_in_the_models_dir(tmp_path: Path, given: str) -> None:
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    assert model_entry(given, tmp_path) == {"name": "SmolLM2-135M-Instruct.Q4_1",
                                            "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    result = run_cli("ab", given, "--", "--spec-type", "ngram-simple",
                     env={"FARM_MODELS_DIR": str(tmp_path),
                          "FARM_CACHE_DIR": str(tmp_path / "empty-cache")})
    # Past the model: the next check, the build, is the one that fails here.
    assert result.stderr.startswith("error: farm ab: build 'cpu' is not on this machine"), \
        result.stderr


def test_a_model_name_with_a_typo_gets_the_near_files_of_the_models_dir(tmp_path: Path) -> None:
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    result = run_cli("ab", "SmolLM2-135M-Instruct.Q4_0", "--", "--spec-type", "ngram-simple",
                     env={"FARM_MODELS_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: SmolLM2-135M-Instruct.Q4_0: no such GGUF file, here or in the models dir "
        f"{tmp_path} (FARM_MODELS_DIR); did you mean 'SmolLM2-135M-Instruct.Q4_1.gguf'? "
        "(`farm paths` lists the models)\n")


def test_flags_as_typed_become_a_matrix_flags_mapping() -> None:
    typed = ("--spec-type draft-mtp --spec-draft-n-max 3 -fa on --spec-draft-p-min 0.75 "
             "--chat-template-kwargs '{\"a\": 1}' --no-warmup")
    assert flag_map(typed, "x") == {
        "spec-type": "draft-mtp", "spec-draft-n-max": 3, "fa": "on", "spec-draft-p-min": 0.75,
        "chat-template-kwargs": '{"a": 1}', "no-warmup": True}
    assert flag_map("  ", "x") == {}
