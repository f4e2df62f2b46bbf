"""CPU oracle benchmark (a script, not a test): does draft-mtp pay on this machine's CPU?

Makes the CPU oracle (``workers/setup/mtp_oracles.py``) afresh from the provisioned Qwen3.5
template into a temporary folder, timing it and checking its pinned sha256, then runs
baseline vs ``draft-mtp`` (n-max 2 and 3) on it through ``farm run`` (``-t 2``, 256 tokens
a run, 4 block pairs) with a private data dir, and prints per variant: baseline and
draft-mtp decode tok/s, the speedup with its 95% interval, and the acceptance. The target is
a speedup above 1.3x with acceptance >= 0.95 (every draft is right by construction).

It asserts nothing about speed: it exits 0 on a MISS and non-zero only when a command
fails. It starts llama-server, so run it alone on the CPU:

    flock /tmp/specfarm-cpu.lock .venv/bin/python tests/bench/bench_oracle.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from farm.settings import load_settings
from workers.paths import NodePaths, file_sha256
from workers.setup.mtp_oracles import (
    CPU_ORACLE_DIMS,
    CPU_ORACLE_NAME,
    CPU_ORACLE_TYPE,
    write_cpu_oracle,
)
from workers.setup.provision import PINNED_SHA256, QWEN35_NAME

FARM = Path(sys.executable).with_name("farm")
TARGET_SPEEDUP, TARGET_ACCEPTANCE = 1.3, 0.95


def _matrix(model: Path, n_predict: int, pairs: int) -> dict[str, Any]:
    return {"campaign": "bench-oracle", "build": "cpu", "prompt-mode": "completion",
            "models": [{"name": "oracle-cpu", "path": str(model)}],
            "prompts": [{"id": "greeting", "text": "Hello! How are you today?"}],
            "n-predict": n_predict, "repetitions": 2, "pairs": pairs, "max-pairs": pairs,
            "sampling": {"temperature": 0, "seed": 42},
            "flags": {"ctx-size": 1024, "threads": 2},
            "variants": [{"name": "draft-mtp", "flags": {"spec-type": "draft-mtp",
                                                          "spec-draft-n-max": [2, 3]}}]}


def _farm(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run([str(FARM), *args], capture_output=True, text=True, env=env,
                            check=False)
    if result.returncode != 0:
        raise SystemExit(f"farm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def _print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'variant':<40} {'base tok/s':>10} {'mtp tok/s':>10} {'speedup [95% CI]':>22} "
          f"{'accept':>7}  verdict")
    for row in rows:
        speedup, acceptance = row["speedup"], row["acceptance_rate"]
        verdict = ("PASS" if speedup is not None and speedup > TARGET_SPEEDUP
                   and acceptance is not None and acceptance >= TARGET_ACCEPTANCE else "MISS")
        interval = (f"{speedup:.2f}x [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
                    if speedup is not None else "none")
        print(f"{row['varying_flags']:<40} {row['baseline_tok_s']:>10.1f} "
              f"{row['variant_tok_s']:>10.1f} {interval:>22} {acceptance:>7.3f}  {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-predict", type=int, default=256, help="tokens a run")
    parser.add_argument("--pairs", type=int, default=4, help="block pairs a job (fixed)")
    args = parser.parse_args(argv)
    template = NodePaths.of(load_settings()).models_dir / QWEN35_NAME
    if not template.is_file():
        raise SystemExit(f"{template} is missing: run deploy/setup (or farm provision) first")
    with tempfile.TemporaryDirectory(prefix="bench-oracle-") as workdir:
        model = Path(workdir) / CPU_ORACLE_NAME
        start = time.perf_counter()
        write_cpu_oracle(template, model)
        created = time.perf_counter() - start
        pinned = file_sha256(model) == PINNED_SHA256[CPU_ORACLE_NAME]
        print(f"oracle {CPU_ORACLE_DIMS}, {CPU_ORACLE_TYPE.name}: "
              f"{model.stat().st_size / 1e6:.1f} MB, made in {created:.2f} s, "
              f"sha256 {'as pinned' if pinned else 'NOT the pinned one'}", flush=True)
        matrix = Path(workdir) / "matrix.yaml"
        matrix.write_text(yaml.safe_dump(_matrix(model, args.n_predict, args.pairs)))
        env = {**os.environ, "FARM_DATA_DIR": str(Path(workdir) / "data")}
        start = time.perf_counter()
        _farm("run", str(matrix), env=env)
        print(f"farm run: {time.perf_counter() - start:.0f} s "
              f"({args.pairs} block pairs a job, {args.n_predict} tokens a run)")
        _print_rows(json.loads(_farm("report", "--format", "json", env=env))["jobs"])
    return 0 if pinned else 1


if __name__ == "__main__":
    sys.exit(main())
