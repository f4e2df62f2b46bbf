"""A real job beside a bounded CPU hog: flagged, with the arm whose blocks it shared; the
same job alone is not; ``busy-node: wait`` holds a block until the hog ends, and says how
long (docs/busy-node.md)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from farm.stats.busy import BUSY_CORES
from tests.e2e.test_farm_run import FARM, farm, report_rows
from tests.helpers import matrix_dict, write_matrix

pytestmark = [pytest.mark.server, pytest.mark.alone]

# A one-core busy loop that ends by itself.
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def _hog(seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)])


def _matrix(tmp_path: Path, smollm2: Path, **overrides: Any) -> Path:
    # One thread: beside a hog on a 2-core node, llama.cpp's spinning threads would crawl.
    return write_matrix(tmp_path, matrix_dict(
        smollm2, pairs=2, **{"max-pairs": 2}, flags={"ctx-size": 1024, "threads": 1},
        **overrides))


@contextmanager
def _hog_beside_baseline(logs: Path) -> Iterator[None]:
    """A hog while the newest block log is a baseline block's, none while a variant's:
    the busy loop follows the job's blocks as they start (each loop ends by itself)."""
    stop = threading.Event()

    def follow() -> None:
        hog: subprocess.Popen[bytes] | None = None
        while not stop.wait(0.05):
            blocks = sorted(logs.glob("*/block*.log"), key=lambda p: int(
                p.stem.split("-")[0].removeprefix("block")))
            baseline = bool(blocks) and blocks[-1].stem.endswith("baseline")
            if baseline and (hog is None or hog.poll() is not None):
                hog = _hog(120)
            elif not baseline and hog is not None:
                hog.kill()
                hog.wait()
                hog = None
        if hog is not None:
            hog.kill()
            hog.wait()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _block_runs(data_dir: Path) -> dict[int, list[tuple[Any, ...]]]:
    with sqlite3.connect(data_dir / "farm.db") as db:
        rows = db.execute("select block, arm, node_other_cores, node_top, busy_wait_s, "
                          "node_load_1m from run order by block").fetchall()
    blocks: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        blocks.setdefault(row[0], []).append(row)
    return blocks


def _farm_run(matrix: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """``farm run MATRIX`` as a user runs it, and its pid."""
    with subprocess.Popen([FARM, "run", str(matrix)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        stdout, stderr = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), \
        process.pid


def _never_the_farms_own(blocks: dict[int, list[tuple[Any, ...]]], farm_pid: int) -> None:
    """What a run names beside it is never the farm's own process (its servers are its
    children: the recorded traces of tests/unit/test_busy_node.py show them left out)."""
    for runs in blocks.values():
        for *_, top, _, _ in runs:
            assert farm_pid not in [pid for _, pid, _ in json.loads(top)], top


def test_a_job_beside_a_hog_is_flagged_with_the_arm_whose_blocks_it_shared(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = _matrix(tmp_path, smollm2)
    with _hog_beside_baseline(isolated_data_dir / "logs"):
        result, pid = _farm_run(matrix)
    assert result.returncode == 0, result.stderr
    [row] = report_rows()
    assert row["measured_blocks"] == 4 and row["busy_blocks_baseline"] == 2, row
    blocks = _block_runs(isolated_data_dir)
    _never_the_farms_own(blocks, pid)
    for runs in blocks.values():
        if runs[0][1] == "baseline":
            assert all(cores >= BUSY_CORES and "python" in top for _, _, cores, top, _, _ in runs)
    text = farm("report").stdout
    assert "busy node: other processes used" in " ".join(text.split())
    if row["busy_blocks_variant"] == 0:  # nothing else ran beside the variant's blocks
        assert "more in the baseline's" in " ".join(text.split())


def test_the_same_job_alone_is_not_flagged(tmp_path: Path, smollm2: Path,
                                           isolated_data_dir: Path) -> None:
    """Alone, a block is busy only where something outside the farm really ran beside it
    (this node is shared): then its runs name it, and it is never the farm's own work."""
    result, pid = _farm_run(_matrix(tmp_path, smollm2))
    assert result.returncode == 0, result.stderr
    [row] = report_rows()
    assert row["measured_blocks"] == 4, row
    blocks = _block_runs(isolated_data_dir)
    _never_the_farms_own(blocks, pid)
    quiet = [block for block, runs in blocks.items()
             if all(cores < BUSY_CORES for _, _, cores, _, _, _ in runs)]
    for block, runs in blocks.items():
        if block not in quiet:
            assert any(top for _, _, _, top, _, _ in runs), runs
    assert row["busy_blocks"] <= len(blocks) - len(quiet)


def test_wait_holds_the_first_block_until_the_hog_ends_and_records_the_wait(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = _matrix(tmp_path, smollm2, **{"busy-node": "wait", "busy-wait": 60})
    hog = _hog(20)  # the farm takes a few seconds to start its first block: most of it waits
    started = time.monotonic()
    try:
        result, _ = _farm_run(matrix)
    finally:
        hog.kill()
        hog.wait()
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started >= 20
    blocks = _block_runs(isolated_data_dir)
    first_wait = blocks[0][0][4]
    assert 6 <= first_wait <= 60, blocks[0]
    assert "waiting up to 60 s for quiet" in result.stderr, result.stderr
    [row] = report_rows()
    assert row["busy_wait_s"] >= first_wait
    assert "blocks waited" in " ".join(farm("report").stdout.split())
