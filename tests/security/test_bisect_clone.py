"""`farm bisect --clone PATH` lists commits with git in a local directory: a path that
reads as a git option, or a directory that is not a repository, is refused with one line
(exit 2) before git runs anything it names or anything is built; a repository's own config
makes git run none of the programs it names."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from farm.matrix.sources import GIT_ENV, git_command
from farm.settings import load_settings
from tests.helpers import git, matrix_dict, new_repository, run_cli, write_matrix
from workers.paths import NodePaths
from workers.setup.builds import BuildRequest, resolve_source


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


def _hostile_clone(tmp_path: Path) -> tuple[Path, str, str, Path]:
    """A clone whose own config names a program for each way git could run one in it: a
    signature's verifier (and ``log.showSignature`` on, over a commit that carries a
    ``gpgsig`` header), an fsmonitor, and a hooks folder holding every hook. Its good and
    bad commits, and the folder where each program that runs leaves its name."""
    clone, ran = tmp_path / "clone", tmp_path / "ran"
    ran.mkdir()
    good = new_repository(clone, {"a.txt": "a"}, "c0")
    tree = git(clone, "rev-parse", "HEAD^{tree}")
    signed = (f"tree {tree}\nparent {good}\nauthor t <t@t> 1700000000 +0000\n"
              "committer t <t@t> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n"
              " \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n\nsigned\x1b]0;x\x07\x1b[2J\n")
    (tmp_path / "commit.txt").write_text(signed)
    bad = git(clone, "hash-object", "-t", "commit", "-w", str(tmp_path / "commit.txt"))
    git(clone, "update-ref", "refs/heads/master", bad)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    programs = {"gpg": tmp_path / "gpg", "fsmonitor": tmp_path / "fsmonitor"}
    programs |= {name: hooks / name for name in (
        "pre-commit", "post-commit", "post-checkout", "reference-transaction", "post-merge",
        "post-rewrite", "pre-auto-gc", "post-index-change", "fsmonitor-watchman")}
    for name, program in programs.items():
        program.write_text(f"#!/bin/sh\ntouch {ran / name}\n")
        program.chmod(0o755)
    for key, value in (("log.showSignature", "true"), ("gpg.program", programs["gpg"]),
                       ("core.fsmonitor", programs["fsmonitor"]), ("core.hooksPath", hooks)):
        git(clone, "config", key, str(value))
    return clone, good, bad, ran


def test_a_clones_own_config_runs_no_program_of_it(tmp_path: Path) -> None:
    """`farm bisect --clone DIR` lists the commits in DIR without honouring DIR's config:
    with `log.showSignature` and `gpg.program` set there, and a signed commit, the program
    does not run (it did before git ran config-free)."""
    clone, good, bad, ran = _hostile_clone(tmp_path)
    # The git a user runs in it does run them: the clone is as hostile as it means to be.
    subprocess.run(["git", "-C", str(clone), "log", "-1", "--format=%s"], check=True,
                   capture_output=True)
    assert (ran / "gpg").exists()
    (ran / "gpg").unlink()
    matrix = write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign="nightly", build={
        "name": "master", "git": f"file://{clone}", "ref": "master"}))
    result = run_cli("bisect", str(matrix), "--good", good, "--bad", bad,
                     f"--clone={clone}", "--dry-run")
    assert result.exit_code == 0, result.output
    # Its subject's terminal escapes (a window title, clear screen) are not printed.
    assert f"{bad[:12]} signed]0;x[2J" in result.stdout
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", result.output), result.output
    assert sorted(path.name for path in ran.iterdir()) == []


def test_the_farms_git_runs_no_program_a_repositorys_config_names(tmp_path: Path) -> None:
    """The one git command line and environment the farm uses (``git_command``,
    ``GIT_ENV``) on the same clone: a status (the fsmonitor's trigger), a commit and a
    checkout (hooks) and a log of the signed commit run none of its programs."""
    clone, good, _, ran = _hostile_clone(tmp_path)
    (clone / "a.txt").write_text("changed")
    for args in (["status", "--porcelain"], ["log", "-1", "--format=%s"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "c2"],
                 ["checkout", "-q", good]):
        subprocess.run(git_command("-C", str(clone), *args), env=GIT_ENV, check=True,
                       capture_output=True)
    assert sorted(path.name for path in ran.iterdir()) == []


def test_a_local_build_source_runs_no_program_its_config_names(tmp_path: Path) -> None:
    """`farm build --source DIR` reads DIR's commit and whether it is dirty with the same
    config-free git: DIR's fsmonitor (run by a status) and hooks do not run."""
    clone, _, bad, ran = _hostile_clone(tmp_path)
    (clone / "CMakeLists.txt").write_text("project(x)\n")
    git(clone, "add", "CMakeLists.txt")
    for program in ran.iterdir():
        program.unlink()
    request = BuildRequest(name="local", source=str(clone))
    tree = resolve_source(request, NodePaths.of(load_settings()))
    assert tree.identity.startswith(f"git:{bad}+dirty:")
    assert sorted(path.name for path in ran.iterdir()) == []
