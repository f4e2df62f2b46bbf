"""What ``farm board show`` and ``farm board site`` read of a board's store: one row per
job on the board (refused jobs left out) with the figures the board computed itself and
where the job ran, and one row per bundle with who signed it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from sqlalchemy import Engine, func, select

from farm.matrix.spec import JobSpec
from farm.stats.history import mean_estimate
from farm.store.board import BoardBundle, BoardJob, BoardKey, BoardRun
from farm.store.models import Job, Run
from farm.versions import parse_version

JOB_COLUMNS = ["machine", "model", "model_name", "gpu", "backend", "setting", "draft_n_max",
               "build_number", "build_commit", "log_speedup", "log_se", "df",
               "log_variant_tok_s", "variant_tok_s_se", "acceptance", "vram_cost_mb",
               "joules_per_token", "bundle", "job_key", "campaign"]
BUNDLE_COLUMNS = ["sha256", "machine", "signed", "campaigns", "jobs", "runs", "refused",
                  "differences", "created_at", "added_at"]


def backend(gpu_name: str | None) -> str:
    """The backend a run's device implies: the GPU's vendor's (CUDA, ROCm, Metal), CPU
    where no GPU was seen."""
    if not gpu_name:
        return "CPU"
    name = gpu_name.lower()
    for vendor, kind in (("nvidia", "CUDA"), ("amd", "ROCm"), ("radeon", "ROCm"),
                         ("apple", "Metal")):
        if vendor in name:
            return kind
    return "GPU"


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _setting(spec: JobSpec) -> tuple[str, float]:
    """The variant's flags as one text (what a reader would type), and its draft length."""
    flags = dict(spec.variant.flags)
    draft = flags.get("spec-draft-n-max")
    text = " ".join(spec.variant.argv) or spec.variant.name
    return text, float(draft) if isinstance(draft, int | float | str) and str(draft).isdigit() \
        else math.nan


def _runs(engine: Engine, job_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per job, from its runs: the model's sha256 and file, the GPU and its memory, the
    build, the variant's energy per token and its decode tok/s per block (the unit of a
    job's series, ``farm.stats.history``)."""
    query = (select(Run.job_id, Run.arm, Run.model_sha256, Run.model_file, Run.gpu_name,
                    Run.gpu_memory_mb, Run.server_version, Run.build_commit,
                    Run.joules_per_token)
             .where(Run.job_id.in_(job_ids)))
    found: dict[int, dict[str, Any]] = {}
    with engine.connect() as connection:
        for row in connection.execute(query).mappings():
            job = found.setdefault(row["job_id"], {"energy": []})
            if row["arm"] == "baseline" or "model" not in job:
                number, _ = parse_version(row["server_version"] or "")
                job.update(model=row["model_sha256"], model_file=row["model_file"],
                           gpu_name=row["gpu_name"], gpu_memory_mb=row["gpu_memory_mb"],
                           build_number=number, build_commit=row["build_commit"])
            if row["arm"] == "variant" and row["joules_per_token"] is not None:
                job["energy"].append(float(row["joules_per_token"]))
        blocks = (select(Run.job_id, Run.block, func.avg(Run.decode_tok_s))
                  .where(Run.job_id.in_(job_ids), Run.arm == "variant", Run.decode_tok_s > 0)
                  .group_by(Run.job_id, Run.block).order_by(Run.job_id, Run.block))
        for job_id, _, tok_s in connection.execute(blocks):
            found.setdefault(job_id, {"energy": []}).setdefault("variant_blocks", []).append(
                float(tok_s))
    return found


def _job_row(job: Mapping[str, Any], runs: Mapping[str, Any]) -> dict[str, Any]:
    from farm.stats.board import normalise_gpu

    spec = JobSpec.model_validate(job["spec"])
    summary = job["summary"] or {}
    facts = summary.get("facts") or {}
    setting, draft = _setting(spec)
    speedup = _number(summary.get("speedup"))
    decode = mean_estimate(runs.get("variant_blocks") or [])
    drafted, accepted = facts.get("drafted") or 0, facts.get("accepted") or 0
    vram = (_number(facts.get("peak_vram_mb_variant"))
            - _number(facts.get("peak_vram_mb_baseline")))
    energy = runs.get("energy") or []
    return {"machine": job["machine_id"], "model": runs.get("model"),
            "model_name": spec.model.name,
            "gpu": normalise_gpu(runs.get("gpu_name"), runs.get("gpu_memory_mb")),
            "backend": backend(runs.get("gpu_name")), "setting": setting,
            "draft_n_max": draft, "build_number": _number(runs.get("build_number")),
            "build_commit": runs.get("build_commit"),
            "log_speedup": math.log(speedup) if speedup > 0 else math.nan,
            "log_se": _number(summary.get("log_se")), "df": _number(summary.get("df")),
            "log_variant_tok_s": math.log(decode.value) if decode.value > 0 else math.nan,
            "variant_tok_s_se": decode.log_se,
            "acceptance": accepted / drafted if drafted else math.nan,
            "vram_cost_mb": vram, "joules_per_token": sum(energy) / len(energy) if energy
            else math.nan, "bundle": job["sha256"], "job_key": job["source_key"],
            "campaign": spec.campaign}


def board_jobs(engine: Engine) -> pd.DataFrame:
    """Every job on the board (not refused), one row each (``JOB_COLUMNS``)."""
    query = (select(Job.id, Job.spec, Job.summary, BoardJob.machine_id, BoardJob.source_key,
                    BoardBundle.sha256)
             .join(BoardJob, BoardJob.job_id == Job.id)
             .join(BoardBundle, BoardBundle.id == BoardJob.bundle_id)
             .where(BoardJob.refused.is_(None)).order_by(Job.id))
    with engine.connect() as connection:
        jobs = [dict(row) for row in connection.execute(query).mappings()]
    runs = _runs(engine, [job["id"] for job in jobs]) if jobs else {}
    return pd.DataFrame([_job_row(job, runs.get(job["id"], {})) for job in jobs],
                        columns=JOB_COLUMNS)


def board_bundles(engine: Engine) -> pd.DataFrame:
    """Every bundle on the board: its machine, who signed it (a known key's name, an
    unknown key, or unsigned), what it brought and what the board refused of it."""
    jobs = (select(BoardJob.bundle_id, func.count().label("jobs"),
                   func.count(BoardJob.refused).label("refused"),
                   func.count(BoardJob.differences).label("differences"))
            .group_by(BoardJob.bundle_id).subquery())
    runs = (select(BoardRun.bundle_id, func.count().label("runs"))
            .group_by(BoardRun.bundle_id).subquery())
    query = (select(BoardBundle.sha256, BoardBundle.machine_id, BoardBundle.signer,
                    BoardBundle.campaigns, BoardBundle.created_at, BoardBundle.added_at,
                    BoardKey.name, jobs.c.jobs, jobs.c.refused, jobs.c.differences,
                    runs.c.runs)
             .outerjoin(BoardKey, BoardKey.fingerprint == BoardBundle.signer)
             .outerjoin(jobs, jobs.c.bundle_id == BoardBundle.id)
             .outerjoin(runs, runs.c.bundle_id == BoardBundle.id)
             .order_by(BoardBundle.id))
    rows = []
    with engine.connect() as connection:
        for found in connection.execute(query).mappings():
            signed = ("unsigned" if found["signer"] is None else f"known: {found['name']}"
                      if found["name"] else f"unknown key {found['signer']}")
            rows.append({"sha256": found["sha256"], "machine": found["machine_id"],
                         "signed": signed, "campaigns": list(found["campaigns"]),
                         "jobs": found["jobs"] or 0, "runs": found["runs"] or 0,
                         "refused": found["refused"] or 0,
                         "differences": found["differences"] or 0,
                         "created_at": found["created_at"], "added_at": found["added_at"]})
    return pd.DataFrame(rows, columns=BUNDLE_COLUMNS)
