"""`farm track` before anything runs: the ref applied to the matrix's source builds, bad
input refused, and a commit already stored left alone (no server is started here)."""

from __future__ import annotations

from pathlib import Path

import yaml

from farm.matrix.crossbuild import cross_build_specs
from farm.matrix.load import load_matrix
from farm.matrix.spec import ArmRole
from farm.settings import load_settings
from farm.store import repo
from farm.store.db import make_engine, upgrade
from tests.helpers import git, matrix_dict, new_repository, run_cli, write_matrix


def _repository(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository with two commits: master at the second, tag `first` at the first."""
    source = tmp_path / "llama.cpp"
    first = new_repository(source, {"a.txt": "a"}, "first")
    git(source, "tag", "first")
    (source / "a.txt").write_text("b")
    git(source, "commit", "-qam", "second")
    return source, first, git(source, "rev-parse", "HEAD")


def _source_matrix(tmp_path: Path, source: Path) -> Path:
    return write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign="nightly", build={
        "name": "master", "git": str(source), "ref": "first"}))


def test_track_takes_every_source_build_at_the_ref_given(tmp_path: Path) -> None:
    source, first, second = _repository(tmp_path)
    matrix = _source_matrix(tmp_path, source)
    [as_written] = load_matrix(matrix)[1]
    [tracked] = load_matrix(matrix, ref="master")[1]
    assert as_written.build.source is not None and as_written.build.source.commit == first
    assert tracked.build.source is not None and tracked.build.source.commit == second
    assert tracked.build.source.ref == "master"
    assert tracked.job_key != as_written.job_key
    assert tracked.comparable_key == as_written.comparable_key


def test_track_of_a_commit_already_stored_does_nothing_and_says_so(tmp_path: Path) -> None:
    source, _, second = _repository(tmp_path)
    matrix = _source_matrix(tmp_path, source)
    specs = load_matrix(matrix, ref="master")[1]
    engine = make_engine(load_settings().database_url)
    upgrade(engine)
    repo.register(engine, "nightly", str(matrix), specs)
    engine.dispose()
    result = run_cli("track", str(matrix), "--ref", "master")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (f"master is at {second[:12]}: already tracked "
                                     "(campaign nightly: 1 queued); nothing to do")


def test_track_refuses_a_matrix_without_a_source_build_and_a_bad_ref(tmp_path: Path) -> None:
    named = write_matrix(tmp_path, matrix_dict(Path("m.gguf")), "named.yaml")
    result = run_cli("track", str(named), "--ref", "master")
    assert result.exit_code == 2
    assert "`farm track` follows a source build and this matrix names none" in result.output
    source, _, _ = _repository(tmp_path)
    matrix = _source_matrix(tmp_path, source)
    for ref, said in (("-x", "give a branch, tag, pull/N/head or commit"),
                      ("nowhere", "has no ref 'nowhere'")):
        result = run_cli("track", str(matrix), "--ref", ref)
        assert result.exit_code == 2 and said in result.output, result.output
    assert yaml.safe_load(matrix.read_text())["build"]["ref"] == "first"  # the file untouched


def test_paired_jobs_run_each_arm_on_the_older_and_the_newer_commit(tmp_path: Path) -> None:
    source, first, second = _repository(tmp_path)
    [job] = load_matrix(_source_matrix(tmp_path, source), ref="master")[1]
    crossed = cross_build_specs([job], first)
    assert [cross.kind for cross in crossed] == ["builds", "builds"]
    roles: tuple[ArmRole, ...] = ("baseline", "variant")
    for cross, role in zip(crossed, roles, strict=True):
        arm = job.arm(role)
        assert cross.baseline.argv == cross.variant.argv == arm.argv
        assert cross.baseline.build.source is not None and cross.variant.build.source is not None
        assert (cross.baseline.build.source.commit, cross.variant.build.source.commit) == (
            first, second)
        # How a history finds the job that crossed this arm, whatever the two commits.
        assert cross.comparable_key == job.cross_key(role) != job.comparable_key
    assert crossed[0].job_key != crossed[1].job_key
    # An arm already at the older commit has nothing to cross; a job pairs once per arm.
    assert cross_build_specs([job], second) == []
    assert len(cross_build_specs([job, job], first)) == 2
    assert job.kind == "variant" and not job.cross_build
