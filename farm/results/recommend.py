"""``farm recommend``: from a drafter's measured acceptance and the engine's cost curve to
the settings to use, and the matrix that checks them.

A *drafter setting* is what a variant job changes apart from its draft length (spec type,
p-min, ...). For each setting, GPU class, model and prompt category, its runs give an
acceptance profile (``farm.stats.prediction.Profile``: accepted per draft at each position,
prompts as clusters); the engine cost curves of the same build x model x GPU class x spec
type (``farm.results.curve``, from synthetic-acceptance jobs of any campaign in the store)
give what each draft length costs. ``farm.stats.prediction.predict_speedup`` combines the
two. The best candidate of each row is the recommendation when its interval's low end is
above 1, the next one the runner-up; when every candidate is predicted slower than the
baseline, the recommendation is no speculation, and when the best one's interval reaches 1,
no clear gain.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from farm.matrix.flags import LENGTH_FLAGS, draft_length, draft_length_flag, varying_text
from farm.matrix.spec import JobSpec
from farm.results.curve import ENGINE_KEYS, cost_curves, curve_points
from farm.results.rows import job_report
from farm.results.runs import job_designs, runs_frame
from farm.stats.curve import CostCurve
from farm.stats.prediction import INSUFFICIENT, Prediction, Profile, predict_speedup

ALL_CATEGORIES = "(all)"
NO_SPECULATION = "no speculation"
# The best candidate is predicted faster, but its interval reaches 1 (or it has none).
NO_CLEAR_GAIN = "no clear gain"
ROW_KEYS = ["gpu_class", "model", "build", "category"]
PREDICTION_COLUMNS = [*ROW_KEYS, "spec_type", "setting", "draft_n_max", "speedup", "low",
                      "high", "df", "length", "rates", "draft_share", "break_even", "step_cost",
                      "extrapolated", "source_job", "rank"]


def _setting(varying: dict[str, Any]) -> dict[str, str | None]:
    """What a variant changes apart from its draft length."""
    return {name: str(value) for name, value in varying.items()
            if name not in LENGTH_FLAGS and value is not None}


def _setting_text(varying: dict[str, Any]) -> str:
    return varying_text(_setting(varying))


def _profile(runs: pd.DataFrame) -> Profile | None:
    """The acceptance profile of a job's variant runs that have per-position counters, one
    row per prompt (its runs summed: repetitions of a prompt are one cluster)."""
    variant = runs[(runs["arm"] == "variant") & (runs["spec_drafts"].fillna(0) > 0)]
    lists = [list(counts) for counts in variant["spec_accepted_per_pos"]
             if isinstance(counts, list | tuple | np.ndarray) and len(counts) > 0]
    if len(lists) != len(variant) or not lists:
        return None
    positions = min(len(counts) for counts in lists)
    drafts = variant["spec_drafts"].to_numpy(dtype=np.float64)
    tokens = variant["generated_tokens"].to_numpy(dtype=np.float64)
    # The first token comes from the prompt; each drafting step yields its accepted + 1.
    plain = np.maximum(tokens - 1.0 - drafts - variant["spec_accepted"].to_numpy(
        dtype=np.float64), 0.0)
    per_run = pd.DataFrame(np.array([counts[:positions] for counts in lists], dtype=float))
    per_run = per_run.assign(drafts=drafts, plain=plain,
                             prompt=variant["prompt_id"].to_numpy())
    per_prompt = per_run.groupby("prompt", sort=True).sum()
    return Profile(per_prompt["drafts"].to_numpy(dtype=np.float64),
                   per_prompt[list(range(positions))].to_numpy(dtype=np.float64),
                   per_prompt["plain"].to_numpy(dtype=np.float64))


def _drafters(report: pd.DataFrame) -> pd.DataFrame:
    """The campaign's real drafter jobs: variants (not controls, not synthetic) that ran a
    spec type and measured a speedup, those that measured most positions (their draft
    length) first."""
    jobs = report[(report["kind"] == "variant") & report["speedup"].notna()].copy()
    jobs["spec_type"] = jobs["varying"].map(lambda v: v.get("spec-type") or "")
    jobs = jobs[jobs["spec_type"] != ""]
    jobs["setting"] = jobs["varying"].map(_setting_text)
    jobs["measured_n_max"] = jobs["varying"].map(
        lambda v: float(str(draft_length(v))) if draft_length(v) else math.nan)
    return jobs.sort_values(["measured_n_max", "drafted"], ascending=False, na_position="last")


def _sources(jobs: pd.DataFrame, draft_n_max: int) -> pd.Series:
    """Which job's acceptance predicts draft length ``draft_n_max`` of one drafter setting
    (``jobs``, longest first): the job run at that length, whose drafts started where drafts
    of that length start (an n-gram drafter drafting 4 tokens at a time restarts after each
    accepted 4, one drafting 8 does not), else the longest, its first positions."""
    exact = jobs[jobs["measured_n_max"] == draft_n_max]
    return exact.iloc[0] if not exact.empty else jobs.iloc[0]


def _candidates(job: pd.Series, curves: dict[tuple[Any, ...], CostCurve]
                ) -> Iterator[CostCurve]:
    engine = (job["model"], job["gpu_class"], job["build"], job["spec_type"])
    for key, curve in curves.items():
        if tuple(key[:len(ENGINE_KEYS)]) == engine:
            yield curve


def _row(job: pd.Series, category: str, profile: Profile, curve: CostCurve,
         found: Prediction) -> dict[str, Any]:
    return {"gpu_class": job["gpu_class"], "model": job["model"], "build": job["build"],
            "category": category, "spec_type": job["spec_type"], "setting": job["setting"],
            "draft_n_max": curve.draft_n_max, "speedup": found.speedup, "low": found.low,
            "high": found.high, "df": found.df, "length": found.length,
            "rates": [round(rate, 4) for rate in profile.rates],
            "draft_share": profile.draft_share, "break_even": curve.break_even()[0],
            "step_cost": curve.step_cost()[0], "extrapolated": found.extrapolated,
            "source_job": job["job_key"]}


def store_curve_points(engine: Engine) -> pd.DataFrame:
    """The synthetic-acceptance points of every campaign in the store: the engine cost
    curves a recommendation may use."""
    return curve_points(job_report(engine, None))


def predictions(engine: Engine, campaign: str,
                points: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every candidate's predicted speedup: per drafter setting of ``campaign``, GPU class,
    model, prompt category (and all categories together) and draft length of a matching
    engine cost curve (from ``points``, default ``store_curve_points``); ``rank`` 1 is the
    best of its row."""
    return predicted(job_report(engine, campaign), runs_frame(engine, campaign),
                     cost_curves(store_curve_points(engine) if points is None else points))


def predicted(report: pd.DataFrame, runs: pd.DataFrame,
              curves: dict[tuple[Any, ...], CostCurve]) -> pd.DataFrame:
    """``predictions`` from a job report, its jobs' runs and the cost curves to use."""
    rows = []
    for _, jobs in _drafters(report).groupby(["gpu_class", "model", "build", "setting"],
                                             sort=False):
        for curve in _candidates(jobs.iloc[0], curves):
            job = _sources(jobs, curve.draft_n_max)
            job_runs = runs[runs["job_key"] == job["job_key"]]
            groups = [(ALL_CATEGORIES, job_runs), *(
                (str(name), group) for name, group in job_runs.groupby("prompt_category"))]
            for category, group in groups:
                profile = _profile(group)
                if profile is not None:
                    rows.append(_row(job, category, profile, curve,
                                     predict_speedup(profile, curve)))
    frame = pd.DataFrame(rows, columns=PREDICTION_COLUMNS[:-1])
    frame["rank"] = (frame.groupby(ROW_KEYS)["speedup"].rank(ascending=False, method="first")
                     .astype("Int64") if not frame.empty else pd.Series(dtype="Int64"))
    return frame.sort_values([*ROW_KEYS, "rank"], ignore_index=True)[PREDICTION_COLUMNS]


def recommendations(candidates: pd.DataFrame) -> pd.DataFrame:
    """Per GPU class x model x build x category: the best candidate and the runner-up when
    the best one's interval is above 1; else no speculation when even the best is predicted
    slower than the baseline, no clear gain when its interval reaches 1, and insufficient
    data when it has no prediction (``farm.stats.prediction.INSUFFICIENT``: one prompt)."""
    rows = []
    for key, group in candidates.groupby(ROW_KEYS, sort=True):
        ordered = group.sort_values("rank")
        best = ordered.iloc[0]
        slower = bool(best["speedup"] <= 1.0)
        gain = bool(best["low"] > 1.0)
        # No gain: no speculation (or no clear gain) first, the best candidate next to it.
        chosen, runner = (best, ordered.iloc[1] if len(ordered) > 1 else None) if gain else (
            None, best)
        rows.append({
            **dict(zip(ROW_KEYS, key, strict=True)),
            "recommended": (_choice(chosen) if chosen is not None
                            else INSUFFICIENT if math.isnan(best["speedup"])
                            else NO_SPECULATION if slower else NO_CLEAR_GAIN),
            # The baseline's 1.0 where no speculation wins; nothing where nothing was
            # predicted (a consumer of JSON or CSV would read 1.0 as a prediction).
            "speedup": (math.nan if math.isnan(best["speedup"]) else 1.0) if chosen is None
            else chosen["speedup"],
            "low": math.nan if chosen is None else chosen["low"],
            "high": math.nan if chosen is None else chosen["high"],
            "runner_up": "" if runner is None else _choice(runner),
            "runner_up_speedup": math.nan if runner is None else runner["speedup"],
            "why": _why(best, slower),
            "extrapolated": best["extrapolated"],
        })
    return pd.DataFrame(rows, columns=[*ROW_KEYS, "recommended", "speedup", "low", "high",
                                       "runner_up", "runner_up_speedup", "why",
                                       "extrapolated"])


def _choice(row: pd.Series) -> str:
    return f"{row['setting']} {draft_length_flag(row['spec_type'])}={int(row['draft_n_max'])}"


def _why(best: pd.Series, slower: bool) -> str:
    rates = ", ".join(f"{rate:.2f}" for rate in best["rates"])
    text = (f"acceptance per position [{rates}]; at n-max {int(best['draft_n_max'])} "
            f"{best['length']:.2f} tokens a step vs break-even {best['break_even']:.2f}; "
            f"a step costs {best['step_cost']:.2f} plain steps")
    if best["draft_share"] < 0.99:
        text += f"; {100 * best['draft_share']:.0f}% of steps drafted"
    if slower:
        text = f"every candidate is predicted slower (best {best['speedup']:.2f}x): " + text
    return text


# --- the matrix that checks a recommendation ---------------------------------------------

# A verification's design: ±3% measured is what a check needs. A first stage of 12 pairs
# (a crossover spread on 10 df) plans the pairs that meet ±2.5% with probability 0.9 under
# steady noise (``Design.assurance``); the slack to ±3% is for a machine whose noise moves
# between the stages (a first stage of 8 planning from its spread for ±2% gave 23 pairs
# that measured ±3.8% on this CPU). Up to 48 pairs where pairs spread ~9%, as on 2 CPU
# cores (12 pairs gave ±4-5%; ±3% needs about 40).
VERIFY_FIRST_STAGE = 12
VERIFY_TARGET = 0.025
VERIFY_ASSURANCE = 0.9
VERIFY_MAX_PAIRS = 48


def verify_matrix(engine: Engine, campaign: str, chosen: pd.DataFrame) -> dict[str, Any]:
    """A matrix that runs the recommended and runner-up settings of ``chosen`` (rows of
    ``predictions`` for one model and build) against the baseline, on the source jobs'
    prompts, builds and flags, with a two-stage design (``VERIFY_FIRST_STAGE``) that plans
    for ``VERIFY_TARGET`` with ``VERIFY_ASSURANCE`` and may run up to ``VERIFY_MAX_PAIRS``
    pairs to reach it (the default 12 stop short on a noisy machine)."""
    from farm.store.models import Job

    keys = list(dict.fromkeys(chosen["source_job"]))
    with engine.connect() as connection:
        specs = {row.job_key: JobSpec.model_validate(row.spec) for row in connection.execute(
            select(Job.job_key, Job.spec).where(Job.job_key.in_(keys)))}
    first = specs[keys[0]]
    variants: list[dict[str, Any]] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for _, row in chosen.iterrows():
        source = specs[row["source_job"]]
        baseline = dict(source.baseline.flags)
        flags: dict[str, Any] = {name: value for name, value in source.variant.flags
                                 if name not in LENGTH_FLAGS and baseline.get(name) != value}
        flags[draft_length_flag(row["spec_type"])] = int(row["draft_n_max"])
        identity = tuple(sorted((name, str(value)) for name, value in flags.items()))
        if identity in seen:
            continue
        seen.add(identity)
        name = f"{row['spec_type']}-n{int(row['draft_n_max'])}"
        taken = {variant["name"] for variant in variants}
        variants.append({"name": name if name not in taken else f"{name}-{len(variants) + 1}",
                         "flags": flags})
    model = {"name": first.model.name,
             **({"path": first.model.path} if first.model.path else {"file": first.model.file})}
    return {
        "campaign": f"{campaign}-verify",
        "gpu-classes": sorted(set(chosen["gpu_class"])),
        # By name, as `farm run` and a worker run it without an opt-in: a binary the source
        # campaign named by path is registered once (`farm build NAME --binary PATH`).
        "build": first.build.name,
        "models": [model],
        "prompt-mode": first.prompt_mode,
        "prompts": [{"id": p.id, "category": p.category, "text": p.text}
                    for p in first.prompts],
        "n-predict": first.n_predict,
        "stop": first.stop,
        "repetitions": first.repetitions,
        "pairs": VERIFY_FIRST_STAGE, "max-pairs": VERIFY_MAX_PAIRS, "target-ci": VERIFY_TARGET,
        "target-assurance": VERIFY_ASSURANCE,
        "sampling": {key.replace("_", "-"): value for key, value in first.sampling.items()},
        "flags": {name: value for name, value in first.baseline.flags},
        "variants": variants,
    }


def check(engine: Engine, candidates: pd.DataFrame, verify_campaign: str) -> pd.DataFrame:
    """Predicted vs measured for every candidate the verification campaign ran: per GPU
    class, model, build, category and setting, the prediction, the measured speedup with
    its interval and half-width, and a verdict: "inside" the measured interval, "within 5%"
    of the measured speedup, or "off"."""
    from farm.results.groups import category_report

    report = job_report(engine, verify_campaign)
    runs = runs_frame(engine, verify_campaign)
    measured = report[report["kind"] == "variant"].copy()
    measured["setting"] = measured["varying"].map(_setting_text)
    measured["draft_n_max"] = measured["varying"].map(lambda v: int(str(draft_length(v) or 0)))
    per_category = category_report(runs, report, job_designs(engine, verify_campaign)).rename(
        columns={"estimate": "speedup", "low": "ci_low", "high": "ci_high"})
    overall = measured[["job_key", "speedup", "ci_low", "ci_high"]].assign(
        category=ALL_CATEGORIES)
    found = pd.concat([overall, per_category[["job_key", "category", "speedup", "ci_low",
                                              "ci_high"]]], ignore_index=True)
    found = found.merge(measured[["job_key", "gpu_class", "model", "build", "setting",
                                  "draft_n_max"]], on="job_key")
    joined = candidates.merge(found, on=[*ROW_KEYS, "setting", "draft_n_max"],
                              suffixes=("", "_measured"))
    joined["half_width"] = (joined["ci_high"] - joined["ci_low"]) / 2 / joined["speedup_measured"]
    joined["verdict"] = [
        "inside" if low <= predicted <= high
        else "within 5%" if abs(predicted / value - 1.0) <= 0.05 else "off"
        for predicted, value, low, high in zip(joined["speedup"], joined["speedup_measured"],
                                               joined["ci_low"], joined["ci_high"], strict=True)]
    return joined[[*ROW_KEYS, "setting", "draft_n_max", "rank", "speedup", "low", "high",
                   "speedup_measured", "ci_low", "ci_high", "half_width", "verdict",
                   "extrapolated"]]
