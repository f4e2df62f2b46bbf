"""The busy-node threshold on real blocks (a script, not a test): false alarms over idle
blocks, detection over blocks with a one-core busy loop beside them.

Runs one SmolLM2 job (``--threads 1``, one prompt, one 32-token run per block, ``--pairs``
fixed pairs: 2 x pairs blocks) through ``farm run`` on a private store twice: alone, then
with a bounded busy loop (a separate process that ends by itself) for the whole job. For
each it prints the blocks, how many were busy at ``farm.stats.busy.BUSY_CORES``, the other
cores per block (min, median, max) and what the runs named beside them: on a shared node a
"false alarm" that names a real process is other work, not an error. It asserts nothing;
run it alone on the CPU:

    flock /tmp/farm-cpu.lock .venv/bin/python tests/bench/bench_busy.py --pairs 16
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from farm.settings import load_settings
from farm.stats.busy import BUSY_CORES
from tests.bench.farm_cli import farm, private_store
from workers.paths import NodePaths
from workers.setup.provision import provision

SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


def _matrix(model: Path, pairs: int) -> dict[str, object]:
    return {"campaign": "bench-busy", "build": "cpu", "prompt-mode": "completion",
            "models": [{"name": "smollm2", "path": str(model)}],
            "prompts": [{"id": "story", "text": "Once upon a time, in a quiet village,"}],
            "n-predict": 32, "repetitions": 1, "pairs": pairs, "max-pairs": pairs,
            "sampling": {"temperature": 0, "seed": 42},
            "flags": {"ctx-size": 512, "threads": 1},
            "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]}


def _blocks(data: Path) -> list[tuple[int, float, list[list[object]]]]:
    with sqlite3.connect(data / "farm.db") as db:
        rows = db.execute("select block, node_other_cores, e2e_ms, node_top from run "
                          "order by block").fetchall()
    found = {}
    for block, cores, _, top in rows:
        found[block] = (block, float(cores), json.loads(top) if top else [])
    return list(found.values())


def measure(model: Path, pairs: int, hog_s: float | None) -> None:
    """One job, alone or beside a hog, and what its blocks measured."""
    with private_store("bench-busy-", None) as (workdir, env):
        path = workdir / "matrix.yaml"
        path.write_text(yaml.safe_dump(_matrix(model, pairs), sort_keys=False))
        hog = (subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=hog_s)])
               if hog_s else None)
        try:
            farm(env, "run", str(path))
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        blocks = _blocks(workdir / "data")
    cores = [used for _, used, _ in blocks]
    busy = [block for block in blocks if block[1] >= BUSY_CORES]
    named = Counter(str(name) for _, _, top in busy for name, _, _ in top[:1])
    label = "beside a one-core busy loop" if hog_s else "alone"
    print(f"{label}: {len(blocks)} blocks, {len(busy)} busy (>= {BUSY_CORES} core); other "
          f"cores min {min(cores):.3f}, median {statistics.median(cores):.3f}, max "
          f"{max(cores):.3f}; busiest named in busy blocks: {dict(named)}", flush=True)
    print("  per block: " + ", ".join(f"{used:.2f}" for used in cores), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--hog-s", type=float, default=600.0)
    parser.add_argument("--only", choices=("alone", "hog"))
    args = parser.parse_args()
    model = provision(NodePaths.of(load_settings())).models["smollm2"]
    if args.only != "hog":
        measure(model, args.pairs, None)
    if args.only != "alone":
        measure(model, args.pairs, args.hog_s)


if __name__ == "__main__":
    main()
