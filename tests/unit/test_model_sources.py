"""Models by Hub reference or URL in a matrix: what is accepted, what is refused, job keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from farm.matrix.load import load_matrix
from farm.matrix.schema import split_shards
from farm.matrix.spec import JobSpec, RemoteFile
from tests.helpers import matrix_dict, run_cli, write_matrix
from workers.setup.hub import with_models

HF = {"name": "qwen", "hf": "froggeric/Qwen3.6-27B-MTP-GGUF",
      "file": "Qwen3.6-27B-Q4_K_M-mtp.gguf"}
COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


def _jobs(tmp_path: Path, model: dict[str, Any]) -> list[JobSpec]:
    matrix = matrix_dict(tmp_path / "unused.gguf", models=[model])
    return load_matrix(write_matrix(tmp_path, matrix))[1]


def _pinned(spec: JobSpec, commit: str) -> JobSpec:
    return with_models(spec, spec.model.model_copy(update={
        "revision": commit, "files": (RemoteFile(name=spec.model.file or "", sha256="c" * 64),)}),
        ())


@pytest.mark.parametrize(("model", "message"), [
    ({"name": "m", "hf": "org/repo"},
     "models[0]: Value error, `hf` needs `file`: the GGUF file of the repository to download"),
    ({**HF, "token": "hf_x"}, "models[0].token: unknown key; allowed here: file, hf, name, "
                              "path, revision, sha256, url"),
    ({**HF, "path": "x.gguf"}, "models[0]: Value error, give one of `path`, `hf` and `url`, "
                               "not path and hf"),
    ({**HF, "file": "m-00002-of-00003.gguf"}, "is shard 2 of a split GGUF: name its first "
                                              "shard, 'm-00001-of-00003.gguf'"),
    ({"name": "m", "url": "https://example.org/m.gguf"}, "a `url` model needs its `sha256`"),
    ({"name": "m", "file": "m.gguf", "revision": "main"}, "`revision` is the revision of an "
                                                          "`hf` repository"),
    ({**HF, "hf": "not a repo"}, "models[0].hf: String should match pattern"),
])
def test_a_bad_model_source_is_one_message_naming_the_key_exit_2(
        tmp_path: Path, model: dict[str, Any], message: str) -> None:
    path = write_matrix(tmp_path, matrix_dict(tmp_path / "m.gguf", models=[model]))
    result = run_cli("run", "--dry-run", str(path))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: models[0]")
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_hub_model_keeps_its_revision_as_written_until_pinned(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, HF)
    assert (job.model.hf, job.model.revision, job.model.pinned) == (HF["hf"], "main", False)
    assert job.model.source == f"{HF['hf']}@main {HF['file']}"


def test_the_pinned_commit_enters_the_job_key_not_the_comparable_key(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, HF)
    first, second = _pinned(job, COMMIT_A), _pinned(job, COMMIT_B)
    assert first.model.pinned and second.model.pinned
    assert len({job.job_key, first.job_key, second.job_key}) == 3
    assert first.comparable_key == second.comparable_key == job.comparable_key
    stored = JobSpec.model_validate(first.model_dump())
    assert stored.job_key == first.job_key and stored.model.revision == COMMIT_A


def test_a_local_model_keeps_its_job_key(tmp_path: Path) -> None:
    (local,) = _jobs(tmp_path, {"name": "qwen", "file": "q.gguf"})
    assert "model_source" not in local.model_dump_json() and local.model.pinned


def test_a_url_model_is_pinned_by_its_sha256(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, {"name": "m", "url": "https://example.org/dir/m.gguf",
                              "sha256": "d" * 64})
    assert job.model.pinned and job.model.file == "m.gguf"
    (other,) = _jobs(tmp_path, {"name": "m", "url": "https://example.org/dir/m.gguf",
                                "sha256": "e" * 64})
    assert job.job_key != other.job_key


def test_a_split_gguf_is_its_shards_in_order() -> None:
    assert split_shards("q-00001-of-00003.gguf") == [
        "q-00001-of-00003.gguf", "q-00002-of-00003.gguf", "q-00003-of-00003.gguf"]
    assert split_shards("q.gguf") == ["q.gguf"]


def test_a_draft_model_from_the_hub_is_named_by_its_entry_and_enters_the_job_key(
        tmp_path: Path) -> None:
    matrix = matrix_dict(tmp_path / "t.gguf", **{
        "draft-models": [{"name": "drafter", "hf": "org/drafts", "file": "d.gguf"}],
        "variants": [{"name": "draft", "flags": {"spec-draft-model": "drafter"}},
                     {"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]})
    draft, ngram = load_matrix(write_matrix(tmp_path, matrix))[1]
    assert [model.name for model in draft.draft_models] == ["drafter"]
    assert ngram.draft_models == () and "draft_models" not in ngram.model_dump()
    pinned = with_models(draft, draft.model, (draft.draft_models[0].model_copy(update={
        "revision": COMMIT_A, "files": (RemoteFile(name="d.gguf", sha256="c" * 64),)}),))
    assert pinned.job_key != draft.job_key and pinned.draft_models[0].pinned


def test_a_local_draft_model_entry_is_refused_naming_the_flag(tmp_path: Path) -> None:
    matrix = matrix_dict(tmp_path / "t.gguf", **{"draft-models": [{"name": "d",
                                                                   "file": "d.gguf"}]})
    result = run_cli("run", "--dry-run", str(write_matrix(tmp_path, matrix)))
    assert result.exit_code == 2 and "`spec-draft-model: FILE`" in result.stderr


def test_the_dry_run_of_a_remote_model_still_needs_its_named_build_here(
        tmp_path: Path) -> None:
    # Its download waits for the run; a named build is never made by one, so a missing one
    # is said now, as it is for a local model (issue 40: the GPU route hid it).
    remote = {"name": "m", "url": "https://example.org/dir/m.gguf", "sha256": "d" * 64}
    for model in (remote, {"name": "m", "path": str(tmp_path / "m.gguf")}):
        (tmp_path / "m.gguf").write_bytes(b"GGUF")
        path = write_matrix(tmp_path, matrix_dict(tmp_path / "m.gguf", models=[model],
                                                  build="master"))
        result = run_cli("run", "--dry-run", str(path))
        assert result.exit_code == 2, result.output
        assert "build 'master' is not on " in result.stderr
        assert "`farm build master ...`" in result.stderr


def test_a_file_too_short_for_a_gguf_is_one_message_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    result = run_cli("run", "--dry-run", str(write_matrix(tmp_path, matrix_dict(
        tmp_path / "m.gguf"))))
    assert result.exit_code == 2, result.output
    assert "m.gguf: not a readable GGUF file" in result.stderr
    assert "Traceback" not in result.output


def test_the_dry_run_says_when_an_arm_tunes_a_drafter_it_never_asks_for(
        tmp_path: Path, smollm2: Path) -> None:
    matrix = matrix_dict(smollm2, variants=[
        {"name": "long", "flags": {"draft-max": 8}},
        {"name": "ngram", "flags": {"spec-type": "ngram-simple", "draft-max": 8}}])
    result = run_cli("run", "--dry-run", str(write_matrix(tmp_path, matrix)))
    assert result.exit_code == 0, result.output
    assert ("arm 'long' sets `draft-max` but asks for no drafter (no `spec-type` or "
            "`spec-draft-model`): it will not draft") in " ".join(result.stdout.split())
    assert "arm 'ngram'" not in result.stdout
