"""``farm compare``: two campaigns (or two builds) side by side, job by matching job.

Jobs match on a comparability key: the job's identity without the campaign and the build
names, so the same experiment run again next month, or on another build, lines up.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pandas as pd
from rich.table import Table
from sqlalchemy import Engine, select

from farm.analysis import job_report
from farm.errors import ConfigError
from farm.store.models import Campaign, Job

_NOT_COMPARED = ("campaign", "job_key")


def comparability_key(spec: dict[str, Any]) -> str:
    """sha256 of a job spec without campaign, build names and machine-local paths."""
    identity = {key: value for key, value in spec.items() if key not in _NOT_COMPARED}
    identity["model"] = spec["model"]["name"]
    for role in ("baseline", "variant"):
        identity[role] = {"name": spec[role]["name"], "flags": spec[role]["flags"]}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _side(engine: Engine, campaign: str, build: str | None) -> pd.DataFrame:
    report = job_report(engine, campaign)
    with engine.connect() as connection:
        rows = connection.execute(select(Job.job_key, Job.spec, Job.build_name).join(Campaign)
                                  .where(Campaign.name == campaign)).all()
    keys = {job_key: (comparability_key(_json(spec)), build_name)
            for job_key, spec, build_name in rows}
    report["key"] = report["job_key"].map(lambda k: keys[k][0])
    report["build"] = report["job_key"].map(lambda k: keys[k][1])
    if build is not None:
        report = report[report["build"] == build]
        if report.empty:
            raise ConfigError(f"campaign {campaign!r} has no job on build {build!r}")
    return report


def _json(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


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
    columns = ["key", "model", "variant", "varying_flags", "speedup", "ci_low", "ci_high",
               "baseline_tok_s", "variant_tok_s", "acceptance_rate"]
    merged = left[columns].merge(right[columns], on=["key", "model", "variant",
                                                     "varying_flags"], suffixes=("_a", "_b"))
    if merged.empty:
        raise ConfigError(f"no job of {a!r} matches one of {b!r}: compare runs of the same "
                          "matrix (same models, flags, prompts and design)")
    merged["change"] = merged["speedup_b"] / merged["speedup_a"]
    merged["baseline_change"] = merged["baseline_tok_s_b"] / merged["baseline_tok_s_a"]
    merged["verdict"] = merged.apply(_verdict, axis=1)
    return merged


def compare_table(frame: pd.DataFrame, a: str, b: str) -> Table:
    table = Table(title=f"{a} -> {b}", title_justify="left")
    for header in ("model", "variant", "varying flags", f"speedup {a}", f"speedup {b}",
                   "change", "baseline tok/s", "verdict"):
        table.add_column(header, justify="left" if header in ("model", "variant",
                                                              "varying flags") else "right")
    for row in frame.to_dict(orient="records"):
        table.add_row(str(row["model"]), str(row["variant"]), str(row["varying_flags"]),
                      _interval(row, "a"), _interval(row, "b"), f"{row['change']:.2f}x",
                      f"{row['baseline_tok_s_a']:.1f} -> {row['baseline_tok_s_b']:.1f}",
                      str(row["verdict"]))
    return table


def _interval(row: dict[Any, Any], side: str) -> str:
    low, high = row[f"ci_low_{side}"], row[f"ci_high_{side}"]
    text = f"{row[f'speedup_{side}']:.2f}x"
    if low is None or high is None or math.isnan(low):
        return text
    return f"{text} [{low:.2f}, {high:.2f}]"
