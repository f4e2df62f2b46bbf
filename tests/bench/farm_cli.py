"""What the benchmark scripts share: ``farm`` as a user runs it, on a private data dir, and
the prompts they draw from the examples."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

FARM = Path(sys.executable).with_name("farm")
# Prompts that read the same in the oracle's test vocabulary (its text does not depend on
# them): two categories for per-category figures.
ORACLE_PROMPTS = [{"id": "count", "category": "code", "text": "one two three four five"},
                  {"id": "read", "category": "chat", "text": "the farm reads the log and"}]


def smollm2_prompts(categories: tuple[str, ...] = ("rewrite", "code")) -> list[dict[str, str]]:
    """The prompts of ``examples/smollm2-ngram.yaml`` in ``categories``."""
    example = Path(__file__).resolve().parents[2] / "examples" / "smollm2-ngram.yaml"
    prompts: list[dict[str, str]] = yaml.safe_load(example.read_text())["prompts"]
    return [prompt for prompt in prompts if prompt["category"] in categories]


def farm(env: dict[str, str], *args: str, jobs_may_fail: bool = False) -> str:
    """``farm ARGS``' output; exits the script, with its output, if it fails (unless only
    some jobs failed, where ``jobs_may_fail``: a report shows why)."""
    started = time.perf_counter()
    proc = subprocess.run([str(FARM), *args], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode == 1 and jobs_may_fail:
        print(f"  farm {' '.join(args)}: some jobs failed:\n{proc.stderr[-1500:]}")
    elif proc.returncode != 0:
        raise SystemExit(f"farm {' '.join(args)} exited {proc.returncode}:\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(f"  farm {' '.join(args)}: {time.perf_counter() - started:.0f} s", flush=True)
    return proc.stdout


@contextmanager
def private_store(prefix: str, keep: Path | None) -> Iterator[tuple[Path, dict[str, str]]]:
    """A work dir and the environment whose ``farm`` keeps its SQLite store there: ``keep``
    (kept), or a temporary dir removed at the end."""
    workdir = keep or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FARM_DATA_DIR": str(workdir / "data")}
    env.pop("FARM_DATABASE_URL", None)
    try:
        yield workdir, env
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
