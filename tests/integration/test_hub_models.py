"""Hub models pinned and downloaded against a stand-in for the Hugging Face Hub on
127.0.0.1 (tests/hub_standin.py: no machine here reaches the real Hub), serving the real
SmolLM2 GGUF and a split GGUF made from it by gguf-py's writer."""

from __future__ import annotations

import multiprocessing
import subprocess
import time
from pathlib import Path

import pytest

from farm.errors import ConfigError, ModelUnavailable
from farm.matrix.spec import ModelRef
from tests.hub_standin import (
    COMMIT,
    FILE,
    GATED,
    REPO,
    SPLIT,
    SPLIT_FIRST,
    TOKEN,
    HubStandin,
    hub,
    shards,
    smol_gguf,
)
from workers.paths import downloaded_files, file_sha256
from workers.setup.download import fetch_model
from workers.setup.hub import HubAccess, pin_model


def _pinned(hub: HubStandin, models: Path, repo: str = REPO, file: str = FILE,
            token: str | None = None) -> ModelRef:
    model = ModelRef(name="smol", hf=repo, file=file, revision="main")
    return pin_model(model, HubAccess(hub.url, token), models, lambda _line: None)


def test_a_revision_is_pinned_to_its_commit_with_the_hubs_sha256(
        hub: HubStandin, tmp_path: Path, smol_gguf: Path) -> None:
    pinned = _pinned(hub, tmp_path)
    assert pinned.revision == COMMIT and pinned.pinned
    assert [(f.name, f.sha256, f.size) for f in pinned.files] == [
        (FILE, file_sha256(smol_gguf), smol_gguf.stat().st_size)]


def test_a_cut_connection_resumes_and_refetches_only_what_was_not_written(
        hub: HubStandin, tmp_path: Path, smol_gguf: Path) -> None:
    model, size = _pinned(hub, tmp_path), smol_gguf.stat().st_size
    hub.cut_after = 30_000_000
    lines: list[str] = []
    started = time.monotonic()
    path = fetch_model(model, tmp_path, HubAccess(hub.url), lines.append)
    elapsed = time.monotonic() - started
    again = hub.sent[f"{REPO}/{FILE}"] - size
    print(f"download of {size / 1e6:.1f} MB cut at 30.0 MB: {elapsed:.2f} s, "
          f"{hub.gets[f'{REPO}/{FILE}']} GETs, {again / 1e6:.2f} MB fetched again")
    assert file_sha256(path) == file_sha256(smol_gguf)
    assert hub.gets[f"{REPO}/{FILE}"] == 2
    # Only what huggingface_hub had read but not yet written (one chunk, 10 MB at most).
    assert 0 <= again <= 10 * 1024 * 1024
    assert not list(path.parent.glob("*.partial"))


def test_a_stopped_download_resumes_from_its_partial_file(
        hub: HubStandin, tmp_path: Path, smol_gguf: Path) -> None:
    model = _pinned(hub, tmp_path)
    ((_, place),) = downloaded_files(model, tmp_path)
    place.parent.mkdir(parents=True)
    kept = 40_000_000
    with smol_gguf.open("rb") as source:  # what a worker stopped mid-file leaves
        place.with_name(place.name + ".partial").write_bytes(source.read(kept))
    fetch_model(model, tmp_path, HubAccess(hub.url), lambda _line: None)
    assert hub.sent[f"{REPO}/{FILE}"] == smol_gguf.stat().st_size - kept
    assert file_sha256(place) == file_sha256(smol_gguf)


def test_a_wrong_hash_is_refused_and_nothing_is_left_to_use(
        hub: HubStandin, tmp_path: Path) -> None:
    model = _pinned(hub, tmp_path)
    hub.corrupt = True
    with pytest.raises(ModelUnavailable, match=r"downloaded with sha256 \w+, but its source "
                                               r"states \w+: refused and removed"):
        fetch_model(model, tmp_path, HubAccess(hub.url), lambda _line: None)
    ((_, place),) = downloaded_files(model, tmp_path)
    assert list(place.parent.iterdir()) == []


def test_a_gated_repository_without_a_token_names_the_token_variable(
        hub: HubStandin, tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=r"the Hub answered 401 .* this node has no "
                                               "token: .* set HF_TOKEN in this node's "
                                               "environment"):
        _pinned(hub, tmp_path, GATED)
    model = _pinned(hub, tmp_path, GATED, token=TOKEN)
    path = fetch_model(model, tmp_path, HubAccess(hub.url, TOKEN), lambda _line: None)
    assert path.is_file()
    with pytest.raises(ModelUnavailable, match="answered 401"):  # the token is needed per file
        fetch_model(model, tmp_path / "other", HubAccess(hub.url), lambda _line: None)


def test_an_outage_of_the_hub_is_transient_a_refusal_is_not(
        hub: HubStandin, tmp_path: Path) -> None:
    """503 (an outage) and a Hub that does not answer may pass: the worker tries again and
    defers the job; 401 (no token) will not: the worker refuses it."""
    model = _pinned(hub, tmp_path)
    hub.down_until = time.monotonic() + 60
    with pytest.raises(ModelUnavailable, match="the Hub answered 503") as outage:
        fetch_model(model, tmp_path, HubAccess(hub.url), lambda _line: None)
    assert outage.value.transient and hub.down >= 1
    with pytest.raises(ModelUnavailable, match="could not be reached") as away:
        fetch_model(model, tmp_path, HubAccess("http://127.0.0.1:9"), lambda _line: None)
    assert away.value.transient
    hub.down_until = 0.0
    gated = _pinned(hub, tmp_path, GATED, token=TOKEN)
    with pytest.raises(ModelUnavailable, match="answered 401") as refused:
        fetch_model(gated, tmp_path, HubAccess(hub.url), lambda _line: None)
    assert not refused.value.transient


def test_a_missing_file_lists_the_repositorys_ggufs(hub: HubStandin, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"has no file 'nope.gguf'; its GGUF files: {FILE}"):
        _pinned(hub, tmp_path, file="nope.gguf")


def test_too_little_disk_is_refused_before_a_byte_is_fetched(
        hub: HubStandin, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(small)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        model = _pinned(hub, small)
        with pytest.raises(ModelUnavailable, match=r"needs 0.10 GB more and .* has 0.02 GB "
                                                   "free"):
            fetch_model(model, small, HubAccess(hub.url), lambda _line: None)
        assert hub.gets[f"{REPO}/{FILE}"] == 0
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_offline_a_node_uses_what_it_has_or_names_what_is_missing(
        hub: HubStandin, tmp_path: Path) -> None:
    model = _pinned(hub, tmp_path)
    offline = HubAccess(hub.url, offline=True)
    with pytest.raises(ModelUnavailable, match=f"is not on this node and it is offline "
                                               f"\\(HF_HUB_OFFLINE\\): missing {tmp_path}/hub/"
                                               f"standin--SmolLM2-135M-GGUF/{COMMIT}/{FILE}"):
        fetch_model(model, tmp_path, offline, lambda _line: None)
    fetch_model(model, tmp_path, HubAccess(hub.url), lambda _line: None)
    lines: list[str] = []
    again = pin_model(ModelRef(name="smol", hf=REPO, file=FILE, revision="main"), offline,
                      tmp_path, lines.append)
    assert again == model and f"revision main is commit {COMMIT} as pinned" in lines[0]
    assert fetch_model(again, tmp_path, offline, lambda _line: None).is_file()


def test_a_split_gguf_downloads_every_shard_beside_the_first(
        hub: HubStandin, tmp_path: Path, shards: list[Path]) -> None:
    model = _pinned(hub, tmp_path, SPLIT, SPLIT_FIRST)
    assert [item.name for item in model.files] == [path.name for path in shards]
    first = fetch_model(model, tmp_path, HubAccess(hub.url), lambda _line: None)
    assert first.name == SPLIT_FIRST
    assert sorted(p.name for p in first.parent.iterdir()) == [p.name for p in shards]


def _fetch_in_a_process(url: str, models: str, model: str, started: float) -> None:
    fetched = fetch_model(ModelRef.model_validate_json(model), Path(models), HubAccess(url),
                          lambda line: print(f"{time.monotonic() - started:6.2f} s pid "
                                             f"{multiprocessing.current_process().pid}: {line}",
                                             flush=True))
    assert fetched.is_file()


def test_two_processes_on_one_box_download_once(hub: HubStandin, tmp_path: Path,
                                                smol_gguf: Path) -> None:
    model = _pinned(hub, tmp_path)
    started = time.monotonic()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_fetch_in_a_process, args=(
        hub.url, str(tmp_path), model.model_dump_json(), started)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert hub.gets[f"{REPO}/{FILE}"] == 1
    assert hub.sent[f"{REPO}/{FILE}"] == smol_gguf.stat().st_size


__all__ = ["hub", "shards", "smol_gguf"]  # the stand-in's fixtures, used by name
