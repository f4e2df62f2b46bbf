"""A git server that answers a worker's fetch with crafted text: its words cannot make the
failure look like an outage (which would keep the job deferred instead of refused), and
its control characters never reach the error a job keeps, the log or a terminal.

The server speaks the git protocol on 127.0.0.1 (one ``ERR`` packet, as a real server's
refusal); the client is the real git that the worker runs."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from farm.errors import BuildUnavailable
from workers.paths import NodePaths
from workers.setup.builds import BuildRequest, resolve_source

CRAFTED = {
    "feigned-outage": "Connection refused; early EOF; The requested URL returned error: 503",
    "terminal-escapes": "\x1b[2J\x1b]0;owned\x07\x1b[31mConnection timed out",
    "control-bytes": "refused\x08\x08\x08\x00\x7fnot found",
}


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[str]:
    """``git://`` URL of a server that answers every request with ``ERR <text>``."""
    text: str = request.param
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(4096)  # the request line
                payload = f"ERR {text}".encode()
                connection.sendall(f"{len(payload) + 4:04x}".encode() + payload)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"git://127.0.0.1:{server.getsockname()[1]}/repo.git"
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("hostile", list(CRAFTED.values()), ids=list(CRAFTED), indirect=True)
def test_a_git_servers_own_words_are_a_refusal_with_no_control_character(
        hostile: str, tmp_path: Path, node_paths: NodePaths) -> None:
    paths = replace(node_paths, cache_dir=tmp_path / "cache")
    with pytest.raises(BuildUnavailable, match=f"{hostile}: cannot fetch: ") as caught:
        resolve_source(BuildRequest(name="x", source=hostile, ref="c" * 40), paths)
    assert not caught.value.transient, "the server answered: refused, never deferred"
    message = str(caught.value)
    assert "remote error" in message
    assert all(char.isprintable() for char in message), repr(message)
    # Nothing was cloned, so nothing is built: the clone's folder is not there, whole or part.
    assert not list((paths.cache_dir / "git").glob("*"))
