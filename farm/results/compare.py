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
from farm.stats.difference import adjusted_p_values, difference, verdicts
from farm.stats.intervals import NAN
from farm.store.models import Campaign, Job

_MEASURED = ["speedup", "ci_low", "ci_high", "log_se", "df", "baseline_tok_s",
             "variant_tok_s", "acceptance_rate"]


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


def _tested(merged: pd.DataFrame) -> pd.DataFrame:
    """Each matching job's change with its interval and p value (``difference`` of the two
    log speedups), and the verdict at a false discovery rate of ``FDR`` across the jobs
    compared (Benjamini-Hochberg): "faster", "regression", "within noise", or "no
    interval" where a side has no standard error."""
    import math

    found = [difference(math.log(a), float(se_a), float(df_a), math.log(b), float(se_b),
                        float(df_b))
             if a > 0 and b > 0 else difference(NAN, NAN, NAN, NAN, NAN, NAN)
             for a, se_a, df_a, b, se_b, df_b in zip(
                 merged["speedup_a"].astype(float), merged["log_se_a"].astype(float),
                 merged["df_a"].astype(float), merged["speedup_b"].astype(float),
                 merged["log_se_b"].astype(float), merged["df_b"].astype(float), strict=True)]
    p_values = [change.p_value for change in found]
    merged["change_low"] = [change.low for change in found]
    merged["change_high"] = [change.high for change in found]
    merged["p_value"] = p_values
    merged["q_value"] = adjusted_p_values(p_values)
    merged["verdict"] = verdicts([change.change for change in found], p_values, "faster",
                                 "regression")
    return merged


def compare(engine: Engine, a: str, b: str, *, build_a: str | None = None,
            build_b: str | None = None) -> pd.DataFrame:
    """Matching jobs of A and B with both speedups, the change (B over A) with its interval
    and p value, and whether it changed: the test of a difference of the two log speedups
    (``farm.stats.difference``), its false discovery rate held at 5% across the jobs
    compared."""
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
    return _tested(merged.reset_index(drop=True))
