"""`farm ab`'s command line is a matrix's flags by another route: crafted flags after `--`
and in `--args` (files outside the models dir, options that run code or listen, shell
syntax, control characters, the farm's own options) and crafted model names are refused
with one line, before any file is written or any server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_cli


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A file named like a GGUF (the checks stop before it is opened)."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


def _left(data_dir: Path) -> list[Path]:
    return sorted(path for path in data_dir.rglob("*") if path.is_file()
                  and path.suffix in (".yaml", ".checking"))


@pytest.mark.parametrize("flags", [
    ("--spec-draft-model", "../../../etc/passwd"),     # a file outside the models dir
    ("--spec-draft-model", "/etc/shadow"),
    ("--chat-template-file", "/etc/passwd"),
    ("--model", "/etc/passwd"),                       # the farm's own: never a matrix's
    ("--host", "0.0.0.0"),                            # a listener
    ("--port", "8080"),
    ("--api-key-file", "/root/.ssh/id_ed25519"),
    ("--spec-type", "ngram-simple;touch /tmp/pwned"),  # shell syntax in a value
    ("--spec-type", "$(touch /tmp/pwned)"),
    ("--spec-type", "ngram\x00simple"),               # control characters
    ("--spec-type", "ngram\nsimple"),
    ("--log-file", "/tmp/anything"),
])
def test_a_crafted_variant_flag_is_refused_before_anything_is_written(
        model: Path, isolated_data_dir: Path, flags: tuple[str, ...]) -> None:
    result = run_cli("ab", str(model), "--", *flags)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: farm ab: ") and result.stderr.count("\n") == 1, \
        result.stderr
    assert "Traceback" not in result.output
    assert _left(isolated_data_dir) == []
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize("args", ["--model /etc/passwd", "--spec-draft-model ../x.gguf",
                                  "--host 0.0.0.0", "-fa on; touch /tmp/pwned"])
def test_a_crafted_baseline_args_is_refused_before_anything_is_written(
        model: Path, isolated_data_dir: Path, args: str) -> None:
    result = run_cli("ab", str(model), "--args", args, "--", "--spec-type", "ngram-simple")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and "Traceback" not in result.output
    assert _left(isolated_data_dir) == []
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize("name", ["../../../etc/passwd", "/etc/passwd", "-ngl", "a\nb.gguf",
                                  "m\x00.gguf"])
def test_a_crafted_model_name_is_refused_with_one_line(
        tmp_path: Path, isolated_data_dir: Path, name: str) -> None:
    result = run_cli("ab", name, "--", "--spec-type", "ngram-simple",
                     env={"FARM_MODELS_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.output
    # One line of error (a name read as an option gets click's usage line above it).
    assert result.stderr.splitlines()[-1].startswith("error: ") and "Traceback" not in \
        result.output
    assert _left(isolated_data_dir) == []


def test_a_fixed_number_of_pairs_and_a_stop_rule_together_are_refused_in_one_line(
        model: Path, isolated_data_dir: Path) -> None:
    result = run_cli("ab", str(model), "--pairs", "2", "--stop-rule", "precision", "--",
                     "--spec-type", "ngram-simple")
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: farm ab: --pairs 2 runs a fixed number of pairs and "
                             "--stop-rule precision decides how many: give one of them\n")
    assert _left(isolated_data_dir) == []
