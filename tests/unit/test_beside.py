"""tests/beside.py reads the thread count a llama-server command line asks for."""

from __future__ import annotations

import pytest

from tests.beside import threads_asked


@pytest.mark.parametrize(("argv", "threads"), [
    (["llama-server", "--threads", "1", "-m", "m.gguf"], 1),
    (["llama-server", "-t", "2"], 2),
    (["llama-server", "--threads=4"], 4),
    (["llama-server", "-m", "m.gguf", "--ctx-size", "512"], None),  # every core
])
def test_the_threads_a_command_line_asks_for(argv: list[str], threads: int | None) -> None:
    assert threads_asked(argv) == threads
