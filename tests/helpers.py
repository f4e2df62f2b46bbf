"""Small builders shared by the tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from farm.cli import cli

COPY_PROMPT = (
    "Repeat the following text exactly, word for word, and nothing else:\n\n"
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with "
    "a single step. All that glitters is not gold. Actions speak louder than words.")


# JobSpec fields added after migration 0007 froze its copy of the spec: a job stored at
# schema 0006 never has them (tests that store today's specs there leave them out). None of
# them is part of what 0007 computes.
NEWER_THAN_0007 = ("busy_node", "busy_wait", "stop_rule")


# Debian's Chromium, which tests/run installs with apt-get (the browser tests skip without).
CHROMIUM = shutil.which("chromium")


REDIS_URL = os.environ.get("FARM_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def private_redis_url() -> str:
    """A database of the shared Redis for this pytest process alone, which its tests flush:
    tests/run runs two pytest-xdist workers at once (8 for the first, 9 for the second)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return f"{REDIS_URL}/{8 + int(worker.removeprefix('gw'))}"


def matrix_dict(model_path: Path, **overrides: Any) -> dict[str, Any]:
    """A small valid matrix: SmolLM2, one copy prompt, baseline vs ngram-simple."""
    matrix: dict[str, Any] = {
        "campaign": "test-campaign",
        "build": "cpu",
        "models": [{"name": "smollm2", "path": str(model_path)}],
        "prompt-mode": "chat",
        "prompts": [{"id": "copy", "text": COPY_PROMPT, "category": "rewrite"}],
        "n-predict": 32,
        "repetitions": 2,
        "pairs": 1,
        "max-pairs": 1,
        "flags": {"ctx-size": 1024, "threads": 1},  # tests/beside.py
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}],
    }
    matrix.update(overrides)
    return matrix


def write_matrix(directory: Path, matrix: dict[str, Any], name: str = "matrix.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, width: int | None = None) -> Result:
    """``farm ARGS`` in-process, named as the installed command names itself.

    ``farm run`` installs a SIGTERM handler for its own process; here that process is
    pytest's, so the handler is put back. ``width`` sets the terminal width of help pages.
    """
    handler = signal.getsignal(signal.SIGTERM)
    extra: dict[str, Any] = {} if width is None else {"terminal_width": width,
                                                      "max_content_width": width}
    try:
        return CliRunner().invoke(cli, list(args), env=env, prog_name="farm", **extra)
    finally:
        signal.signal(signal.SIGTERM, handler)


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` as a test's committer; its output, stripped."""
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def new_repository(repo: Path, files: dict[str, str], message: str) -> str:
    """``repo``: a new git repository on master with ``files`` (name -> text) in one
    commit; returns the commit."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "master")
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def as_role(url: str, role: str) -> str:
    """``url`` (a PostgreSQL URL of trust auth) logging in as ``role`` instead."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[1]}"
