"""Bundles (farm.board): records written and read back, the same bytes for the same records,
signatures, the data dir's machine id, and a store's campaigns shared without its host."""

from __future__ import annotations

import hashlib
import stat
import zipfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from farm.board import verify as verify_module
from farm.board.bundle import (
    DROPPED_RUN_COLUMNS,
    JOBS,
    RUNS,
    JobRecord,
    Manifest,
    RunRecord,
    run_identity,
    write_bundle,
)
from farm.board.keys import fingerprint, load_private, new_key, public_bytes, sign, verify
from farm.board.machine import MACHINE_ID_FILE, machine_id
from farm.board.share import Places, anonymous_argv, collect, dry_run_lines, share_campaigns
from farm.board.verify import read_bundle
from farm.errors import ConfigError
from farm.matrix.load import load_matrix
from farm.settings import load_settings
from farm.store import repo
from farm.store.db import make_engine, upgrade
from farm.store.models import Job, JobState, Run
from farm.summary import SUMMARY_VERSION, JobSummary
from tests.helpers import matrix_dict, write_matrix

MACHINE = "0123456789abcdef" * 2
MADE = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def job_record(campaign: str = "c1", number: int = 0) -> JobRecord:
    """A finished job as a bundle carries it."""
    return JobRecord(
        campaign=campaign, job_key=f"{number:064x}", comparable_key=f"{number + 100:064x}",
        model_name="smollm2", build_name="cpu", variant_name=f"ngram-{number}",
        varying={"draft-max": str(number)}, spec={"campaign": campaign},
        gpu_class="default", state="done", pairs=2, stop_reason="fixed", speculation="ok",
        summary=JobSummary(speedup=1.2).model_dump(mode="json"), started_at=MADE,
        finished_at=MADE)


def run_record(job_key: str, arm: str, block: int, repetition: int = 0,
               machine: str = MACHINE, **values: Any) -> RunRecord:
    """A run as a bundle carries it; every column not given is null."""
    fields: dict[str, Any] = {name: None for name in RunRecord.model_fields}
    fields.update(
        job_key=job_key, identity=run_identity(machine, job_key, arm, block, "copy",
                                               repetition),
        arm=arm, arm_name=arm, block=block, pair=block // 2, position=block % 2,
        prompt_id="copy", prompt_category="rewrite", repetition=repetition,
        prompt_tokens=10, generated_tokens=32, decode_tok_s=100.0 + block, ttft_ms=5.0,
        e2e_ms=320.5, draft_n=0, draft_accepted=0, spec_drafts=3, spec_drafted=12,
        spec_accepted=9, spec_accepted_per_pos=[3, 3, 2, 1], text="the quick brown fox ✓",
        server_version="version: 7000 (abc1234)", build_name="cpu", model_file="m.gguf",
        model_size=1234, model_sha256="ab" * 32, host=machine,
        argv=["BUILD:cpu", "--model", "MODELS_DIR/m.gguf"], tokens=[1, 2, 3], concurrency=1,
        attempt=1, started_at=MADE)
    fields.update(values)
    return RunRecord.model_validate(fields)


def sample_records() -> tuple[list[JobRecord], list[RunRecord]]:
    """Two jobs of two blocks each, two repetitions per arm and block."""
    jobs = [job_record(number=number) for number in (1, 2)]
    runs = [run_record(job.job_key, arm, block, repetition)
            for job in jobs for block in (0, 1) for arm in ("baseline", "variant")
            for repetition in (0, 1)]
    return jobs, runs


def write_sample(path: Path, **options: Any) -> Manifest:
    jobs, runs = sample_records()
    return write_bundle(path, machine_id=MACHINE, campaigns=["c1"], with_host=False,
                        jobs=jobs, runs=runs, created_at=MADE, **options)


def test_run_record_holds_every_run_column_but_the_store_row_ids_and_log() -> None:
    columns = {column.name for column in Run.__table__.columns}
    assert set(RunRecord.model_fields) == (columns - set(DROPPED_RUN_COLUMNS)
                                           | {"job_key", "identity"})


def test_a_bundle_read_back_holds_the_records_written(tmp_path: Path) -> None:
    manifest = write_sample(tmp_path / "a.bundle")
    bundle = read_bundle(tmp_path / "a.bundle")
    assert (list(bundle.jobs), list(bundle.runs)) == sample_records()
    assert bundle.manifest == manifest and bundle.signer is None
    assert manifest.summary_version == SUMMARY_VERSION and manifest.machine_id == MACHINE
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.bundle"]


def test_a_bundle_is_known_by_the_sha256_of_its_whole_file(tmp_path: Path) -> None:
    write_sample(tmp_path / "a.bundle")
    jobs, runs = sample_records()
    write_bundle(tmp_path / "b.bundle", machine_id=MACHINE, campaigns=["c1"],
                 with_host=False, jobs=jobs[:1], runs=runs[:4], created_at=MADE)
    for name in ("a.bundle", "b.bundle"):
        assert read_bundle(tmp_path / name).sha256 == hashlib.sha256(
            (tmp_path / name).read_bytes()).hexdigest()


def test_the_same_records_make_the_same_bytes(tmp_path: Path) -> None:
    write_sample(tmp_path / "a.bundle")
    write_sample(tmp_path / "b.bundle")
    assert (tmp_path / "a.bundle").read_bytes() == (tmp_path / "b.bundle").read_bytes()
    jobs, runs = sample_records()
    write_bundle(tmp_path / "c.bundle", machine_id=MACHINE, campaigns=["c1"], with_host=False,
                 jobs=jobs, runs=runs, created_at=datetime.now(UTC))
    with zipfile.ZipFile(tmp_path / "a.bundle") as a, zipfile.ZipFile(tmp_path / "c.bundle") as c:
        for name in (JOBS, RUNS):
            assert a.read(name) == c.read(name)
        lines = a.read(RUNS).decode().splitlines()
    assert lines[0].startswith('{"aggregate_tok_s":null,"argv":["BUILD:cpu",')


def test_a_failed_write_leaves_the_old_bundle_and_no_part_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.bundle"
    path.write_bytes(b"the bundle before")

    def fail(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", fail)
    with pytest.raises(OSError, match="disk full"):
        write_sample(path)
    assert [item.name for item in tmp_path.iterdir()] == ["a.bundle"]
    assert path.read_bytes() == b"the bundle before"


def test_nothing_to_share_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing to share: c1 hold no finished job"):
        write_bundle(tmp_path / "a.bundle", machine_id=MACHINE, campaigns=["c1"],
                     with_host=False, jobs=[], runs=[])
    assert not any(tmp_path.iterdir())


def test_a_signed_bundle_names_its_signer(tmp_path: Path) -> None:
    key_path = tmp_path / "keys" / "me.pem"
    key = new_key(key_path)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    write_sample(tmp_path / "a.bundle", signing_key=load_private(key_path))
    bundle = read_bundle(tmp_path / "a.bundle")
    assert bundle.signer == fingerprint(public_bytes(key)) and len(bundle.signer) == 16


def test_keys_sign_and_verify_only_their_own_data(tmp_path: Path) -> None:
    key, other = new_key(tmp_path / "a.pem"), new_key(tmp_path / "b.pem")
    signature = sign(key, b"manifest")
    assert verify(public_bytes(key), signature, b"manifest")
    assert not verify(public_bytes(key), signature, b"manifest!")
    assert not verify(public_bytes(other), signature, b"manifest")
    assert not verify(public_bytes(key)[:31], signature, b"manifest")


def test_a_key_is_never_overwritten_nor_loaded_when_others_can_read_it(tmp_path: Path) -> None:
    path = tmp_path / "me.pem"
    new_key(path)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="exists already"):
        new_key(path)
    assert path.read_bytes() == before
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=f"chmod 600 {path}"):
        load_private(path)
    (tmp_path / "junk.pem").write_text("not a key")
    (tmp_path / "junk.pem").chmod(0o600)
    with pytest.raises(ConfigError, match="not an unencrypted PEM private key"):
        load_private(tmp_path / "junk.pem")


def test_the_machine_id_is_made_once_and_kept(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = machine_id(data_dir)
    assert len(first) == 32 and int(first, 16) >= 0
    assert machine_id(data_dir) == first
    assert (data_dir / MACHINE_ID_FILE).read_text() == first + "\n"
    assert sorted(path.name for path in data_dir.iterdir()) == [MACHINE_ID_FILE]
    assert machine_id(tmp_path / "other") != first


def test_racing_processes_agree_on_one_machine_id(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: machine_id(tmp_path / "data"), range(32)))
    assert len(ids) == 1
    assert [path.name for path in (tmp_path / "data").iterdir()] == [MACHINE_ID_FILE]


def test_a_damaged_machine_id_file_says_to_delete_it(tmp_path: Path) -> None:
    (tmp_path / MACHINE_ID_FILE).write_text("my-laptop\n")
    with pytest.raises(ConfigError, match=f"{tmp_path / MACHINE_ID_FILE} holds .*delete the"):
        machine_id(tmp_path)


def test_run_identity_names_one_run_of_one_machine() -> None:
    key = "a" * 64
    identity = run_identity(MACHINE, key, "variant", 3, "copy", 1)
    assert identity == run_identity(MACHINE, key, "variant", 3, "copy", 1)
    assert len({identity, run_identity(MACHINE, key, "variant", 3, "copy", 0),
                run_identity(MACHINE, key, "baseline", 3, "copy", 1),
                run_identity("f" * 32, key, "variant", 3, "copy", 1),
                run_identity(MACHINE, key, "variant", 31, "copy", 1)}) == 5


def test_argv_paths_become_roles_and_secrets_stars() -> None:
    places = Places(Path("/home/alice/models"), Path("/home/alice/.cache/specfarm/dl"))
    argv = ["/home/alice/llama.cpp/build/bin/llama-server", "--model",
            "/home/alice/models/sub/m.gguf", "--host", "/tmp/farm-x/server.sock",
            "--model-draft=/home/alice/.cache/specfarm/dl/hub/d.gguf", "--api-key", "s3cret",
            "--hf-token=hf_abc", "--threads", "4", "--models-dir-bad", "/home/alice/models2/x"]
    assert anonymous_argv(argv, "mybuild", places) == [
        "BUILD:mybuild", "--model", "MODELS_DIR/sub/m.gguf", "--host", "PATH",
        "--model-draft=DOWNLOADS_DIR/hub/d.gguf", "--api-key", "***", "--hf-token=***",
        "--threads", "4", "--models-dir-bad", "PATH"]


@pytest.fixture
def store(tmp_path: Path) -> Engine:
    """An SQLite store with campaign ``share-me`` (two finished jobs with runs on host
    ``alice-desktop``, one failed) and campaign ``other``."""
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    upgrade(engine)
    models = tmp_path / "models"
    matrix = matrix_dict(models / "m.gguf", campaign="share-me", variants=[
        {"name": f"ngram-{n}", "flags": {"spec-type": "ngram-simple", "draft-max": n}}
        for n in (4, 8, 16)])
    specs = load_matrix(write_matrix(tmp_path, matrix))[1]
    ids = repo.register(engine, "share-me", "/home/alice/m.yaml", specs)
    repo.register(engine, "other", "o.yaml", load_matrix(write_matrix(
        tmp_path, matrix_dict(models / "m.gguf", campaign="other"), "o.yaml"))[1])
    with Session(engine) as session, session.begin():
        for job_id in ids[:2]:
            session.add_all(_stored_runs(job_id, models))
        session.execute(update(Job).where(Job.id.in_(ids[:2])).values(
            state=JobState.DONE, pairs=1, stop_reason="fixed", speculation="ok",
            summary={**JobSummary(speedup=1.1).model_dump(mode="json"), "version": 6},
            started_at=datetime(2025, 1, 1), finished_at=datetime(2025, 1, 1, 1)))
        session.execute(update(Job).where(Job.id == ids[2]).values(state=JobState.FAILED))
    return engine


def _stored_runs(job_id: int, models: Path) -> list[Run]:
    argv = ["/opt/llama/bin/llama-server", "--model", str(models / "m.gguf"), "--host",
            "/tmp/x/sock", "--api-key", "s3cret"]
    return [Run(job_id=job_id, arm=arm, arm_name=arm, block=block, pair=0, position=block,
                prompt_id="copy", prompt_category="rewrite", repetition=0, prompt_tokens=10,
                generated_tokens=32, decode_tok_s=100.0 + block, ttft_ms=5.0, e2e_ms=100.0,
                tpot_ms=float("nan"), spec_drafted=10, spec_accepted=8, text="t",
                server_version="v", build_name="cpu", model_file=str(models / "m.gguf"),
                model_size=1, model_sha256="0" * 64, host="alice-desktop",
                worker_name="default@alice-desktop-0", argv=argv,
                server_log="/home/alice/.local/share/specfarm/logs/x.log",
                model_source="https://user:pw@example.com/m.gguf?token=abc",
                started_at=datetime(2025, 1, 1, 0, 0, block))
            for block, arm in enumerate(("baseline", "variant"))]


def test_a_store_is_shared_without_its_host_paths_or_secrets(
        store: Engine, tmp_path: Path) -> None:
    places = Places(tmp_path / "models")
    jobs, runs = collect(store, ["share-me"], machine_id=MACHINE, places=places)
    assert len(jobs) == 2 and len(runs) == 4
    assert {run.host for run in runs} == {MACHINE}
    assert {run.worker_name for run in runs} == {None}
    assert runs[0].argv == ["BUILD:cpu", "--model", "MODELS_DIR/m.gguf", "--host", "PATH",
                            "--api-key", "***"]
    assert runs[0].model_file == "m.gguf" and runs[0].model_dump()["tpot_ms"] is None
    assert runs[0].model_source == "https://user:***@example.com/m.gguf?token=***"
    assert runs[0].started_at.tzinfo is not None
    assert {job.summary["version"] for job in jobs} == {SUMMARY_VERSION}
    assert jobs[0].spec["model"]["path"] == "MODELS_DIR/m.gguf"
    assert "alice" not in repr((jobs, runs)) and str(tmp_path) not in repr((jobs, runs))
    write_bundle(tmp_path / "a.bundle", machine_id=MACHINE, campaigns=["share-me"],
                 with_host=False, jobs=jobs, runs=runs)
    bundle = read_bundle(tmp_path / "a.bundle")
    assert (list(bundle.jobs), list(bundle.runs)) == (jobs, runs)
    hosts = collect(store, ["share-me"], machine_id=MACHINE, places=places, with_host=True)[1]
    assert {(run.host, run.worker_name) for run in hosts} == {
        ("alice-desktop", "default@alice-desktop-0")}


def test_sharing_a_campaign_the_store_lacks_names_the_stores(
        store: Engine, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no campaign named 'nope'; the store holds other, "
                                          "share-me"):
        collect(store, ["share-me", "nope"], machine_id=MACHINE,
                places=Places(tmp_path / "models"))


def test_the_dry_run_says_what_would_be_shared(store: Engine, tmp_path: Path) -> None:
    jobs, runs = collect(store, ["share-me", "other"], machine_id=MACHINE,
                         places=Places(tmp_path / "models"))
    lines = dry_run_lines(store, ["share-me", "other"], jobs, runs, machine_id=MACHINE,
                          with_host=False)
    text = "\n".join(lines)
    assert lines[0] == f"would share 2 jobs and 4 runs of 2 campaigns as machine {MACHINE}"
    assert "  share-me: 2 finished jobs; not shared: 1 failed" in lines
    assert "  other: 0 finished jobs; not shared: 1 queued" in lines
    assert f"hosts: shown as the machine id {MACHINE}; worker names: left out" in lines
    assert "server_log" in text and "MODELS_DIR/<file>" in text
    assert "BUILD:cpu --model MODELS_DIR/m.gguf --host PATH --api-key '***'" in text


def test_farm_share_writes_a_signed_bundle_and_its_dry_run_writes_nothing(
        store: Engine, tmp_path: Path, isolated_data_dir: Path) -> None:
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'farm.db'}",
                             models_dir=tmp_path / "models")
    lines = share_campaigns(settings, ["share-me"], None, dry_run=True)
    assert lines[0].endswith("as machine not made yet (the first bundle makes it)")
    assert not (isolated_data_dir / MACHINE_ID_FILE).exists()
    new_key(tmp_path / "me.pem")
    output = tmp_path / "out" / "me.bundle"
    lines = share_campaigns(settings, ["share-me", "share-me"], output,
                            key=tmp_path / "me.pem")
    machine = (isolated_data_dir / MACHINE_ID_FILE).read_text().strip()
    assert lines[0].startswith(f"wrote {output}: 2 jobs and 4 runs of share-me as machine "
                               f"{machine}, signed by key ")
    bundle = read_bundle(output)
    assert bundle.manifest.campaigns == ["share-me"] and bundle.signer is not None
    assert {run.host for run in bundle.runs} == {machine}
    assert share_campaigns(settings, ["share-me"], None, dry_run=True)[0].endswith(machine)


def test_farm_share_never_leaves_a_bundle_boards_would_refuse(
        store: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_module, "MAX_JOBS_BYTES", 100)
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'farm.db'}",
                             models_dir=tmp_path / "models")
    output = tmp_path / "me.bundle"
    output.write_bytes(b"an older bundle")
    with pytest.raises(ConfigError, match=f"{output}: a board would refuse this bundle "
                                          r"\(member jobs.jsonl declares \d+ bytes"):
        share_campaigns(settings, ["share-me"], output)
    assert output.read_bytes() == b"an older bundle"
    assert sorted(path.name for path in tmp_path.iterdir() if "bundle" in path.name) == [
        "me.bundle"]


def test_a_path_in_the_models_dir_is_named_by_role_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "disk").mkdir()
    (tmp_path / "models").symlink_to(tmp_path / "disk")
    places = Places(tmp_path / "models")
    assert places.role(str(tmp_path / "disk" / "m.gguf")) == "MODELS_DIR/m.gguf"
    assert places.role(str(tmp_path / "models" / ".." / "x.gguf")) == "PATH"
    assert places.role("relative/m.gguf") == "relative/m.gguf"
