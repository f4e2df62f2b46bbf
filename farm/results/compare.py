"""``farm compare``: two campaigns (or two builds of one) side by side, job by matching job.

Jobs match on ``job.comparable_key``, stored when the job was created from
``JobSpec.comparable_key``: what the job measures, without its campaign, its build or its
design, so that the same experiment run again next month, on another build, or for more
pairs, lines up with the first.
"""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Engine, select

from farm.errors import ConfigError
from farm.results.rows import job_report
from farm.store.models import Campaign, Job

_MEASURED = ["speedup", "ci_low", "ci_high", "baseline_tok_s", "variant_tok_s",
             "acceptance_rate"]


def _side(engine: Engine, campaign: str, build: str | None) -> pd.DataFrame:
    report = job_report(engine, campaign)
    query = (select(Job.job_key, Job.comparable_key.label("key"))
             .join(Campaign).where(Campaign.name == campaign))
    with engine.connect() as connection:
        keys = pd.DataFrame(connection.execute(query).mappings().all(),
                            columns=["job_key", "key"])
    # A job without a key was stored with a spec this farm cannot read: nothing matches it.
    side = report.merge(keys, on="job_key").dropna(subset=["key"])
    if build is not None:
        side = side[side["build"] == build]
        if side.empty:
            raise ConfigError(f"campaign {campaign!r} has no job on build {build!r}")
    return side


def _verdict(row: pd.Series) -> str:
    a_low, a_high = row["ci_low_a"], row["ci_high_a"]
    b_low, b_high = row["ci_low_b"], row["ci_high_b"]
    if any(pd.isna(value) for value in (a_low, a_high, b_low, b_high)):
        return "no interval"
    if b_low > a_high:
        return "faster"
    if b_high < a_low:
        return "regression"
    return "within noise"


def compare(engine: Engine, a: str, b: str, *, build_a: str | None = None,
            build_b: str | None = None) -> pd.DataFrame:
    """Matching jobs of A and B with both speedups, the change and whether it is outside
    the noise (the two 95% intervals do not overlap)."""
    left, right = _side(engine, a, build_a), _side(engine, b, build_b)
    merged = left[["key", "model", "variant", "varying_flags", "build", *_MEASURED]].merge(
        right[["key", "build", *_MEASURED]], on="key", suffixes=("_a", "_b"))
    if left["key"].duplicated().any() and right["key"].duplicated().any():
        # Both sides ran each job on several builds: compare each build with itself.
        merged = merged[merged["build_a"] == merged["build_b"]]
    if merged.empty:
        raise ConfigError(f"no job of {a!r} matches one of {b!r}: compare runs of the same "
                          "experiment (same models, flags, prompts, sampling and GPU class)")
    merged["change"] = merged["speedup_b"] / merged["speedup_a"]
    merged["baseline_change"] = merged["baseline_tok_s_b"] / merged["baseline_tok_s_a"]
    merged["verdict"] = merged.apply(_verdict, axis=1)
    return merged.reset_index(drop=True)
