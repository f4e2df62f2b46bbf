"""`farm bisect` before anything is built: bad input refused with one message and exit 2,
and the dry run's plan (the commits, each step's error rate, the expected cost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import git, matrix_dict, run_cli, write_matrix


@pytest.fixture()
def repository(tmp_path: Path) -> tuple[Path, list[str]]:
    """Six commits on master (c0 .. c5) and one on a side branch from c2."""
    source = tmp_path / "llama.cpp"
    source.mkdir()
    git(source, "init", "-q", "-b", "master")
    commits = []
    for number in range(6):
        (source / "a.txt").write_text(str(number))
        git(source, "add", "-A")
        git(source, "commit", "-qm", f"c{number}: change {number}")
        commits.append(git(source, "rev-parse", "HEAD"))
        if number == 2:
            git(source, "branch", "side")
    git(source, "checkout", "-q", "side")
    (source / "b.txt").write_text("side")
    git(source, "add", "-A")
    git(source, "commit", "-qm", "side work")
    git(source, "checkout", "-q", "master")
    return source, commits


def _matrix(tmp_path: Path, source: Path, **overrides: object) -> Path:
    return write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign="nightly", build={
        "name": "master", "git": str(source), "ref": "master"}, **overrides))


def _refused(*args: str) -> str:
    result = run_cli("bisect", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    return line


def test_a_bad_ref_is_refused_naming_it(repository: tuple[Path, list[str]],
                                        tmp_path: Path) -> None:
    source, _ = repository
    matrix = str(_matrix(tmp_path, source))
    assert "--bad 'nosuch'" in _refused(matrix, "--good", "master~3", "--bad", "nosuch")
    assert "--good 'v9'" in _refused(matrix, "--good", "v9", "--bad", "master")


def test_a_good_that_is_not_an_ancestor_of_bad_is_refused(
        repository: tuple[Path, list[str]], tmp_path: Path) -> None:
    source, commits = repository
    matrix = str(_matrix(tmp_path, source))
    line = _refused(matrix, "--good", "side", "--bad", "master")
    assert "is not an ancestor of --bad" in line and commits[5][:12] in line
    assert "not an ancestor" in _refused(matrix, "--good", "master", "--bad", "master~2")
    assert "the same commit" in _refused(matrix, "--good", "master", "--bad", commits[5])


def test_a_matrix_of_several_jobs_needs_job(repository: tuple[Path, list[str]],
                                            tmp_path: Path) -> None:
    source, _ = repository
    matrix = str(_matrix(tmp_path, source, variants=[
        {"name": "ngram", "flags": {"spec-type": "ngram-simple"}},
        {"name": "ngram-mod", "flags": {"spec-type": "ngram-mod"}}]))
    line = _refused(matrix, "--good", "master~2", "--bad", "master")
    assert "the matrix has 2 jobs" in line and "ngram-mod" in line and "--job" in line
    assert "names no job" in _refused(matrix, "--good", "master~2", "--bad", "master",
                                      "--job", "mtp")
    planned = run_cli("bisect", matrix, "--good", "master~2", "--bad", "master", "--job",
                      "ngram-mod", "--dry-run")
    assert planned.exit_code == 0, planned.output


def test_a_matrix_without_a_source_build_and_an_unknown_series_are_refused(
        repository: tuple[Path, list[str]], tmp_path: Path) -> None:
    source, _ = repository
    named = str(write_matrix(tmp_path, matrix_dict(Path("m.gguf")), "named.yaml"))
    assert "a source build" in _refused(named, "--good", "a", "--bad", "b")
    matrix = str(_matrix(tmp_path, source))
    assert "--series 'tok'" in _refused(matrix, "--good", "master~2", "--bad", "master",
                                        "--series", "tok")


def test_the_dry_run_lists_the_commits_their_error_rates_and_the_cost(
        repository: tuple[Path, list[str]], tmp_path: Path) -> None:
    source, commits = repository
    matrix = str(_matrix(tmp_path, source))
    result = run_cli("bisect", matrix, "--good", commits[0], "--bad", "master", "--series",
                     "variant", "--series", "draft", "--dry-run")
    assert result.exit_code == 0, result.output
    print(result.output)
    for number, commit in enumerate(commits[1:], start=1):
        assert f"{commit[:12]} c{number}: change {number}" in result.output
    assert "5 commits" in result.output and "3 decisions 0.0100 each" in result.output
    plan = json.loads(run_cli("bisect", matrix, "--good", commits[0], "--bad", "master",
                              "--series", "variant", "--series", "draft", "--dry-run",
                              "--format", "json").output)
    # Per step one job across builds (variant tok/s) and the commit's own (draft): 2 a
    # step, 4 steps, and good's own job: 9 jobs in one round, 27 in three.
    assert (plan["builds"], plan["jobs"], plan["share"]) == (5, [9, 27], 0.01)
