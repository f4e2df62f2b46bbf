"""`farm bisect --clone PATH` lists commits with git in a local directory: a path that
reads as a git option, or a directory that is not a repository, is refused with one line
(exit 2) before git runs anything it names or anything is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import matrix_dict, new_repository, run_cli, write_matrix


@pytest.mark.parametrize("clone", ["--upload-pack=touch pwned", "-c", "not-a-repository"])
def test_a_crafted_clone_is_refused_and_runs_nothing(
        tmp_path: Path, clone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "llama.cpp"
    new_repository(source, {"a.txt": "a"}, "c0")
    matrix = write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign="nightly", build={
        "name": "master", "git": f"file://{source}", "ref": "master"}))
    monkeypatch.chdir(tmp_path)
    (tmp_path / clone).mkdir()
    result = run_cli("bisect", str(matrix), "--good", "master", "--bad", "master",
                     f"--clone={clone}", "--dry-run")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert line == f"error: --clone: {clone} is not a git repository; give a clone of the " \
                   "matrix's source"
    assert not (tmp_path / "pwned").exists()
