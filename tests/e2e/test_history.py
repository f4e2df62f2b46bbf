"""A history for real: `farm track` follows `master` of a local llama.cpp repository (the
provisioned sdist's tree) over three commits, the third planting a fixed cost per
speculative round (10 ms of sleep in every `common_speculative_draft` call, inside its
draft timer: several times the draft's own cost, beyond what the machine's drift between
jobs moves that timer, which was +93% between two builds of the same code in one run),
and `farm history` marks the change on the series that moved (draft
ms/token; variant tok/s and the speedup too when the test has the power) and on none of
those the machine's drift between jobs cannot move (the speedup and acceptance), at the
harmless commit before it either.

Builds share the node's ccache (tests/conftest.py): the first compiles the new tree from
it, the next two only what their commit changes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from farm.matrix.spec import JobSpec
from farm.settings import load_settings
from farm.store.db import connected
from farm.store.models import Campaign, Job
from tests.e2e import planted
from tests.helpers import git, run_cli
from workers.setup.provision import Provisioned

pytestmark = [pytest.mark.server, pytest.mark.alone]


@pytest.fixture(scope="module")
def three_commits(provisioned: Provisioned, tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[Path, list[str]]:
    """A: the sdist as is; B: a server log line changed (nothing measured moves); C: B
    plus 10 ms per draft call."""
    repo = tmp_path_factory.mktemp("git") / "llama.cpp"
    commits = [planted.sdist_repository(repo, "A: b11434 from the sdist")]
    planted.edit(repo / "tools/server/server.cpp", *planted.SERVER_LINE)
    commits.append(planted.commit(repo, "B: the server says which commit it is"))
    planted.plant_draft_cost(repo, ms=10)
    commits.append(planted.commit(repo, "C: 10 ms more per speculative round"))
    return repo, commits


def _matrix(path: Path, repo: Path, model: Path) -> Path:
    # 4 pairs of 4 runs a block: the tiny model's tok/s and draft timer vary 20-50%
    # between blocks on this shared CPU, and a series' df is its blocks less one; the
    # planted 10 ms moves the draft timer about 6x (+500% [+430%, +575%] at 6 pairs), far
    # past that at 4 (6 pairs: 171 s, 4: about 120 s). 64 tokens a run: the planted cost
    # is per draft call, the same share of each token at any length, and the test needs
    # its decisions, not a figure (128 tokens: 460 s).
    return planted.nightly_matrix(path, repo, model, prompt="the farm reads the history",
                                  n_predict=64, pairs=4)


def _called(history: dict[str, Any], build: str, verdict: str = "verdict") -> dict[str, str]:
    """The series called changed at ``build``: by the history's running calls, or
    (``verdict="gate_verdict"``) by the gate's test of the newest build."""
    return {change["series"]: change[verdict] for change in history["changes"]
            if change["build_b"] == build and change[verdict] not in ("unchanged", "")}


def test_history_of_three_tracked_commits_marks_the_planted_draft_cost_only(
        three_commits: tuple[Path, list[str]], provisioned: Provisioned, tmp_path: Path) -> None:
    repo, commits = three_commits
    matrix = _matrix(tmp_path / "nightly.yaml",
                     repo, provisioned.models["qwen35-mtp-oracle-cpu"])
    env = {"FARM_CACHE_DIR": str(tmp_path / "cache")}
    for commit in commits:
        git(repo, "update-ref", "refs/heads/master", commit)
        started = time.monotonic()
        # The last commit is also paired with the one before: each arm on B and on C in
        # one job (two more jobs), so its tok/s changes carry no drift between jobs.
        paired = ["--paired"] if commit == commits[2] else []
        tracked = run_cli("track", str(matrix), "--ref", "master", *paired, env=env)
        assert tracked.exit_code == 0, tracked.output
        new = "3 new jobs" if paired else "1 new job"
        assert f"master is at {commit[:12]}: {new} in campaign nightly" in tracked.output
        print(f"\ntrack {commit[:12]}: {time.monotonic() - started:.0f} s")
    again = run_cli("track", str(matrix), "--ref", "master", env=env)
    assert again.exit_code == 0, again.output
    assert f"master is at {commits[2][:12]}: already tracked (campaign nightly: 1 done)" in \
        again.output

    markdown = run_cli("history", str(matrix), "--format", "md")
    print(markdown.output)
    result = run_cli("history", str(matrix), "--format", "json")
    assert result.exit_code == 0, result.output
    history = json.loads(result.output)
    print(json.dumps(history["changes"]))
    assert [build["commit"] for build in history["builds"]] == commits
    _, b, c = (commit[:12] for commit in commits)
    # Each build's values come from its own job, minutes after the last: a tok/s or a timer
    # compared between jobs carries the machine's drift between them (here baseline tok/s
    # 138 -> 134 -> 122 over the three builds of one run, no code of its path changed).
    # The series that drift cannot move are pinned: acceptance, what the drafter does,
    # and the planted cost, far beyond any drift. The speedup, a ratio within each job, is
    # not pinned at B: one run read A 1.26x and B 1.43x (+14%, q 0.027), their code the same.
    steady = {"speedup", "mean_accepted_length"} | {
        row["series"] for row in history["changes"] if row["series"].startswith("acceptance")}
    assert not (steady - {"speedup"}) & set(_called(history, b)), _called(history, b)
    # C is the newest build: the gate tests it as its own family (the history's running
    # calls, LORD++ over every tracked test, are stricter this early: docs/history.md).
    called = _called(history, c, "gate_verdict")
    assert called["draft_ms_per_token"] == "regression"
    # The variant's tok/s and the speedup fall too (-17% and -13%, -8% and -14% in the runs
    # of docs/history.md), but over 4 pairs their intervals are over 10% wide: called or
    # not at this size, never the other way.
    for series in ("variant_tok_s", "speedup"):
        [change] = [row["change"] for row in history["changes"]
                    if row["series"] == series and row["build_b"] == c]
        assert change < 1.0 and called.get(series, "regression") == "regression", series
    assert not (steady - {"speedup"}) & set(called), called
    # C's tok/s changes come from the paired jobs (each arm on B and on C in one job): the
    # variant's planted cost reads as a fall (0.88 [0.78, 0.99] in one run beside other
    # work: called or not, never a rise); the baseline's value is the paired job's own.
    across = {row["series"]: row for row in history["changes"]
              if row["build_b"] == c and row["paired"]}
    assert set(across) == {"baseline_tok_s", "variant_tok_s"}, across
    variant = across["variant_tok_s"]
    assert variant["change"] < 1.0 and variant["verdict"] != "improvement", variant
    assert variant["change_low"] <= variant["change"] <= variant["change_high"]
    print(json.dumps(across))
    with connected(load_settings().database_url) as engine, engine.connect() as connection:
        specs = [JobSpec.model_validate(spec) for spec in connection.execute(
            select(Job.spec).join(Campaign).where(Campaign.name == "nightly")).scalars()]
    crossed = [spec for spec in specs if spec.kind == "builds"]
    assert sorted(spec.variant.name for spec in crossed) == [f"baseline@{c}", f"mtp@{c}"]
    [sentence] = [row["text"] for row in history["described"] if row["build_b"] == c]
    assert "acceptance" in sentence.split(";")[1] and "draft ms/token" in sentence
    print(f"\n{b} -> {c}: {sentence}")

    page = tmp_path / "history.html"
    assert run_cli("history", str(matrix), "--format", "html", "-o", str(page)).exit_code == 0
    assert "data:image/png;base64," in page.read_text(encoding="utf-8")
    # 3 ms of planted cost read +47% [+21%, +79%] in one run and +77% [-55%, +593%] in
    # another, whose draft timer had moved +93% between A and B (the same code): the
    # between-build variance learnt from that made it no call; 10 ms is several times it.
    gated = run_cli("history", str(matrix), "--fail-on-regression=draft_ms_per_token:20")
    assert gated.exit_code == 3 and f"({b} -> {c}" in gated.output
    assert run_cli("history", str(matrix),
                   "--fail-on-regression=acceptance").exit_code == 0
