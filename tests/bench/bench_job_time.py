"""Where a job's wall time goes (a script, not a test): the Quickstart's three jobs
(`farm run` of examples/smollm2-ngram.yaml and examples/qwen35-mtp-oracle.yaml) and a
default `farm ab` on the CPU MTP oracle (draft-mtp, n-max 3) and on SmolLM2 (n-gram), each
in a private data dir, through each ``--design``: "decision" (`farm ab`'s default; the
Quickstart's matrices with `stop-rule: decision`, from 4 pairs to their 6), "precision"
(`farm ab --stop-rule precision`; the Quickstart's with `stop-rule: precision`, 4 to 6) and
"two-stage" (`farm ab --stop-rule two-stage`, the design before; the Quickstart's fixed 6
pairs), one after the other in each of ``--rounds``; per job, its pairs, its answer (its
stop reason) and its wall time (the job's start to its end in the store) split into

    start     each block's server start (launch to /health answering), per arm
    warm-up   each block's warm-up request
    generate  the runs' requests (client end-to-end)
    rest      the remainder: checks, /slots, /metrics and /tokenize around each run, the
              quiet check before each block, the stopping decision, the store's writes

from the runs' ``server_start_s``, ``warmup_s`` and ``e2e_ms`` (docs/results.md). Each
command's own wall time, builds and model checks included, is printed as it ends. It
asserts nothing; run it alone on the CPU:

    flock /tmp/farm-cpu.lock .venv/bin/python -m tests.bench.bench_job_time
    ... --only quickstart --design decision --keep /tmp/job-time --rounds 3
"""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

import pandas as pd
import yaml
from sqlalchemy import select

from farm.results.runs import runs_frame
from farm.settings import load_settings
from farm.store.db import connected
from farm.store.models import Campaign, Job
from tests.bench.farm_cli import farm, private_store
from workers.paths import NodePaths
from workers.setup.provision import Provisioned, provision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _commands(models: Provisioned, design: str, folder: Path) -> dict[str, list[list[str]]]:
    oracle, smollm2 = models.models["qwen35-mtp-oracle-cpu"], models.models["smollm2"]
    rule = ["--stop-rule", design]
    return {
        "quickstart": [["run", str(_quickstart(name, design, folder))]
                       for name in ("smollm2-ngram.yaml", "qwen35-mtp-oracle.yaml")],
        "ab-mtp": [["ab", str(oracle), "--prompt-mode", "completion", *rule, "--",
                    "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]],
        "ab-ngram": [["ab", str(smollm2), *rule, "--", "--spec-type", "ngram-simple"]],
    }


def _quickstart(name: str, design: str, folder: Path) -> Path:
    """The example matrix as it is (its fixed pairs) for "two-stage", or with the decision
    or precision design from 4 pairs to its fixed number (written to ``folder``, the models
    dir's names kept)."""
    if design == "two-stage":
        return EXAMPLES / name
    matrix = yaml.safe_load((EXAMPLES / name).read_text())
    matrix |= {"stop-rule": design, "pairs": 4, "campaign": f"{matrix['campaign']}-{design}"}
    path = folder / name
    path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    return path


def _split(jobs: pd.DataFrame, runs: pd.DataFrame, report: pd.DataFrame) -> pd.DataFrame:
    """Per job: pairs, answer, speedup (``report``: `farm report --format csv`), wall
    seconds and its parts (the module's docstring)."""
    shown = report.set_index("job_key")
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
                     "pairs": job["pairs"], "answer": job["stop_reason"],
                     "speedup": "{speedup:.2f} [{ci_low:.2f}, {ci_high:.2f}]".format(
                         **shown.loc[job["job_key"], ["speedup", "ci_low", "ci_high"]]),
                     "blocks": len(mine), "wall s": float(wall), **parts,
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
    with private_store("specfarm-job-time-", keep) as (workdir, env):
        for args in commands:
            farm(env, *args)
        report = pd.read_csv(io.StringIO(farm(env, "report", "--all", "--format", "csv")))
        _show(name, _split(*_read(workdir / "data"), report))


def _read(data_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    url = load_settings(data_dir=data_dir).database_url
    with connected(url) as engine, engine.connect() as connection:
        jobs = pd.DataFrame(connection.execute(
            select(Job.id, Job.job_key, Job.variant_name, Job.pairs, Job.stop_reason,
                   Job.started_at, Job.finished_at).join(Campaign).order_by(Job.id)
        ).mappings().all())
        return jobs, runs_frame(engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["quickstart", "ab-mtp", "ab-ngram"], action="append",
                        help="measure only these (repeatable; default all)")
    parser.add_argument("--design", choices=["decision", "precision", "two-stage"],
                        action="append",
                        help="only this design (repeatable; default all three, interleaved)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every design")
    parser.add_argument("--keep", type=Path, help="keep each data dir under this folder")
    options = parser.parse_args()
    models = provision(NodePaths.of(load_settings()))
    with tempfile.TemporaryDirectory(prefix="specfarm-job-time-") as folder:
        for round_ in range(1, options.rounds + 1):
            for design in options.design or ["two-stage", "decision", "precision"]:
                commands = _commands(models, design, Path(folder))
                for name in options.only or list(commands):
                    keep = options.keep / f"{name}-{design}-{round_}" if options.keep else None
                    _measure(f"{name}, {design}, round {round_}", commands[name], keep)


if __name__ == "__main__":
    main()
