"""The board's statistics: many machines' jobs combined per model x GPU x backend x setting,
with machines as random effects, and the best setting per model x GPU x backend.

A machine is the unit: two jobs of one machine share its GPU's clock, its cooling, its
driver and its other load, so they are not two independent looks at what a GPU of this kind
gets. Each machine's jobs of a cell are pooled first (``pool_jobs`` over them; one job is
its own interval), then ``pool_jobs`` combines the machines (DerSimonian-Laird between-
machine variance, Hartung-Knapp-Sidik-Jonkman t interval on machines - 1 df).

``board_rows`` reads one row per accepted job, with these columns:

    machine            the contributing machine's id (a random id per data dir)
    model, model_name  the model file's sha256, and a name to show
    gpu                ``normalise_gpu``'s name ("H200 · 140 GiB", "CPU")
    backend            "CUDA", "CPU", ...
    setting            the variant's flags as one canonical text
    draft_n_max        the draft length (float, NaN if none)
    build_number       the llama.cpp build number (NaN if unknown)
    log_speedup, log_se, df
                       the job's log speedup, the standard error of that log and its df
    log_variant_tok_s, variant_tok_s_se
                       the log of the variant's decode tok/s and its standard error (on
                       the job's ``df``; NaN if unknown)
    acceptance         accepted over drafted (NaN if none)
    vram_cost_mb       the variant's peak VRAM less the baseline's, MiB (NaN if not measured)
    joules_per_token   the variant's energy per token (NaN if not measured)
    bundle             the bundle the job came from (an id, or a list of ids)

``board_rows`` returns one row per model x gpu x backend x setting (``ROW_COLUMNS``):

    model, model_name, gpu, backend, setting
    draft_n_max        the setting's draft length (the median of its jobs'; NaN if none)
    machines, jobs     the machines and jobs whose speedup entered the interval (a job
                       without a standard error, fewer than two pairs, does not)
    speedup, low, high the typical speedup of a machine of this kind, its 95% interval
    log_se, df         that interval's standard error of the log and its df
    tau                the between-machine SD of log speedups (NaN for one machine)
    one_machine        True: the interval is one machine's own (see below)
    decode_tok_s, decode_low, decode_high
                       the variant's typical decode tok/s, its 95% interval, made alike
    acceptance, vram_cost_mb, joules_per_token
                       means over machines (each machine the mean of its jobs)
    build_min, build_max
                       the range of llama.cpp builds behind the row (NaN if unknown)
    bundles            the sorted ids of the bundles behind the row
    predicted, predicted_low, predicted_high, predicted_machines
                       ``farm recommend``'s prediction for the setting and its machines
                       (``pool_predictions``; NaN where no engine curve predicts it)

``best_settings`` returns one row per model x gpu x backend (``BEST_COLUMNS``):

    model, model_name, gpu, backend
    setting, draft_n_max, machines
                       the setting with the highest speedup among those with one
    settings           m, the settings compared
    speedup, low, high its speedup and best-of-m interval
    runner_up, runner_up_speedup
                       the next best setting (None and NaN when m is 1)
    ahead, ahead_low, ahead_high
                       best over runner-up, with the test's interval
    beats              True: the best is named, its lead over the runner-up is real
    build_min, build_max, bundles
                       over the best's and the runner-up's rows
    recommended, recommended_speedup, recommended_low, recommended_high
                       the setting ``farm recommend`` predicts fastest for the group,
                       measured or not, and its prediction (None and NaN without one)

What the intervals mean:

* ``low``-``high`` of a row covers, 95% of the time, the typical speedup of a machine with
  this GPU and backend running this setting: the centre of the machines' spread, not any
  one machine's speedup (a single machine lies within about ``tau`` of it on the log scale).
  It narrows with more machines and widens when machines disagree.
* With one machine (``one_machine``), the interval is that machine's own: its jobs pooled,
  or its one job's paired interval. It says how well that machine was measured and nothing
  of how machines differ, so it is narrower than a many-machine one would be.
* ``decode_low``-``decode_high`` is the same for the variant's decode tok/s. Without
  standard errors for it, the point is the geometric mean over machines with no interval.
* The best's ``low``-``high`` allows for the pick: each of the m settings' intervals at
  level 1 - 0.05 / m (Bonferroni), so the one that looked best still covers 95% of the time
  (``farm.stats.intervals.best_of_interval``); a plain interval of a best-of-m pick does not.
* ``beats`` tests the best's log speedup minus the runner-up's (``farm.stats.difference``:
  independent estimates, Welch-Satterthwaite df) at level 1 - 0.05 / (m - 1), Bonferroni
  over the m - 1 settings the best had to beat. The same machines measure both settings, so
  the two estimates are positively correlated and treating them as independent overstates
  the difference's error: the test errs on the side of naming no best.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.stats.difference import difference
from farm.stats.frame import NAN, Floats
from farm.stats.intervals import best_of_interval
from farm.stats.pooling import Pooled, pool_jobs

# The error rate of the best-of interval (over the m settings) and of naming a best (over
# the m - 1 others).
ALPHA = 0.05

JOB_COLUMNS = ("machine", "model", "model_name", "gpu", "backend", "setting", "draft_n_max",
               "build_number", "log_speedup", "log_se", "df", "log_variant_tok_s",
               "variant_tok_s_se", "acceptance", "vram_cost_mb", "joules_per_token", "bundle")
CELL = ["model", "gpu", "backend", "setting"]
GROUP = ["model", "gpu", "backend"]
MEANS = ("acceptance", "vram_cost_mb", "joules_per_token")
NUMBERS = ("draft_n_max", "build_number", "log_speedup", "log_se", "df", "log_variant_tok_s",
           "variant_tok_s_se", *MEANS)
PREDICTED = ["predicted", "predicted_low", "predicted_high", "predicted_machines"]
ROW_COLUMNS = ["model", "model_name", "gpu", "backend", "setting", "draft_n_max", "machines",
               "jobs", "speedup", "low", "high", "log_se", "df", "tau", "one_machine",
               "decode_tok_s", "decode_low", "decode_high", *MEANS, "build_min",
               "build_max", "bundles", *PREDICTED]
RECOMMENDED = ["recommended", "recommended_speedup", "recommended_low", "recommended_high"]
BEST_COLUMNS = ["model", "model_name", "gpu", "backend", "setting", "draft_n_max",
                "machines", "settings", "speedup", "low", "high", "runner_up",
                "runner_up_speedup", "ahead", "ahead_low", "ahead_high", "beats",
                "build_min", "build_max", "bundles", *RECOMMENDED]
# One machine's prediction of a setting (``farm.board.predict``), and the pooled ones.
MACHINE_PREDICTION = [*CELL, "draft_n_max", "machine", "log_speedup", "log_se", "df"]
PREDICTION_COLUMNS = [*CELL, "draft_n_max", *PREDICTED]

# Words of a GPU's name that say the vendor or a brand, not which GPU it is.
_VENDOR_WORDS = {"nvidia", "geforce", "amd", "intel", "intel(r)", "(r)", "(tm)"}
# A memory size in the name ("H100 80GB HBM3", "A100-SXM4-40GB"), as NVML reports some.
_MEMORY_IN_NAME = re.compile(r"[-_ ]?(\d+)\s*GB\b", re.IGNORECASE)


def normalise_gpu(name: str | None, memory_mb: float | None) -> str:
    """The board's name of a GPU: the model without vendor words, a middle dot, then its
    memory in GiB (rounded; from ``memory_mb`` in MiB, else from a size in the name);
    "CPU" without a GPU. "NVIDIA H200" with 143771 MiB is "H200 · 140 GiB"."""
    if name is None or not name.strip():
        return "CPU"
    found = _MEMORY_IN_NAME.search(name)
    words = [word for word in _MEMORY_IN_NAME.sub(" ", name).split()
             if word.lower() not in _VENDOR_WORDS]
    model = " ".join(words) or name.strip()
    if memory_mb is not None and math.isfinite(memory_mb) and memory_mb > 0:
        return f"{model} · {math.floor(memory_mb / 1024 + 0.5)} GiB"
    if found is not None:
        return f"{model} · {int(found.group(1))} GiB"
    return model


def board_rows(jobs: pd.DataFrame, predictions: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per model x gpu x backend x setting: the speedup and decode tok/s with their
    random-effects intervals over machines, the means over machines, the build range and the
    bundles behind it (the module docstring lists the columns and what the intervals mean),
    and ``farm recommend``'s prediction of the setting where ``predictions``
    (``pool_predictions``) has one. Builds are not a key: a row spans the builds in
    ``build_min``-``build_max``."""
    missing = [column for column in JOB_COLUMNS if column not in jobs.columns]
    if missing:
        raise ValueError(f"board_rows needs the jobs' columns {', '.join(missing)}")
    numbers = {column: _floats(jobs[column]) for column in NUMBERS}
    numbers["machine"] = pd.factorize(jobs["machine"], use_na_sentinel=False)[0].astype(float)
    cells = jobs.groupby(CELL, sort=True, dropna=False).ngroup().to_numpy()
    order = np.argsort(cells, kind="stable")
    splits = np.flatnonzero(np.diff(cells[order])) + 1
    names = jobs[[*CELL, "model_name"]].to_numpy()
    bundles = jobs["bundle"].to_numpy()
    rows = pd.DataFrame(
        [{**dict(zip([*CELL, "model_name"], names[positions[0]], strict=True)),
          **_row({column: values[positions] for column, values in numbers.items()}),
          "bundles": _bundles(bundles[positions])}
         for positions in np.split(order, splits) if positions.size],
        columns=[column for column in ROW_COLUMNS if column not in PREDICTED])
    if predictions is None or predictions.empty or rows.empty:
        return rows.assign(**{column: NAN for column in PREDICTED})[ROW_COLUMNS]
    return rows.merge(predictions[[*CELL, *PREDICTED]], on=CELL, how="left")[ROW_COLUMNS]


def pool_predictions(machines: pd.DataFrame) -> pd.DataFrame:
    """``farm recommend``'s predictions (``MACHINE_PREDICTION``: one per machine and setting
    at a draft length, on the log scale) per model x gpu x backend x setting, machines as
    random effects as a row's speedup (``PREDICTION_COLUMNS``): what a typical machine of
    this GPU is predicted to get, each machine's prediction from its own acceptance and
    its own engine cost curve."""
    rows = []
    for key, group in machines.groupby(CELL, sort=True, dropna=False):
        machine = pd.factorize(group["machine"], use_na_sentinel=False)[0].astype(float)
        pooled = _over_machines(_floats(group["log_speedup"]), _floats(group["log_se"]),
                                _floats(group["df"]), machine)
        if math.isfinite(pooled.estimate):
            rows.append({**dict(zip(CELL, key, strict=True)),
                         "draft_n_max": float(group["draft_n_max"].iloc[0]),
                         "predicted": pooled.estimate, "predicted_low": pooled.low,
                         "predicted_high": pooled.high, "predicted_machines": pooled.jobs})
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)


def _row(cell: dict[str, Floats]) -> dict[str, object]:
    """One cell's figures from its jobs' numbers (``NUMBERS`` and ``machine``)."""
    machine = cell["machine"]
    speedup = _over_machines(cell["log_speedup"], cell["log_se"], cell["df"], machine)
    builds = cell["build_number"][np.isfinite(cell["build_number"])]
    draft = cell["draft_n_max"][np.isfinite(cell["draft_n_max"])]
    return {
        "draft_n_max": float(np.median(draft)) if draft.size else NAN,
        "machines": speedup.jobs,
        "jobs": int(_usable(cell["log_speedup"], cell["log_se"], cell["df"]).sum()),
        "speedup": speedup.estimate, "low": speedup.low, "high": speedup.high,
        "log_se": speedup.log_se, "df": speedup.df, "tau": speedup.tau,
        "one_machine": speedup.jobs == 1,
        **_decode(cell),
        **{column: _machine_mean(cell[column], machine) for column in MEANS},
        "build_min": float(builds.min()) if builds.size else NAN,
        "build_max": float(builds.max()) if builds.size else NAN,
    }


def _floats(column: pd.Series) -> Floats:
    return np.asarray(pd.to_numeric(column, errors="coerce"), dtype=float)


def _usable(values: Floats, ses: Floats, dfs: Floats) -> npt.NDArray[np.bool_]:
    """The jobs ``pool_jobs`` combines: a finite log, standard error and df >= 1."""
    return np.isfinite(values) & np.isfinite(ses) & np.isfinite(dfs) & (dfs >= 1)


def _dfs(dfs: Floats) -> list[int]:
    return [int(df) if math.isfinite(df) else 0 for df in dfs]


def _over_machines(values: Floats, ses: Floats, dfs: Floats, machine: Floats) -> Pooled:
    """Each machine's jobs pooled (``pool_jobs``; one job is its own interval), then
    ``pool_jobs`` over the machines, so that a machine counts once however many jobs it
    ran; one machine gives its own interval. ``jobs`` of the result counts machines."""
    _, codes, counts = np.unique(machine, return_inverse=True, return_counts=True)
    # A machine's one job passes as it is: pool_jobs would return its own interval.
    alone = counts[codes] == 1
    logs, machine_ses, machine_dfs = (np.full(counts.size, NAN) for _ in range(3))
    logs[codes[alone]], machine_ses[codes[alone]] = values[alone], ses[alone]
    machine_dfs[codes[alone]] = dfs[alone]
    for code in np.flatnonzero(counts > 1):
        mine = codes == code
        pooled = pool_jobs(values[mine], ses[mine], _dfs(dfs[mine]))
        logs[code] = math.log(pooled.estimate) if pooled.estimate > 0 else NAN
        machine_ses[code], machine_dfs[code] = pooled.log_se, pooled.df
    return pool_jobs(logs, machine_ses, _dfs(machine_dfs))


def _decode(cell: dict[str, Floats]) -> dict[str, float]:
    """The variant's decode tok/s over machines as the speedup is pooled; without standard
    errors, the geometric mean over machines and no interval."""
    logs = cell["log_variant_tok_s"]
    pooled = _over_machines(logs, cell["variant_tok_s_se"], cell["df"], cell["machine"])
    if math.isfinite(pooled.estimate):
        return {"decode_tok_s": pooled.estimate, "decode_low": pooled.low,
                "decode_high": pooled.high}
    return {"decode_tok_s": math.exp(_machine_mean(logs, cell["machine"])),
            "decode_low": NAN, "decode_high": NAN}


def _machine_mean(values: Floats, machine: Floats) -> float:
    """The mean over machines of each machine's mean of its finite values (NaN if none)."""
    finite = np.isfinite(values)
    if not finite.any():
        return NAN
    _, codes = np.unique(machine[finite], return_inverse=True)
    return float(np.mean(np.bincount(codes, values[finite]) / np.bincount(codes)))


def _bundles(column: Iterable[object]) -> list[str]:
    """The sorted union of the jobs' bundle ids (each an id or a list of ids)."""
    ids: set[str] = set()
    for value in column:
        if isinstance(value, str):
            ids.add(value)
        elif isinstance(value, Iterable):
            ids.update(str(item) for item in value)
    return sorted(ids)


def best_settings(rows: pd.DataFrame, predictions: pd.DataFrame | None = None
                  ) -> pd.DataFrame:
    """Per model x gpu x backend, the setting with the highest speedup among the m with
    one, its best-of-m interval, the runner-up and whether the best beats it (the module
    docstring says what the interval and the test mean); beside it, where ``predictions``
    (``pool_predictions``) has any for the group, the setting ``farm recommend`` predicts
    fastest, measured or not, with its prediction's interval (as ``farm recommend`` shows
    it). A group with no speedup has no row."""
    measured = rows[np.isfinite(_floats(rows["speedup"]))]
    best = pd.DataFrame([_best(group) for _, group in measured.groupby(GROUP, sort=True,
                                                                         dropna=False)],
                        columns=[column for column in BEST_COLUMNS if column not in RECOMMENDED])
    if predictions is None or predictions.empty or best.empty:
        return best.assign(recommended=None, **{column: NAN for column in RECOMMENDED[1:]}
                           )[BEST_COLUMNS]
    top = (predictions.sort_values(["predicted", "setting"], ascending=[False, True])
           .drop_duplicates(GROUP)
           .rename(columns={"setting": "recommended", "predicted": "recommended_speedup",
                            "predicted_low": "recommended_low",
                            "predicted_high": "recommended_high"}))
    return best.merge(top[[*GROUP, *RECOMMENDED]], on=GROUP, how="left")[BEST_COLUMNS]


def _best(group: pd.DataFrame) -> dict[str, object]:
    """One group's best setting (``BEST_COLUMNS``)."""
    ranked = group.sort_values(["speedup", "setting"], ascending=[False, True])
    settings = len(ranked)
    best = ranked.iloc[0]
    log_best = math.log(float(best["speedup"]))
    low, high = best_of_interval(log_best, float(best["log_se"]), _df(float(best["df"])), settings)
    row: dict[str, object] = {
        **{key: best[key] for key in ("model", "model_name", "gpu", "backend", "setting",
                                      "draft_n_max", "machines")},
        "settings": settings, "speedup": float(best["speedup"]), "low": low, "high": high,
        "runner_up": None, "runner_up_speedup": NAN, "ahead": NAN, "ahead_low": NAN,
        "ahead_high": NAN, "beats": False,
        "build_min": float(best["build_min"]), "build_max": float(best["build_max"]),
        "bundles": _bundles(best["bundles"]),
    }
    if settings == 1:
        return row
    runner = ranked.iloc[1]
    lead = difference(math.log(float(runner["speedup"])), float(runner["log_se"]),
                      float(runner["df"]), log_best, float(best["log_se"]),
                      float(best["df"]), level=1.0 - ALPHA / (settings - 1))
    return {**row, "runner_up": runner["setting"],
            "runner_up_speedup": float(runner["speedup"]), "ahead": lead.change,
            "ahead_low": lead.low, "ahead_high": lead.high, "beats": bool(lead.low > 1.0),
            "build_min": float(np.fmin(best["build_min"], runner["build_min"])),
            "build_max": float(np.fmax(best["build_max"], runner["build_max"])),
            "bundles": _bundles([best["bundles"], runner["bundles"]])}


def _df(df: float) -> int:
    """A row's df as ``best_of_interval`` takes it (0, no interval, when NaN)."""
    return int(df) if math.isfinite(df) else 0
