"""`farm bisect` before anything is built: bad input refused with one message and exit 2,
and the dry run's plan (the commits, each step's error rate, the expected cost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.report.bisect import bisect_markdown, bisect_text
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


def test_a_url_source_lists_its_commits_in_the_clone_given_and_submit_needs_a_fleet(
        repository: tuple[Path, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    source, commits = repository
    url = write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign="nightly", build={
        "name": "master", "git": f"file://{source}", "ref": "master"}))
    line = _refused(str(url), "--good", commits[0], "--bad", "master", "--dry-run")
    assert "give the path of a local clone of it (as --clone" in line
    planned = run_cli("bisect", str(url), "--good", commits[0], "--bad", "master",
                      "--clone", str(source), "--dry-run", "--format", "json")
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.output)["commits"] == 5
    args = (str(url), "--good", commits[0], "--bad", "master", "--clone", str(source),
            "--submit")
    assert "the fleet needs one shared PostgreSQL" in _refused(*args)
    monkeypatch.setenv("FARM_DATABASE_URL", "postgresql://nobody@127.0.0.1:9/none")
    assert "FARM_BROKER_URL is not set" in _refused(*args)
    monkeypatch.setenv("FARM_BROKER_URL", "redis://127.0.0.1:9/0")
    assert "--as-class gpu: with --submit" in _refused(*args, "--as-class", "gpu")


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
    # One job across builds of the variant arm serves both series (its tok/s, its draft
    # timer block against block): 3 decisions and the ends' two jobs, 5 in one round; 3
    # looks a decision and the ends' 4 jobs, 13 at most. The speedup adds the baseline's.
    assert (plan["builds"], plan["jobs"], plan["share"]) == (5, [5, 13], 0.01)
    both = json.loads(run_cli("bisect", matrix, "--good", commits[0], "--bad", "master",
                              "--dry-run", "--format", "json").output)
    assert both["jobs"] == [10, 26]


def test_the_text_answer_names_the_first_bad_commit_each_step_and_the_cost() -> None:
    step = {"commit": "c" * 40, "subject": "c3: slower", "verdict": "like bad",
            "level": 0.01, "p_value": 0.0004, "rounds": 2, "value": 2.3, "low": 1.8,
            "high": 3.0, "change": 2.2, "change_low": 1.7, "change_high": 2.9, "pairs": 8,
            "build_seconds": 7.4, "skipped": None}
    skipped = {**step, "commit": "b" * 40, "verdict": "skipped", "level": 0.0,
               "p_value": None, "rounds": 0, "value": None, "change": None, "pairs": 0}
    answer = {"good": "a" * 40, "bad": "d" * 40, "commits": 5, "job": "e" * 64,
              "job_label": "oracle · mtp", "alpha": 0.05,
              "series": [{"label": "draft ms/token", "answer": "found", "design": "jobs",
                          "spent": 0.03, "first_bad": {"commit": "c" * 40,
                                                       "subject": "c3: slower"},
                          "range": ["c" * 40], "steps": [skipped, step]}],
              "cost": {"builds": 4, "build_seconds": 62.0, "jobs": 5, "pairs": 20,
                       "minutes": 2.0, "skipped": {"b" * 40: "the build failed"}}}
    text = bisect_text(answer)
    rows = [" ".join(line.split()) for line in text.splitlines()]
    assert "draft ms/token: first bad commit cccccccccccc 'c3: slower'" in rows
    assert ("cccccccccccc c3: slower 2.3 [1.8, 3] +120% [+70%, +190%] like bad 0.0100 0.0004 "
            "2 8 7") in rows
    assert "bbbbbbbbbbbb c3: slower - - skipped - - 0 0 7" in rows
    assert text.endswith("cost: 4 builds (62 s this call), 5 jobs, 20 pairs, 2.0 minutes "
                         "measuring\nskipped bbbbbbbbbbbb: the build failed")
    assert "| cccccccccccc | c3: slower | 2.3 [1.8, 3] |" in bisect_markdown(answer)
