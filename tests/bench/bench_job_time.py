"""Where a job's wall time goes (a script, not a test): the Quickstart's three jobs
(`farm run` of examples/smollm2-ngram.yaml and examples/qwen35-mtp-oracle.yaml) and a
default `farm ab` on the CPU MTP oracle (draft-mtp, n-max 3) and on SmolLM2 (n-gram), each
in a private data dir; per job, its pairs and its wall time (the job's start to its end in
the store) split into

    start     each block's server start (launch to /health answering), per arm
    warm-up   each block's warm-up request
    generate  the runs' requests (client end-to-end)
    rest      the remainder: checks, /slots, /metrics and /tokenize around each run, the
              quiet check before each block, the stopping decision, the store's writes

from the runs' ``server_start_s``, ``warmup_s`` and ``e2e_ms`` (docs/results.md). Each
command's own wall time, builds and model checks included, is printed as it ends. It
asserts nothing; run it alone on the CPU:

    flock /tmp/farm-cpu.lock .venv/bin/python -m tests.bench.bench_job_time
    ... --only quickstart --keep /tmp/job-time
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from sqlalchemy import select

from farm.results.runs import runs_frame
from farm.settings import load_settings
from farm.store.db import connected
from farm.store.models import Campaign, Job
from tests.bench.farm_cli import farm, private_store
from workers.paths import NodePaths
from workers.setup.provision import Provisioned, provision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _commands(models: Provisioned) -> dict[str, list[list[str]]]:
    oracle, smollm2 = models.models["qwen35-mtp-oracle-cpu"], models.models["smollm2"]
    return {
        "quickstart": [["run", str(EXAMPLES / "smollm2-ngram.yaml")],
                       ["run", str(EXAMPLES / "qwen35-mtp-oracle.yaml")]],
        "ab-mtp": [["ab", str(oracle), "--prompt-mode", "completion", "--",
                    "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]],
        "ab-ngram": [["ab", str(smollm2), "--", "--spec-type", "ngram-simple"]],
    }


def _split(jobs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per job: pairs, wall seconds and its parts (the module's docstring)."""
    blocks = runs.groupby(["job_id", "arm", "block"], as_index=False).agg(
        start=("server_start_s", "first"), warmup=("warmup_s", "first"),
        generate=("e2e_ms", lambda ms: ms.sum() / 1000.0))
    walls = (pd.to_datetime(jobs["finished_at"]) - pd.to_datetime(jobs["started_at"])
             ).dt.total_seconds()
    rows = []
    for job, wall in zip(jobs.to_dict("records"), walls, strict=True):
        mine = blocks[blocks["job_id"] == job["id"]]
        starts = {arm: mine.loc[mine["arm"] == arm, "start"] for arm in ("baseline", "variant")}
        parts = {"start": float(mine["start"].sum()), "warm-up": float(mine["warmup"].sum()),
                 "generate": float(mine["generate"].sum())}
        rows.append({"job": str(job["job_key"])[:12], "variant": job["variant_name"],
                     "pairs": job["pairs"], "blocks": len(mine), "wall s": float(wall), **parts,
                     "rest": wall - sum(parts.values()),
                     "start/block base": float(starts["baseline"].median()),
                     "start/block var": float(starts["variant"].median())})
    return pd.DataFrame(rows)


def _show(name: str, table: pd.DataFrame) -> None:
    print(f"\n{name}:")
    shown = table.copy()
    for part in ("start", "warm-up", "generate", "rest"):
        shown[part] = [f"{value:.1f} ({value / wall:.0%})"
                       for value, wall in zip(table[part], table["wall s"], strict=True)]
    print(shown.to_string(index=False, float_format=lambda value: f"{value:.2f}"))
    total = table[["wall s", "start", "warm-up", "generate", "rest"]].sum()
    print("all jobs: " + ", ".join(f"{part} {value / total['wall s']:.0%}"
                                   for part, value in total.items() if part != "wall s")
          + f" of {total['wall s']:.0f} s")


def _measure(name: str, commands: list[list[str]], keep: Path | None) -> None:
    with private_store(f"specfarm-job-time-{name}-", keep / name if keep else None) \
            as (workdir, env):
        for args in commands:
            farm(env, *args)
        _show(name, _split(*_read(workdir / "data")))


def _read(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    url = load_settings(data_dir=data_dir).database_url
    with connected(url) as engine, engine.connect() as connection:
        jobs = pd.DataFrame(connection.execute(
            select(Job.id, Job.job_key, Job.variant_name, Job.pairs, Job.started_at,
                   Job.finished_at).join(Campaign).order_by(Job.id)).mappings().all())
        return jobs, runs_frame(engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["quickstart", "ab-mtp", "ab-ngram"], action="append",
                        help="measure only these (repeatable; default all)")
    parser.add_argument("--keep", type=Path, help="keep each data dir under this folder")
    options = parser.parse_args()
    commands = _commands(provision(NodePaths.of(load_settings())))
    for name in options.only or list(commands):
        _measure(name, commands[name], options.keep)


if __name__ == "__main__":
    main()
