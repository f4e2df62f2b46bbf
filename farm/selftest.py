"""``farm selftest``: check this node and the farm against answers known by construction.

Each check runs a small matrix through ``farm run``'s own code on a private, temporary
store, then compares what the farm read back with what must be true:

* the MTP oracle's drafts are all right: acceptance >= 0.95 and text identical to the
  baseline's;
* the anti-oracle's drafts are all wrong: acceptance exactly 0;
* synthetic acceptance (``--spec-synth-rates``) reads back inside the 99.9% binomial range
  of the rates set, at every position;
* MTP is faster than the baseline on the oracle that pays on a CPU: the lower end of the
  speedup's 95% interval is above 1;
* an A/A control's 99.9% interval covers 1, so a healthy node fails it about once in a
  thousand runs (a timing check failed while other work ran beside its blocks says the
  node was not quiet enough instead: ``timed``);
* on GPUs, NVML telemetry is present in the runs.

One line per check with its figure; any failure makes the command exit 1. The first check
is the node itself: other processes' CPU over a few seconds below the busy threshold
(``farm.stats.busy``), and no other process on its GPUs, naming what runs when it is not.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from farm.errors import SelftestFailed
from farm.matrix.yaml_file import matrix_yaml
from farm.runner import Silent, check_matrix, run_matrix
from farm.settings import Settings
from farm.stats.busy import BUSY_CORES
from farm.stats.intervals import log_interval
from farm.store.db import connected
from workers.job.telemetry import GpuInfo
from workers.job.telemetry.node import measure
from workers.job.telemetry.nvml import open_devices, other_processes, require_gpus, shutdown
from workers.paths import NodePaths
from workers.setup.provision import Provisioned, provision

SYNTH_RATES = (0.9, 0.6, 0.3)
Z_999 = 3.2905  # two-sided 99.9% normal quantile


@dataclass(frozen=True)
class Check:
    """One known truth: whether it held, and the figure that says so."""

    name: str
    passed: bool
    figure: str


@dataclass(frozen=True)
class Testbed:
    """What the checks run on: the build, extra baseline flags (``-ngl 99`` on a GPU) and
    the GPUs the runs are pinned to (none on a CPU node)."""

    build: str | dict[str, str]
    flags: dict[str, Any]
    gpus: list[GpuInfo]


def _matrix(campaign: str, testbed: Testbed, model: Path, variants: list[dict[str, Any]],
            **design: Any) -> dict[str, Any]:
    return {"campaign": campaign, "build": testbed.build, "prompt-mode": "completion",
            "models": [{"name": model.stem, "path": str(model)}],
            "prompts": ["one two three four", "the farm reads the log"],
            "n-predict": 64, "repetitions": 1, "pairs": 1, "max-pairs": 1,
            "flags": {"ctx-size": 512, "threads": 2, **testbed.flags},
            "variants": variants, **design}


class _Runner:
    """Runs matrices on a temporary data dir and store, and reads their jobs back."""

    def __init__(self, settings: Settings, workdir: Path, testbed: Testbed) -> None:
        self.settings = settings.model_copy(update={
            "data_dir": workdir / "data",
            "database_url": f"sqlite:///{workdir / 'data' / 'selftest.db'}"})
        self.workdir, self.testbed = workdir, testbed

    def run(self, matrix: dict[str, Any]) -> tuple[list[dict[Hashable, Any]],
                                                 list[dict[Hashable, Any]]]:
        """The campaign's job report rows and variant runs, after running it."""
        from farm.results.rows import job_report
        from farm.results.runs import runs_frame

        path = self.workdir / f"{matrix['campaign']}.yaml"
        path.write_text(matrix_yaml(matrix), encoding="utf-8")
        # A binary by path here is the operator's own (a worker config's build), never a
        # matrix's: the matrices are the selftest's.
        checked = check_matrix(path, self.settings,
                               allow_build_path=isinstance(self.testbed.build, dict))
        run_matrix(checked, self.settings, Silent(), gpus=self.testbed.gpus)
        with connected(self.settings.database_url) as engine:
            jobs = job_report(engine, matrix["campaign"]).to_dict(orient="records")
            runs = runs_frame(engine, matrix["campaign"])
        return jobs, runs[runs["arm"] == "variant"].to_dict(orient="records")


# How long the node is watched before the checks run.
QUIET_S = 3.0


def _quiet(runner: _Runner, models: Provisioned) -> Check:
    del models  # the node itself, before any model runs
    work = measure([os.getpid()], QUIET_S)
    sharing = 0
    opened = open_devices(runner.testbed.gpus) if runner.testbed.gpus else None
    if opened is not None:
        nvml, handles = opened
        sharing = other_processes(nvml, handles.values(), {os.getpid()})
        shutdown(nvml)
    on_gpu = f"; {sharing} other process(es) on the GPUs" if sharing else ""
    return Check("the node is quiet enough to measure", not work.busy and not sharing,
                 f"{work.describe()} (busy from {BUSY_CORES}){on_gpu}")


def _mtp_job(runner: _Runner, models: Provisioned, fixture: str) -> dict[Hashable, Any]:
    """The report row of a draft-mtp (n-max 3) job on one of the tiny MTP fixtures."""
    [job], _ = runner.run(_matrix(f"selftest-{fixture}", runner.testbed, models.models[fixture],
                                  [{"name": "mtp", "flags": {"spec-type": "draft-mtp",
                                                             "spec-draft-n-max": 3}}]))
    return job


def _oracle(runner: _Runner, models: Provisioned) -> Check:
    job = _mtp_job(runner, models, "qwen35-mtp-oracle")
    rate, agreement = float(job["acceptance_rate"]), float(job["agreement"])
    return Check("oracle: every draft accepted, text identical",
                 rate >= 0.95 and agreement == 1.0,
                 f"acceptance {rate:.3f} (>= 0.95), identical outputs {agreement:.0%}")


def _anti_oracle(runner: _Runner, models: Provisioned) -> Check:
    job = _mtp_job(runner, models, "qwen35-mtp-anti")
    drafted, accepted = int(job["drafted"]), int(job["accepted"])
    return Check("anti-oracle: no draft accepted", drafted > 0 and accepted == 0,
                 f"{accepted} of {drafted} drafted tokens accepted (must be 0)")


def _synthetic(runner: _Runner, models: Provisioned) -> Check:
    _, runs = runner.run(_matrix(
        "selftest-synthetic", runner.testbed, models.models["qwen35-mtp-anti"],
        [{"name": "synth", "flags": {"spec-type": "draft-mtp", "spec-draft-n-max": 3,
                                     "spec-synth-rates": ",".join(map(str, SYNTH_RATES))}}],
        **{"n-predict": 230, "repetitions": 6}))
    drafts = sum(int(run["spec_drafts"]) for run in runs)
    # A run's last draft may be cut short by its token budget: the positions it lacks bound
    # the read-back from both sides (tests/e2e/test_synthetic.py).
    missing = len(SYNTH_RATES) * drafts - sum(int(run["spec_drafted"]) for run in runs)
    read, passed = [], drafts > 0
    for position, rate in enumerate(SYNTH_RATES):
        count = sum(int(run["spec_accepted_per_pos"][position]) for run in runs)
        low, high = count / drafts, count / max(drafts - missing, 1)
        margin = Z_999 * math.sqrt(rate * (1 - rate) / max(drafts - missing, 1))
        passed = passed and low <= rate + margin and high >= rate - margin
        read.append(f"{low:.3f}")
    return Check("synthetic rates read back", passed,
                 f"set {', '.join(map(str, SYNTH_RATES))}; read {', '.join(read)} over "
                 f"{drafts} drafts (99.9% binomial range)")


def _speed(runner: _Runner, models: Provisioned) -> Check:
    [job], _ = runner.run(_matrix(
        "selftest-speed", runner.testbed, models.models["qwen35-mtp-oracle-cpu"],
        [{"name": "mtp", "flags": {"spec-type": "draft-mtp", "spec-draft-n-max": 2}}],
        # The decision design: a clear speedup is decided at the first look (4 pairs).
        **{"n-predict": 96, "pairs": 4, "max-pairs": 8, "stop-rule": "decision"}))
    speedup, low = float(job["speedup"]), float(job["ci_low"])
    return timed(Check("MTP faster than baseline on the oracle", low > 1.0,
                       f"{speedup:.2f}x [{low:.2f}, {float(job['ci_high']):.2f}] (low end > 1)"),
                 job)


def _control(runner: _Runner, models: Provisioned) -> Check:
    [job], _ = runner.run(_matrix(
        "selftest-control", runner.testbed, models.models["qwen35-mtp-oracle-cpu"],
        [{"name": "aa", "control": True}], **{"n-predict": 96, "pairs": 8, "max-pairs": 8}))
    low, high = log_interval(math.log(float(job["speedup"])), float(job["log_se"]),
                             int(job["df"]), 0.999)
    return timed(Check("A/A control covers 1 (99.9%)", low <= 1.0 <= high,
                       f"{float(job['speedup']):.3f}x [{low:.3f}, {high:.3f}]"), job)


def _number(value: Any) -> float:
    """A report row's figure, 0 where the job has none (None, or NaN in a frame)."""
    return 0.0 if value is None or math.isnan(float(value)) else float(value)


def timed(check: Check, job: Mapping[Any, Any]) -> Check:
    """A timing check as run: one that failed while other work ran beside its blocks
    (``farm.stats.busy``: the job's busy blocks) says the node was not quiet enough, not
    that the farm measured wrong; quiet, it stands as it is."""
    busy, cores = (_number(job.get(key)) for key in ("busy_blocks", "busy_cores"))
    if check.passed or busy == 0:
        return check
    used = f"used {cores:.1f} of a core" if cores >= 0.05 else "shared the GPU"
    return Check("the node is quiet enough to measure", False,
                 f"other processes {used} during {busy:.0f} of {int(job['measured_blocks'])} "
                 f"blocks of '{check.name}', so it was not judged ({check.figure}); run "
                 "`farm selftest` again on a quiet node")


def _telemetry(runner: _Runner, models: Provisioned) -> Check:
    _, runs = runner.run(_matrix("selftest-telemetry", runner.testbed,
                                 models.models["qwen35-mtp-oracle"],
                                 [{"name": "mtp", "flags": {"spec-type": "draft-mtp"}}]))
    named = sum(1 for run in runs if run.get("gpu_name"))
    powered = sum(1 for run in runs if run.get("energy_j") not in (None, 0)
                  and not (isinstance(run.get("energy_j"), float)
                           and math.isnan(run["energy_j"])))
    return Check("NVML telemetry in every run", bool(runs) and named == powered == len(runs),
                 f"{named} of {len(runs)} runs name their GPU, {powered} have energy")


CHECKS: list[Callable[[_Runner, Provisioned], Check]] = [
    _quiet, _oracle, _anti_oracle, _synthetic, _speed, _control]


def selftest(settings: Settings, testbed: Testbed, console: Console) -> list[Check]:
    """Run every check (telemetry too where the node has GPUs), printing one line each as
    it finishes; returns them all."""
    models = provision(NodePaths.of(settings))
    checks = [*CHECKS, *([_telemetry] if testbed.gpus else [])]
    results = []
    with tempfile.TemporaryDirectory(prefix="farm-selftest-") as scratch:
        runner = _Runner(settings, Path(scratch), testbed)
        for check in checks:
            result = check(runner, models)
            mark = "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]"
            console.print(f"{mark} {result.name}: ", end="")
            console.print(result.figure, markup=False)
            results.append(result)
    return results



def testbed_for(build: dict[str, str], devices: list[int] | None) -> Testbed:
    """The node to check: ``build`` ({name} or {name, path}); on ``devices`` (GPU indices)
    with every layer offloaded, else on the CPU."""
    gpus = (require_gpus(devices, f"--devices {','.join(map(str, devices))}") if devices
            else [])
    return Testbed(build=build if "path" in build else build["name"],
                flags={"n-gpu-layers": 99} if gpus else {}, gpus=gpus)


def report_failures(results: list[Check]) -> None:
    """Raise ``SelftestFailed`` (exit 1) naming the checks that failed, if any did."""
    failed = [result.name for result in results if not result.passed]
    if failed:
        raise SelftestFailed(f"selftest: {len(failed)} of {len(results)} checks failed: "
                             f"{'; '.join(failed)}")
