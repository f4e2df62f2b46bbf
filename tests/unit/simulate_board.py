"""Simulated boards through the board's statistics (``farm.stats.board``): does the board
pick each GPU's known best setting, and how often does it name (``beats``) a wrong one?

A board: per GPU, ``machines`` machines (one GPU each), each running every one of the
``settings`` settings in 1 or 2 jobs. Each GPU's settings have true speedups drawn per
board: the known best (at a random place among the settings) at 1.2x-2x, the runner-up
exactly ``lead`` behind it (5%: the closest the issue allows), the others 5%-40% behind
the best. Each machine moves each setting's log speedup by its own N(0, ``machine_sd``)
(3%), the same for all of that machine's jobs of the setting: what the machines' random
effect is for.

Each job's estimate is the farm's own: a job of the matrix defaults (two stages, 4 to 12
pairs, target ±3%) from ``tests.unit.simulate.job_pairs`` (the audit's job: block offsets
plus run noise, counterbalanced pairs), planned by ``planned_pairs`` and estimated by
``estimate``, which give its log speedup, standard error and df. Both are shift-equivariant
(a true log speedup added to every pair value moves the estimate by it and leaves the
standard error and the plan alone), so ``job_noise`` measures a library of such jobs once,
as errors around their true value, and each simulated job draws one from it and adds its
true value: the farm's job noise at a fraction of the cost (a job's estimate takes about
0.13 ms; 500 boards hold 180,000 jobs). All boards go through one ``board_rows`` and one
``best_settings`` call, each board a model of its own.

``python -m tests.unit.simulate_board 2000`` prints the figures of ``CELLS``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.board import best_settings, board_rows
from farm.stats.frame import Floats
from farm.stats.speedup import estimate
from farm.stats.twostage import planned_pairs
from tests.unit.simulate import DEFAULT, TRUE_LOG, job_pairs

# The variant's decode tok/s without speculation, per GPU: the decode columns' point only
# (no standard error: pooling it as well would double the simulation's time).
BASE_TOK_S = (60.0, 120.0, 200.0)


@dataclass(frozen=True)
class BoardCell:
    """A kind of board: machines per GPU, GPUs, settings, the best's lead over the
    runner-up (0.05: 5% faster), the machines' SD of each setting's log speedup, and the
    most jobs a machine runs of a setting (1 to ``most_jobs``)."""

    machines: int = 20
    gpus: int = 3
    settings: int = 4
    lead: float = 0.05
    machine_sd: float = 0.03
    most_jobs: int = 2


@dataclass(frozen=True)
class BoardRates:
    """Over the boards' GPUs: the share whose best setting is the known best, the share
    that names (``beats``) a wrong best, the share that names the known best, and the
    seconds the simulation took."""

    picked: float
    wrong: float
    named: float
    seconds: float


def job_noise(rng: np.random.Generator, jobs: int) -> Floats:
    """``jobs`` simulated jobs of the matrix defaults with no speedup, through the farm's
    own plan and estimate: one row each of the log speedup, its standard error and df."""
    noise = np.empty((jobs, 3))
    for job in range(jobs):
        values, orders = job_pairs(rng, "normal", DEFAULT.max_pairs, DEFAULT.first_stage)
        values = values - TRUE_LOG
        pairs = planned_pairs(values, orders, DEFAULT)
        found = estimate(values[:pairs], orders[:pairs], DEFAULT)
        noise[job] = math.log(found.speedup.estimate), found.log_se, found.df
    return noise


def true_speedups(rng: np.random.Generator, cell: BoardCell) -> tuple[Floats, int]:
    """One GPU's true log speedups of the settings, and which is the known best."""
    best = math.log(rng.uniform(1.2, 2.0))
    behind = np.log(rng.uniform(1.05, 1.40, cell.settings))
    behind[1] = math.log1p(cell.lead)
    behind[0] = 0.0
    order = rng.permutation(cell.settings)
    return best - behind[order], int(np.argmin(order))


def simulated_jobs(rng: np.random.Generator, cell: BoardCell, boards: int,
                   noise: Floats) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The jobs of ``boards`` boards (each board a model, "board N") as ``board_rows``
    reads them, and each board's known best setting per GPU."""
    frames, known = [], []
    draft = 2.0 ** np.arange(1, cell.settings + 1)
    for board in range(boards):
        for gpu in range(cell.gpus):
            truth, best = true_speedups(rng, cell)
            known.append({"model": f"board {board}", "gpu": f"GPU {gpu}",
                          "known": f"--draft-max {int(draft[best])}"})
            # Each machine x setting: its effect, run in 1 to most_jobs jobs.
            counts = rng.integers(1, cell.most_jobs + 1, cell.machines * cell.settings)
            effects = rng.normal(0.0, cell.machine_sd, cell.machines * cell.settings)
            pairing = np.repeat(np.arange(cell.machines * cell.settings), counts)
            machine, setting = np.divmod(pairing, cell.settings)
            effect = effects[pairing]
            drawn = noise[rng.integers(0, len(noise), machine.size)]
            log_speedup = truth[setting] + effect + drawn[:, 0]
            frames.append(pd.DataFrame({
                "machine": [f"{board}-{gpu}-{m}" for m in machine],
                "model": f"board {board}", "model_name": f"board {board}",
                "gpu": f"GPU {gpu}", "backend": "CUDA",
                "setting": [f"--draft-max {int(draft[s])}" for s in setting],
                "draft_n_max": draft[setting],
                "build_number": rng.integers(4000, 4100, machine.size).astype(float),
                "log_speedup": log_speedup, "log_se": drawn[:, 1], "df": drawn[:, 2],
                "log_variant_tok_s": math.log(BASE_TOK_S[gpu % 3]) + log_speedup,
                "variant_tok_s_se": np.nan, "acceptance": np.nan,
                "vram_cost_mb": np.nan, "joules_per_token": np.nan,
                "bundle": [f"bundle {board}-{gpu}-{m}" for m in machine]}))
    return pd.concat(frames, ignore_index=True), pd.DataFrame(known)


def board_rates(boards: int, seed: int, cell: BoardCell | None = None,
                library: int = 4000) -> BoardRates:
    """``boards`` simulated boards of ``cell`` (the issue's by default: 20 machines per GPU,
    3 GPUs, 4 settings, the best 5% ahead), each job's noise drawn from ``library`` jobs of
    the farm's own estimate (``job_noise``)."""
    cell = cell or BoardCell()
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    jobs, known = simulated_jobs(rng, cell, boards, job_noise(rng, library))
    best = known.merge(best_settings(board_rows(jobs)), on=["model", "gpu"], how="left")
    picked = (best["setting"] == best["known"]).to_numpy()
    beats = best["beats"].fillna(False).to_numpy(dtype=bool)
    return BoardRates(float(picked.mean()), float((beats & ~picked).mean()),
                      float((beats & picked).mean()), time.perf_counter() - started)


CELLS = {
    "20 machines per GPU, best 5% ahead (the issue's)": BoardCell(),
    "5 machines per GPU, best 5% ahead": BoardCell(machines=5),
    "2 machines per GPU, best 5% ahead": BoardCell(machines=2),
    "20 machines per GPU, best 1% ahead": BoardCell(lead=0.01),
    "20 machines per GPU, machines' SD 8%": BoardCell(machine_sd=0.08),
}


def main(boards: int) -> None:
    """Print each cell's rates over ``boards`` boards (3 GPUs each) as a markdown table."""
    print("| cell | picks the known best | names a wrong best | names the known best | s |")
    print("|---|---|---|---|---|")
    for seed, (name, cell) in enumerate(CELLS.items()):
        rates = board_rates(boards, seed, cell)
        print(f"| {name} | {rates.picked:.4f} | {rates.wrong:.4f} | {rates.named:.4f} | "
              f"{rates.seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
