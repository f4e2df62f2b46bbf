"""What ``farm board show`` and ``farm board site`` read of a board's store: one row per
job on the board (refused jobs, and jobs not recomputed yet, left out) with the figures
the board computed itself and where the job ran, and one row per bundle with who signed
it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from sqlalchemy import Engine, func, select

from farm.matrix.flags import FlagValue, arm_draft_length, draft_length_flag, to_argv
from farm.matrix.option_names import long_name
from farm.matrix.spec import JobSpec
from farm.stats.history import mean_estimate
from farm.store.board import BoardBundle, BoardJob, BoardKey, BoardRun
from farm.store.models import Job, JobState, Run
from farm.summary import JobSummary, RunFacts, read_summary
from farm.versions import parse_version

JOB_COLUMNS = ["machine", "model", "model_name", "gpu", "backend", "setting", "draft_n_max",
               "build_number", "build_commit", "log_speedup", "log_se", "df",
               "log_variant_tok_s", "variant_tok_s_se", "acceptance", "vram_cost_mb",
               "joules_per_token", "bundle", "job_key", "campaign", "board_key", "kind",
               "flags"]
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


def canonical_flags(spec: JobSpec) -> list[tuple[str, FlagValue]]:
    """The variant's flags, each by its long name (``-ngl`` or the removed ``--draft-max``
    as b11434 reads them: ``farm.matrix.option_names.long_name``), in name order: two
    contributors who typed one setting differently share its row."""
    return sorted(((long_name(name), value) for name, value in spec.variant.flags),
                  key=lambda flag: flag[0])


def setting_text(flags: list[tuple[str, FlagValue]], draft_n_max: int | None = None) -> str:
    """Canonical flags as one text (what a reader would type); with ``draft_n_max``, at
    that draft length (its spec type's length flag set to it, as a prediction reads it)."""
    if draft_n_max is not None:
        flag = draft_length_flag(str(dict(flags).get("spec-type") or ""))
        flags = sorted([*(item for item in flags if item[0] != flag), (flag, str(draft_n_max))],
                       key=lambda item: item[0])
    return " ".join(to_argv(flags))


def _runs(engine: Engine) -> dict[int, dict[str, Any]]:
    """Per job on the board, from its runs, aggregated by the database: the model's sha256,
    the GPU and its memory and the build (the baseline's runs), the variant's mean energy
    per token and its decode tok/s per block (the unit of a job's series,
    ``farm.stats.history``)."""
    on_board = (select(BoardJob.job_id).join(Job, Job.id == BoardJob.job_id)
                .where(BoardJob.refused.is_(None), Job.state == JobState.DONE))
    baseline = (select(Run.job_id, func.min(Run.model_sha256), func.min(Run.gpu_name),
                       func.max(Run.gpu_memory_mb), func.max(Run.server_version),
                       func.min(Run.build_commit))
                .where(Run.job_id.in_(on_board), Run.arm == "baseline").group_by(Run.job_id))
    metric = Run.__table__.c
    energy = (select(Run.job_id, func.avg(metric.joules_per_token))
              .where(Run.job_id.in_(on_board), Run.arm == "variant",
                     metric.joules_per_token.is_not(None)).group_by(Run.job_id))
    blocks = (select(Run.job_id, Run.block, func.avg(metric.decode_tok_s))
              .where(Run.job_id.in_(on_board), Run.arm == "variant", metric.decode_tok_s > 0)
              .group_by(Run.job_id, Run.block).order_by(Run.job_id, Run.block))
    found: dict[int, dict[str, Any]] = {}
    with engine.connect() as connection:
        for job_id, model, gpu, memory, version, commit in connection.execute(baseline):
            found[job_id] = {"model": model, "gpu_name": gpu, "gpu_memory_mb": memory,
                             "build_number": parse_version(version or "")[0],
                             "build_commit": commit}
        for job_id, joules in connection.execute(energy):
            found.setdefault(job_id, {})["energy"] = float(joules)
        for job_id, _, tok_s in connection.execute(blocks):
            found.setdefault(job_id, {}).setdefault("variant_blocks", []).append(float(tok_s))
    return found


def _job_row(job: Mapping[str, Any], spec: JobSpec, runs: Mapping[str, Any]
             ) -> dict[str, Any]:
    from farm.stats.board import normalise_gpu

    summary = read_summary(job["summary"]) or JobSummary()
    facts = summary.facts or RunFacts()
    flags = canonical_flags(spec)
    draft = arm_draft_length(dict(flags))
    speedup = _number(summary.speedup)
    decode = mean_estimate(runs.get("variant_blocks") or [])
    drafted, accepted = facts.drafted, facts.accepted
    peaks = facts.model_dump()  # the run metrics' summaries per arm (farm.run_metrics)
    vram = _number(peaks["peak_vram_mb_variant"]) - _number(peaks["peak_vram_mb_baseline"])
    return {"machine": job["machine_id"], "model": runs.get("model"),
            "model_name": spec.model.name,
            "gpu": normalise_gpu(runs.get("gpu_name"), runs.get("gpu_memory_mb")),
            "backend": backend(runs.get("gpu_name")),
            "setting": setting_text(flags) or spec.variant.name,
            "draft_n_max": math.nan if draft is None else draft,
            "build_number": _number(runs.get("build_number")),
            "build_commit": runs.get("build_commit"),
            "log_speedup": math.log(speedup) if speedup > 0 else math.nan,
            "log_se": _number(summary.log_se), "df": _number(summary.df),
            "log_variant_tok_s": math.log(decode.value) if decode.value > 0 else math.nan,
            "variant_tok_s_se": decode.log_se,
            "acceptance": accepted / drafted if drafted else math.nan,
            "vram_cost_mb": vram, "joules_per_token": _number(runs.get("energy")),
            "bundle": job["sha256"], "job_key": job["source_key"],
            "campaign": spec.campaign, "board_key": job["job_key"], "kind": spec.kind,
            "flags": flags}


def board_jobs(engine: Engine) -> pd.DataFrame:
    """Every job on the board (not refused), one row each (``JOB_COLUMNS``): its variants,
    the board's settings (``kind`` "variant"), and its engine-curve points ("synthetic",
    for ``farm.board.predict``)."""
    query = (select(Job.id, Job.job_key, Job.spec, Job.summary, BoardJob.machine_id,
                    BoardJob.source_key, BoardBundle.sha256)
             .join(BoardJob, BoardJob.job_id == Job.id)
             .join(BoardBundle, BoardBundle.id == BoardJob.bundle_id)
             .where(BoardJob.refused.is_(None), Job.state == JobState.DONE).order_by(Job.id))
    with engine.connect() as connection:
        jobs = [(dict(row), JobSpec.model_validate(row["spec"]))
                for row in connection.execute(query).mappings()]
    runs = _runs(engine) if jobs else {}
    return pd.DataFrame([_job_row(job, spec, runs.get(job["id"], {})) for job, spec in jobs],
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
