"""A fake llama-server that attacks the worker through its socket, its answers and its
output, for tests/security/test_hostile_reads.py (it answers what no real llama-server
would; the planted commit of test_hostile_commit.py does it with real code).

Run as ``hostile_server.py ... --host SOCKET --hostile MODE --decoy DECOY`` (a farm's other
flags are passed over). Beside it a decoy socket answers like a server but records any
connection (``DECOY.reached``). MODE is one of ANSWERS (every request gets that answer),
or: ``link`` puts a link to the decoy at the socket's name; ``swap`` serves, and on its
first /health, before answering, renames its socket and puts such a link there; ``print``
prints without end; ``print-later`` serves, and prints without end when asked for
/metrics.
"""

from __future__ import annotations

import http.server
import os
import socketserver
import sys
import threading
import time
from collections.abc import Callable

MIB = 1 << 20
EVENT = b'data: {"content": "x"}\n\n'


def _write_forever(handler: http.server.BaseHTTPRequestHandler, status: int, piece: bytes,
                   every: float = 0.0) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()
    try:
        while True:
            handler.wfile.write(piece)
            if every:
                time.sleep(every)
    except OSError:  # the client hung up: what the farm should do
        return


def _answer(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


ANSWERS: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {
    "huge position": lambda h: _answer(
        h, b'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 1\n'),
    "huge count": lambda h: _answer(h, b"llamacpp:spec_decode_num_drafts_total 1e400\n"),
    "endless metrics": lambda h: _write_forever(h, 200, b"#" * MIB),
    "endless stream": lambda h: _write_forever(h, 200, EVENT * 1000),
    "endless stream line": lambda h: _write_forever(h, 200, b"data: " + b"x" * MIB),
    # 1 token allows 66 events (6.6 s of these) and 3 s (2 s of request time, 1 s a token).
    "slow stream": lambda h: _write_forever(h, 200, EVENT, every=0.1),
    "endless error body": lambda h: _write_forever(h, 500, b"E" * MIB),
    "huge slots": lambda h: _write_forever(h, 200, b"[" + b" " * MIB),
    "deep slots": lambda h: _answer(h, b"[" * 50_000 + b"]" * 50_000),
    "many containers": lambda h: _answer(h, b"[" + b"[]," * (10 << 20) + b"[]]"),
    "infinite speed": lambda h: _answer(h, EVENT + b'data: {"timings": {"predicted_n": 8, '
                                           b'"predicted_per_second": Infinity}}\n\n'),
}


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, mode: str, decoy: str | None) -> None:
        super().__init__(path, _Answer)
        self.mode, self.decoy = mode, decoy  # decoy: where this server is the decoy


class _Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.do_GET()

    def do_GET(self) -> None:
        mode, decoy = self.server.mode, self.server.decoy
        if decoy is not None:
            open(f"{decoy}.reached", "w").close()
        if mode in ANSWERS and decoy is None:
            ANSWERS[mode](self)
            return
        if mode == "print-later" and self.path == "/metrics":
            _print_forever()
        if mode == "swap" and self.path == "/health" and decoy is None:
            # Before the answer: once its headers are read the client may hang up, and a
            # swap after the body's write would then never happen.
            host = _flag("--host")
            os.rename(host, f"{host}.real")
            os.symlink(_flag("--decoy"), host)
        _answer(self, b"llamacpp:spec_decode_num_drafts_total %d\n" % (5 if decoy is None
                                                                        else 666))


def _print_forever() -> None:
    chunk = b"p" * MIB
    while True:
        os.write(1, chunk)


def _flag(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


def _serve(path: str, mode: str, decoy: str | None) -> None:
    threading.Thread(target=_Server(path, mode, decoy).serve_forever, daemon=True).start()


if __name__ == "__main__":
    HOST, MODE, DECOY = _flag("--host"), _flag("--hostile"), _flag("--decoy")
    _serve(DECOY, MODE, DECOY)
    if MODE == "link":
        os.symlink(DECOY, HOST)
    elif MODE == "print":
        _print_forever()
    else:
        _serve(HOST, MODE, None)
    time.sleep(3600)
