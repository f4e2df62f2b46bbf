"""tests/beside.py reads the thread count a llama-server command line asks for, and whether
it serves a model (a probe does not count)."""

from __future__ import annotations

import pytest

from tests.beside import serves, threads_asked


@pytest.mark.parametrize(("argv", "threads"), [
    (["llama-server", "--threads", "1", "-m", "m.gguf"], 1),
    (["llama-server", "-t", "2"], 2),
    (["llama-server", "--threads=4"], 4),
    (["llama-server", "-m", "m.gguf", "--ctx-size", "512"], None),  # every core
])
def test_the_threads_a_command_line_asks_for(argv: list[str], threads: int | None) -> None:
    assert threads_asked(argv) == threads


@pytest.mark.parametrize(("argv", "serving"), [
    (["llama-server", "--model", "m.gguf", "--threads", "1"], True),
    (["llama-server", "-m", "m.gguf"], True),
    (["llama-server", "--model=m.gguf"], True),
    (["llama-server", "--version"], False),  # a probe: no model, nothing computed
    (["llama-server", "--help"], False),
])
def test_only_a_server_with_a_model_counts(argv: list[str], serving: bool) -> None:
    assert serves(argv) is serving
