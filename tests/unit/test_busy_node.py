"""Other work on the node: measured from recorded /proc traces, summarised per job, shown in
reports, waited out or refused before a block (docs/busy-node.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from farm.errors import RETRYABLE, NodeBusy
from farm.matrix.spec import JobSpec
from farm.report.cells import busy_node
from farm.stats.busy import BUSY_CORES, block_loads, busy_blocks
from workers.job import quiet
from workers.job.telemetry.node import (
    OtherWork,
    Snapshot,
    cpu_state,
    other_work,
    pid_ticks,
    stat_busy_ticks,
    tree,
)

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "busy"


def _snapshot(raw: dict[str, Any]) -> Snapshot:
    return Snapshot(raw["t"], stat_busy_ticks(raw["stat"]),
                    {int(pid): pid_ticks(int(pid), text) for pid, text in raw["pids"].items()})


def _trace(path: Path) -> OtherWork:
    trace = json.loads(path.read_text())
    return other_work(_snapshot(trace["start"]), _snapshot(trace["end"]), [trace["root"]],
                      trace["clk_tck"])


def _traces(name: str) -> list[Path]:
    found = sorted(TRACES.glob(f"{name}*.json"))
    assert found, f"no recorded {name} trace in {TRACES}"
    return found


def _parsed(path: Path) -> tuple[dict[str, Any], Snapshot, Snapshot]:
    trace = json.loads(path.read_text())
    return trace, _snapshot(trace["start"]), _snapshot(trace["end"])


def _cores(ticks: int, trace: dict[str, Any], start: Snapshot, end: Snapshot) -> float:
    return ticks / float(trace["clk_tck"]) / (end.t - start.t)


@pytest.mark.parametrize("name", ["own-busy", "own-ended", "idle", "hog"])
def test_other_work_is_the_node_less_the_farms_tree_in_every_recorded_trace(name: str) -> None:
    """Recorded on this (shared) node: the node's non-idle ticks less the stand-in's tree,
    whose child spun a core for the whole window (own-busy) or a second of it and was reaped
    (own-ended); that spinner is never named among the others."""
    # On a node shared with others the spinner gets its share of the cores, not a whole one.
    least_own = {"own-busy": 0.5, "own-ended": 0.15, "idle": 0.0, "hog": 0.0}[name]
    for path in _traces(name):
        trace, start, end = _parsed(path)
        own_start, own_end = tree(start.processes, [trace["root"]]), tree(end.processes,
                                                                          [trace["root"]])
        own = _cores(sum(end.processes[p].total for p in own_end)
                     - sum(start.processes[p].total for p in own_start), trace, start, end)
        node = _cores(end.busy_ticks - start.busy_ticks, trace, start, end)
        work = _trace(path)
        assert own >= least_own, (path.name, own)
        assert work.cores == pytest.approx(max(node - own, 0.0)), path.name
        assert not {pid for _, pid, _ in work.top} & (own_start | own_end), path.name


def test_a_recorded_hog_beside_the_farm_is_named_first_or_second_with_its_core() -> None:
    """The hog spins a core outside the tree: the node is busy and the hog named (on a
    node saturated by others it gets its share of the cores, not a whole one)."""
    for path in _traces("hog"):
        trace = json.loads(path.read_text())
        work = _trace(path)
        assert work.busy, work.describe()
        cores = {pid: used for _, pid, used in work.top}
        assert trace["hog"] in cores and cores[trace["hog"]] >= 0.5, work.describe()


def test_recorded_quiet_blocks_are_quiet_and_hog_blocks_busy_at_the_threshold() -> None:
    """Traces recorded while this node was otherwise quiet (under the shared CPU lock):
    the farm's own work alone stays under the threshold, a one-core hog beside it over."""
    for name in ("quiet-idle", "quiet-own-busy", "quiet-own-ended"):
        for path in _traces(name):
            assert _trace(path).cores < BUSY_CORES / 2, (path.name, _trace(path).describe())
    for path in _traces("quiet-hog"):
        assert _trace(path).cores > 2 * BUSY_CORES, (path.name, _trace(path).describe())


def test_proc_stat_counts_user_nice_system_irq_softirq_not_idle_iowait_or_steal() -> None:
    stat = "cpu  100 2 30 5000 40 5 6 70 0 0\ncpu0 50 1 15 2500 20 2 3 35 0 0\n"
    assert stat_busy_ticks(stat) == 100 + 2 + 30 + 5 + 6
    with pytest.raises(ValueError, match="cpu line"):
        stat_busy_ticks("intr 1 2 3\n")


def test_a_process_name_with_spaces_and_parentheses_parses() -> None:
    fields = " ".join(["S", "7", *["0"] * 9, "11", "12", "13", "14", *["0"] * 30])
    process = pid_ticks(42, f"42 (a (b) c) {fields}")
    assert (process.pid, process.ppid, process.name) == (42, 7, "a (b) c")
    assert (process.ticks, process.total) == (23, 50)  # utime + stime, with cutime + cstime


def test_the_tree_holds_descendants_and_only_roots_present() -> None:
    def proc(pid: int, ppid: int) -> Any:
        return pid_ticks(pid, f"{pid} (p) S {ppid} " + " ".join(["0"] * 40))
    processes = {p.pid: p for p in (proc(1, 0), proc(10, 1), proc(11, 10), proc(12, 11),
                                    proc(20, 1))}
    assert tree(processes, [10, 99]) == {10, 11, 12}


def test_cpu_state_reads_load_governors_and_mean_frequency(tmp_path: Path) -> None:
    (tmp_path / "loadavg").write_text("1.25 0.5 0.1 2/100 42\n")
    for cpu, (governor, khz) in enumerate([("performance", 3000000), ("powersave", 1000000)]):
        policy = tmp_path / "sys" / f"cpu{cpu}" / "cpufreq"
        policy.mkdir(parents=True)
        (policy / "scaling_governor").write_text(f"{governor}\n")
        (policy / "scaling_cur_freq").write_text(f"{khz}\n")
    state = cpu_state(tmp_path, tmp_path / "sys")
    assert (state.load_1m, state.governor, state.freq_mhz) == (1.25, "performance,powersave",
                                                                2000.0)
    bare = cpu_state(tmp_path / "none", tmp_path / "none")
    assert (bare.load_1m, bare.governor, bare.freq_mhz) == (None, None, None)


def _runs(blocks: Sequence[tuple[int, str, float | None]], **extra: Any) -> pd.DataFrame:
    rows = [{"block": block, "arm": arm, "e2e_ms": 1000.0 + run, "node_other_cores": cores,
             "gpu_other_processes": None, "busy_wait_s": 0.0, **extra}
            for block, arm, cores in blocks for run in range(2)]
    return pd.DataFrame(rows)


def test_busy_blocks_counts_per_arm_and_averages_the_busy_ones() -> None:
    runs = _runs([(0, "baseline", 0.9), (1, "variant", 0.02), (2, "variant", 1.1),
                  (3, "baseline", 0.95), (4, "baseline", 0.6), (5, "variant", None)])
    found = busy_blocks(runs)
    assert (found.measured, found.baseline, found.variant) == (5, 3, 1)
    assert found.cores == pytest.approx((0.9 + 1.1 + 0.95 + 0.6) / 4)


def test_another_process_on_the_gpu_makes_a_block_busy() -> None:
    loads = block_loads(_runs([(0, "baseline", 0.0)], gpu_other_processes=1))
    assert loads["busy"].tolist() == [True]


def test_runs_without_the_measure_give_no_blocks() -> None:
    assert busy_blocks(pd.DataFrame({"block": [0], "arm": ["baseline"]})).measured == 0
    assert busy_blocks(_runs([(0, "baseline", None)])).measured == 0


def test_the_report_says_how_many_blocks_were_busy_and_which_arm_had_more() -> None:
    row = {"busy_blocks": 3, "measured_blocks": 12, "busy_cores": 0.92,
           "busy_blocks_baseline": 3, "busy_blocks_variant": 0, "busy_wait_s": 0.0}
    assert busy_node(row) == ("busy node: other processes used 0.9 of a core during 3 of 12 "
                              "blocks; more in the baseline's (3 baseline, 0 variant): the "
                              "speedup is biased")
    even = {**row, "busy_blocks": 2, "busy_blocks_baseline": 1, "busy_blocks_variant": 1}
    assert busy_node(even) == ("busy node: other processes used 0.9 of a core during 2 of "
                               "12 blocks")
    waited = {**row, "busy_blocks": 0, "busy_wait_s": 41.6}
    assert busy_node(waited) == "blocks waited 42 s for quiet"
    assert busy_node({"busy_blocks": None, "measured_blocks": None}) == ""


class _Look:
    """Looks at a node that is busy for the first ``busy`` looks, each taking its seconds on
    a fake clock (``now``)."""

    def __init__(self, busy: int) -> None:
        self.busy, self.looks, self.now = busy, 0, 0.0

    def __call__(self, roots: Sequence[int], seconds: float) -> OtherWork:
        self.looks += 1
        self.now += seconds
        cores = 1.0 if self.looks <= self.busy else 0.0
        return OtherWork(seconds, cores, (("python3", 4242, cores),))


def _spec(spec: JobSpec, **update: Any) -> JobSpec:
    return spec.model_copy(update=update)


@pytest.fixture
def job(tmp_path: Path) -> JobSpec:
    from farm.matrix.load import load_matrix
    from tests.helpers import matrix_dict, write_matrix
    _, [spec] = load_matrix(write_matrix(tmp_path, matrix_dict(tmp_path / "m.gguf")))
    return spec


def test_flag_looks_at_nothing_before_a_block(job: JobSpec) -> None:
    look = _Look(busy=5)
    assert quiet.settle(job, 0, [1], look) == 0.0 and look.looks == 0


def _waiting(job: JobSpec, monkeypatch: pytest.MonkeyPatch, busy: int,
             bound: float) -> tuple[_Look, float]:
    look = _Look(busy=busy)
    monkeypatch.setattr(quiet, "monotonic", lambda: look.now)
    return look, quiet.settle(_spec(job, busy_node="wait", busy_wait=bound), 4, [1], look)


def test_wait_holds_the_block_until_quiet_and_logs_it(
        job: JobSpec, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with caplog.at_level(logging.WARNING, "farm.worker"):
        look, waited = _waiting(job, monkeypatch, busy=3, bound=60.0)
    # The first look found it busy; the second and third too; the fourth quiet.
    assert look.looks == 4 and waited == 3 * quiet.PROBE_S
    assert "block 4: the node is busy" in caplog.text and "python3 (pid 4242)" in caplog.text
    assert "quiet after 6 s" in caplog.text


def test_wait_gives_up_at_its_bound_and_runs_the_block_flagged(
        job: JobSpec, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with caplog.at_level(logging.WARNING, "farm.worker"):
        _, waited = _waiting(job, monkeypatch, busy=100, bound=7.0)
    assert waited == 8.0 and "still busy after 8 s" in caplog.text


def test_refuse_fails_the_block_retryably_naming_what_ran(job: JobSpec) -> None:
    with pytest.raises(NodeBusy, match=r"python3 \(pid 4242\)") as refused:
        quiet.settle(_spec(job, busy_node="refuse"), 0, [1], _Look(busy=1))
    assert refused.value.failure_class in RETRYABLE
    assert quiet.settle(_spec(job, busy_node="refuse"), 0, [1], _Look(busy=0)) == 0.0


def test_the_policy_is_not_part_of_the_jobs_identity(job: JobSpec) -> None:
    other = _spec(job, busy_node="wait", busy_wait=30.0)
    assert (other.job_key, other.comparable_key) == (job.job_key, job.comparable_key)
