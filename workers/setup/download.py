"""A pinned model's files downloaded into this node's downloads dir, whole and checked.

One download at a time per downloads dir (an ``fcntl`` lock: N workers on a box download a
model once, the others wait and find it there); free disk checked before a byte is
fetched; each file fetched by huggingface_hub's ``http_get`` into ``FILE.partial`` beside
its place, resumed from what a cut connection or a stopped worker left there; its sha256
checked against the one the job carries (the Hub's LFS hash, or the matrix's for a URL),
and only then renamed into place. So a file at its place (``workers.paths.hub_file``) is
whole and right, and nothing else is ever used. Offline, a node uses what it has or says
exactly which files are missing where.
"""

from __future__ import annotations

import fcntl
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_url
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.file_download import http_get
from huggingface_hub.utils._headers import build_hf_headers
from huggingface_hub.utils.tqdm import tqdm

from farm.errors import ModelUnavailable
from farm.matrix.spec import JobSpec, ModelRef, RemoteFile
from workers.paths import downloaded_files, file_sha256
from workers.setup.hub import UNREACHABLE, HubAccess, hub_error

# Left free beyond the file itself: a full disk breaks everything else on the node.
DISK_MARGIN = 1 << 30
LOCK_NAME = ".download.lock"
REPORT_EVERY_S = 5.0


class _Quiet(tqdm):
    """huggingface_hub's bar, never drawn: progress goes to the farm's log and terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]


class _Counting:
    """The partial file as ``http_get`` writes it: counts the bytes fetched, and tells
    ``say`` how far it got every few seconds."""

    def __init__(self, handle: Any, label: str, have: int, total: int | None,
                 say: Callable[[str], None]) -> None:
        self.handle, self.label, self.total, self.say = handle, label, total, say
        self.done, self.fetched = have, 0
        self.started = self.last = time.monotonic()

    def write(self, chunk: bytes) -> int:
        self.done += len(chunk)
        self.fetched += len(chunk)
        now = time.monotonic()
        if now - self.last >= REPORT_EVERY_S:
            self.last = now
            self.say(f"{self.label}: {_progress(self.done, self.total)}, "
                     f"{self.fetched / max(now - self.started, 1e-6) / 1e6:.1f} MB/s")
        return int(self.handle.write(chunk))

    def __getattr__(self, name: str) -> Any:  # seek, tell, truncate: the file's own
        return getattr(self.handle, name)


def _progress(done: int, total: int | None) -> str:
    if not total:
        return f"{done / 1e6:.1f} MB"
    return f"{100 * done / total:.0f}% ({done / 1e6:.1f} of {total / 1e6:.1f} MB)"


@contextmanager
def download_lock(downloads_dir: Path, say: Callable[[str], None]) -> Iterator[None]:
    """One download at a time on this node (every worker process shares the downloads dir)."""
    downloads_dir.mkdir(parents=True, exist_ok=True)
    with (downloads_dir / LOCK_NAME).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another download on this node ({downloads_dir / LOCK_NAME})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_space(model: ModelRef, item: RemoteFile, partial: Path, have: int) -> None:
    if item.size is None:
        return
    free = shutil.disk_usage(partial.parent).free
    need = item.size - have
    if need + DISK_MARGIN > free:
        raise ModelUnavailable(
            f"model {model.name!r}: {item.name} needs {need / 1e9:.2f} GB more and "
            f"{partial.parent} has {free / 1e9:.2f} GB free (the farm keeps "
            f"{DISK_MARGIN / 1e9:.1f} GB spare); free space or set FARM_MODELS_DIR elsewhere")


def _fetch_file(model: ModelRef, item: RemoteFile, target: Path, hub: HubAccess,
                say: Callable[[str], None]) -> int:
    """One file into ``target`` via ``target.partial``; the bytes fetched this time."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    have = partial.stat().st_size if partial.is_file() else 0
    if item.size is not None and have > item.size:
        partial.unlink()
        have = 0
    _check_space(model, item, partial, have)
    if model.hf is not None:
        url = hf_hub_url(model.hf, item.name, revision=model.revision, endpoint=hub.endpoint)
        headers = build_hf_headers(token=hub.token or False)
    else:  # a plain URL: the Hub's token is not sent anywhere else
        url, headers = model.url or "", {}
    label = f"model {model.name}: {item.name}"
    say(f"{label}: downloading" + (f" {item.size / 1e6:.1f} MB" if item.size else "")
        + (f", resuming at {have / 1e6:.1f} MB" if have else "") + f" into {target.parent}")
    with partial.open("ab") as handle:
        counting = _Counting(handle, label, have, item.size, say)
        try:
            http_get(url, counting, resume_size=have, headers=headers,  # type: ignore[arg-type]
                     expected_size=item.size, tqdm_class=_Quiet)
        except (HfHubHTTPError, *UNREACHABLE) as exc:
            raise hub_error(model, exc, hub) from exc
    actual = file_sha256(partial)
    if actual != item.sha256:
        partial.unlink()
        raise ModelUnavailable(
            f"model {model.name!r}: {item.name} downloaded with sha256 {actual}, but its "
            f"source states {item.sha256}: refused and removed (nothing used); check the "
            "source, or the network between this node and it")
    partial.replace(target)
    say(f"{label}: done, sha256 checked ({counting.fetched / 1e6:.1f} MB fetched)")
    return counting.fetched


def fetch_model(model: ModelRef, downloads_dir: Path, hub: HubAccess,
                say: Callable[[str], None]) -> Path:
    """The first file of a pinned remote model on this node (its shards beside it),
    downloaded if missing; ModelUnavailable when this node cannot get it."""
    files = downloaded_files(model, downloads_dir)
    if all(path.is_file() for _, path in files):
        return files[0][1]
    if hub.offline:
        missing = [str(path) for _, path in files if not path.is_file()]
        raise ModelUnavailable(
            f"model {model.name!r} ({model.source}) is not on this node and it is offline "
            f"(HF_HUB_OFFLINE): missing {', '.join(missing)}; copy the files there (with "
            "these names) or run `farm prepare` on the matrix where the Hub is reachable")
    with download_lock(downloads_dir, say):
        for item, path in files:
            if not path.is_file():  # another worker may have fetched it meanwhile
                _fetch_file(model, item, path, hub, say)
    return files[0][1]


def fetch_models(specs: list[JobSpec], downloads_dir: Path, hub: HubAccess,
                 say: Callable[[str], None]) -> None:
    """Every remote model the jobs run (and their draft models), on this node (each
    distinct model once)."""
    for model in {model.model_dump_json(): model for spec in specs
                  for model in (spec.model, *spec.draft_models) if model.remote}.values():
        fetch_model(model, downloads_dir, hub, say)
