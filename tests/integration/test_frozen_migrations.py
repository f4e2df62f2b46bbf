"""Frozen migrations: every revision runs where the farm cannot be imported, and what it
computes from stored rows (0007's comparable key, 0008's log_se and df) is what today's
code computes; the views' texts are pinned, and 0013 renames job_speedup's columns only."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy import Engine

import migrations
from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from farm.stats.intervals import log_standard_error
from farm.store.db import downgrade, make_engine, schema_head, upgrade
from migrations import views
from tests.helpers import NEWER_THAN_0007, matrix_dict, write_matrix

# Upgrades the database at argv[1] to revision argv[2] with Alembic alone, in a process
# where `import farm` raises: the revisions may use only what they hold.
_UPGRADE_WITHOUT_FARM = r"""
import importlib.abc
import sys


class NoFarm(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "farm" or name.startswith("farm."):
            raise ImportError(f"{name}: the migrations must run without the farm")
        return None


sys.meta_path.insert(0, NoFarm())
assert "farm" not in sys.modules

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

url, revision, location = sys.argv[1:4]
engine = create_engine(url)
config = Config()
config.set_main_option("script_location", location)
config.attributes["engine"] = engine
command.upgrade(config, revision)
engine.dispose()
try:
    import farm  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("farm was importable")
assert not [name for name in sys.modules if name == "farm" or name.startswith("farm.")]
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    url = (f"sqlite:///{tmp_path / 'farm.db'}" if request.param == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    engine = make_engine(url)
    request.addfinalizer(engine.dispose)
    return engine


def _upgrade_without_farm(engine: Engine, revision: str) -> None:
    location = Path(migrations.__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(location.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(
        [sys.executable, "-c", _UPGRADE_WITHOUT_FARM,
         engine.url.render_as_string(hide_password=False), revision, str(location)],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def _specs(tmp_path: Path) -> list[dict[str, Any]]:
    """Job specs as today's code stores them, one legacy spec it cannot read, and one whose
    sampling it refuses."""
    matrix = matrix_dict(
        Path(__file__), stop="natural", concurrency=[1, 2], pairs=4,
        sampling={"temperature": 0.7, "top-k": 40},
        **{"max-pairs": 8, "target-assurance": 0.9},
        variants=[{"name": "ngram", "flags": {"spec-type": "ngram-simple",
                                              "spec-ngram-simple-size-m": [8, 16]}},
                  {"name": "aa", "control": True},
                  {"name": "fork", "build": "fork",
                   "flags": {"spec-type": "ngram-simple", "cont-batching": True,
                             "kv-offload": False}}])
    _, jobs = load_matrix(write_matrix(tmp_path, matrix))
    _, fixed = load_matrix(write_matrix(tmp_path, matrix_dict(Path(__file__)), "fixed.yaml"))
    specs = [json.loads(spec.model_dump_json(exclude=set(NEWER_THAN_0007)))
              for spec in [*jobs, *fixed]]
    legacy = copy.deepcopy(specs[0])  # before builds moved into the arms
    legacy["build"] = legacy["baseline"].pop("build")
    del legacy["variant"]["build"]
    unknown = copy.deepcopy(specs[-1])
    unknown["sampling"]["mirostat"] = 2
    return [*specs, legacy, unknown]


# Summaries as stored over time: (summary, whether 0008 reads an interval back from it).
_SUMMARIES: list[tuple[dict[str, Any] | None, bool]] = [
    ({"speedup": 1.2431078915, "ci_low": 1.1812345678901234, "ci_high": 1.3083216549873215,
      "pairs": 12, "log_se": 0.0245, "df": 10, "interval_method": "two-stage crossover",
      "kind": "variant", "runs": 96, "median_speedup": 1.25}, True),
    ({"speedup": 1.05, "ci_low": 0.98, "ci_high": 1.12, "pairs": 4, "agreement": 1.0,
      "agreement_suspect": False, "drift_flag": False}, True),  # before log_se
    ({"speedup": 1.5, "ci_low": 1, "ci_high": 2, "pairs": 2}, True),  # integer bounds
    ({"kind": "control", "speedup": 0.9991, "ci_low": 0.9912, "ci_high": 1.0071,
      "pairs": 48}, True),
    ({"speedup": 1.1, "ci_low": 0.0, "ci_high": 1.2, "pairs": 5}, True),  # NaN: df only
    ({"speedup": 1.1, "ci_low": None, "ci_high": None, "pairs": 1}, False),
    ({"speedup": 1.1, "ci_low": 1.0, "ci_high": 1.2}, False),  # no pairs
    ({"agreement": 1.0}, False),
    (None, False),  # not finished
]

_campaign = sa.table("campaign", sa.column("id", sa.Integer()), sa.column("name", sa.String()),
                     sa.column("matrix_path", sa.Text()))
_job = sa.table("job", *(sa.column(name, sa.String()) for name in (
    "job_key", "model_name", "build_name", "variant_name", "state")),
    sa.column("id", sa.Integer()), sa.column("campaign_id", sa.Integer()),
    sa.column("attempt", sa.Integer()), sa.column("varying", sa.JSON()),
    sa.column("spec", sa.JSON()), sa.column("summary", sa.JSON()))


def _insert_jobs(engine: Engine, specs: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """Jobs at schema 0006, and what 0007 and 0008 should fill each with, by today's code."""
    expected: dict[int, tuple[Any, ...]] = {}
    with engine.begin() as connection:
        connection.execute(_campaign.insert().values(id=1, name="frozen", matrix_path="m.yaml"))
        for index, spec in enumerate(specs):
            summary, interval = _SUMMARIES[index % len(_SUMMARIES)]
            connection.execute(_job.insert().values(
                id=index + 1, campaign_id=1, job_key=f"{index:064d}", model_name="smollm2",
                build_name="cpu", variant_name=f"v{index}", state="done", attempt=1,
                varying={}, spec=spec, summary=sa.null() if summary is None else summary))
            try:
                key: str | None = JobSpec.model_validate(spec).comparable_key
            except ValidationError:
                key = None
            se: float | None = None
            df = None
            if interval:
                assert summary is not None
                se = log_standard_error(float(summary["ci_low"]), float(summary["ci_high"]),
                                        summary["pairs"])
                se, df = (None if math.isnan(se) else se), summary["pairs"] - 1
            expected[index + 1] = (key, se, df)
    return expected


def test_the_migrations_run_without_the_farm_and_compute_what_it_does(
        engine: Engine, tmp_path: Path) -> None:
    _upgrade_without_farm(engine, "0006")
    specs = _specs(tmp_path)
    expected = _insert_jobs(engine, specs)
    _upgrade_without_farm(engine, "head")
    with engine.connect() as connection:
        assert connection.scalar(sa.text("SELECT version_num FROM alembic_version")) \
            == schema_head()
        found = {row.id: (row.comparable_key, row.log_se, row.df) for row in connection.execute(
            sa.text("SELECT id, comparable_key, log_se, df FROM job ORDER BY id"))}
    assert found == expected  # exactly: the same strings and the same floats
    keys = [key for key, _, _ in expected.values()]
    assert keys[-2:] == [None, None] and None not in keys[:-2]  # legacy, unknown sampling
    assert len(set(keys[:-2])) == len(specs) - 2
    assert sum(se is not None for _, se, _ in expected.values()) >= 4


# sha256 of each view's SQL, by version. A view's text never changes once released: a new
# text is a new version here and a migration that creates it.
PINNED = {
    "VIEWS_0002": {
        "prompt_median": "581f1265a52ff95ea3987196c55cd7a23027ca0742355535f281726af51204f3",
        "arm_summary": "56dd97c2051b17615a021e25805e8b8b3a4d06b72cc1aa47de2f581a8489a39a",
        "job_speedup": "d15dd0c9e08f164e7f60508beccb7e6896b12ec60efa2250ab9f508a0353daae",
    },
    "VIEWS_0013": {
        "prompt_median": "581f1265a52ff95ea3987196c55cd7a23027ca0742355535f281726af51204f3",
        "arm_summary": "56dd97c2051b17615a021e25805e8b8b3a4d06b72cc1aa47de2f581a8489a39a",
        "job_speedup": "3d6079f3c3c37326fc0a369c5342d2aa4a9e0399d07068347fbff142f3900def",
    },
}


def test_the_views_texts_are_pinned() -> None:
    found = {name: {view: hashlib.sha256(sql.encode()).hexdigest() for view, sql in value.items()}
             for name, value in vars(views).items() if name.startswith("VIEWS_")}
    assert found == PINNED


_run = sa.table("run", *(sa.column(name) for name in (
    "job_id", "arm", "arm_name", "block", "pair", "position", "prompt_id", "prompt_category",
    "repetition", "prompt_tokens", "generated_tokens", "decode_tok_s", "ttft_ms", "e2e_ms",
    "draft_n", "draft_accepted", "spec_drafts", "spec_drafted", "spec_accepted", "text",
    "server_version", "build_name", "model_file", "model_size", "model_sha256", "host",
    "started_at")), sa.column("argv", sa.JSON()), sa.column("spec_accepted_per_pos", sa.JSON()))

# Decode tok/s per job: {(arm, prompt): [runs]}; odd and even counts, one prompt, no runs.
_RUNS: dict[int, dict[tuple[str, str], list[float]]] = {
    1: {("baseline", "a"): [100.0, 110.0, 90.0], ("variant", "a"): [200.0, 210.0, 190.0],
        ("baseline", "b"): [100.0], ("variant", "b"): [50.0]},
    2: {("baseline", "a"): [31.7, 30.9, 32.4, 31.1], ("variant", "a"): [44.2, 45.9, 43.1, 44.8],
        ("baseline", "b"): [29.3, 28.8], ("variant", "b"): [36.1, 37.4],
        ("baseline", "c"): [30.05, 30.5, 29.95], ("variant", "c"): [41.3, 40.7, 42.2]},
    3: {("baseline", "a"): [12.5, 12.75], ("variant", "a"): [13.125, 12.875]},
    4: {},
}


def _job_speedup(engine: Engine, columns: str) -> dict[int, tuple[Any, ...]]:
    with engine.connect() as connection:
        rows = connection.execute(sa.text(f"SELECT job_id, {columns} FROM job_speedup"))
        return {row[0]: tuple(row[1:]) for row in rows}


def test_job_speedup_names_its_median_speedup_and_keeps_its_values(engine: Engine) -> None:
    upgrade(engine, "0012")
    with engine.begin() as connection:
        connection.execute(_campaign.insert().values(id=1, name="views", matrix_path="m.yaml"))
        for job_id, arms in _RUNS.items():
            connection.execute(_job.insert().values(
                id=job_id, campaign_id=1, job_key=f"{job_id:064d}", model_name="m",
                build_name="cpu", variant_name=f"v{job_id}", state="done", attempt=1,
                varying={}, spec={}))
            for (arm, prompt), speeds in arms.items():
                connection.execute(_run.insert(), [dict(
                    job_id=job_id, arm=arm, arm_name=arm, block=int(arm == "variant"),
                    pair=0, position=0, prompt_id=prompt, prompt_category="c", repetition=rep,
                    prompt_tokens=10, generated_tokens=32, decode_tok_s=tok_s, ttft_ms=5.0,
                    e2e_ms=100.0, draft_n=0, draft_accepted=0, spec_drafts=0, spec_drafted=0,
                    spec_accepted=0, spec_accepted_per_pos=[], text="t",
                    server_version="v", build_name="cpu", model_file="m.gguf", model_size=1,
                    model_sha256="0" * 64, host="h", argv=[], started_at=datetime.now(UTC))
                    for rep, tok_s in enumerate(speeds)])
    old = "prompts, speedup, mean_log_speedup, sd_log_speedup"
    before = _job_speedup(engine, old)
    upgrade(engine)
    after = _job_speedup(engine, "prompts, median_speedup, log_median_speedup, sd_log_speedup")
    assert after == before  # exactly: the same SQL, renamed
    assert before[1][:2] == (2, pytest.approx(1.0)) and before[4] == (None,) * 4
    assert before[2][1] == pytest.approx(math.exp(before[2][2]))
    with engine.connect() as connection:
        columns = [column["name"] for column in sa.inspect(connection).get_columns("job_speedup")]
    assert "speedup" not in columns and "mean_log_speedup" not in columns
    downgrade(engine, "0012")  # the old view again
    assert _job_speedup(engine, old) == before


def test_stored_summaries_get_their_version_and_every_version_reads(engine: Engine) -> None:
    from farm.summary import JobSummary, RunFacts, read_summary

    facts = {"baseline_tok_s": 10.0, "drafted": 8, "accepted": 6, "runs": 4}
    shapes = [{"speedup": 1.2, "pairs": 4},  # before log_se
              {"speedup": 1.2, "pairs": 4, "log_se": 0.01, "df": 2},  # before runs
              {"speedup": 1.2, "log_se": 0.01, "df": 2, **facts},  # before kind
              {"speedup": 1.2, "log_se": 0.01, "df": 2, **facts, "kind": "control",
               "acceptance_rate": 0.75, "pairs": 4},
              {**_without(JobSummary(speedup=1.2, facts=RunFacts(drafted=8, accepted=6))
                          .model_dump(mode="json"), SUMMARY_6), "version": 5}]
    _upgrade_without_farm(engine, "0013")
    with engine.begin() as connection:
        connection.execute(_campaign.insert().values(id=1, name="v", matrix_path="m.yaml"))
        for index, summary in enumerate(shapes, start=1):
            connection.execute(_job.insert().values(
                id=index, campaign_id=1, job_key=f"{index:064d}", model_name="m",
                build_name="cpu", variant_name=f"v{index}", state="done", attempt=1,
                varying={}, spec={}, summary=summary))
    _upgrade_without_farm(engine, "0014")
    stored = _summaries(engine)
    assert [summary["version"] for summary in stored] == [1, 2, 3, 4, 5]
    typed = [read_summary(summary) for summary in stored]
    assert all(summary is not None and summary.speedup == 1.2 for summary in typed)
    assert [summary.facts is not None for summary in typed if summary] == [
        False, False, True, True, True]
    assert typed[3] is not None and typed[3].kind == "control"
    assert typed[3].facts == RunFacts(baseline_tok_s=10.0, drafted=8, accepted=6, runs=4)
    downgrade(engine, "0013")
    flat = _summaries(engine)
    assert all("version" not in summary for summary in flat)
    assert flat[:4] == shapes[:4]
    assert flat[4]["acceptance_rate"] == 0.75 and flat[4]["drafted"] == 8


# What version 6 of the summary added (the node's other work).
SUMMARY_6 = ("measured_blocks", "busy_blocks", "busy_blocks_baseline", "busy_blocks_variant",
             "busy_cores", "busy_wait_s")


# What version 7 added (the warm-up check), version 8 (what the drift test was made
# against) and version 9 (the client's clock as the witness); no migration writes them back.
SUMMARY_7 = ("warmup_effect", "warmup_low", "warmup_high", "warmup_blocks", "warmup_flag")
SUMMARY_8 = ("drift_earlier_jobs",)
SUMMARY_9 = ("speed_clock", "clock_ratio_baseline", "clock_ratio_variant",
             "clock_disagreement", "clock_flag")


def _without(summary: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in summary.items() if key not in keys}


def test_a_version_6_summary_reads_and_downgrades_to_version_5(engine: Engine) -> None:
    from farm.summary import JobSummary, RunFacts, read_summary

    # A version 6 summary as that farm stored it: today's less what versions 7-9 added.
    summary = {**_without(JobSummary(speedup=1.2, busy_blocks=3, measured_blocks=8,
                                     facts=RunFacts(drafted=8)).model_dump(mode="json"),
                          SUMMARY_7 + SUMMARY_8 + SUMMARY_9), "version": 6}
    _upgrade_without_farm(engine, "0017")
    with engine.begin() as connection:
        connection.execute(_campaign.insert().values(id=1, name="v", matrix_path="m.yaml"))
        connection.execute(_job.insert().values(
            id=1, campaign_id=1, job_key=f"{1:064d}", model_name="m", build_name="cpu",
            variant_name="v", state="done", attempt=1, varying={}, spec={}, summary=summary))
    [stored] = _summaries(engine)
    typed = read_summary(stored)
    assert typed is not None and (typed.version, typed.busy_blocks) == (9, 3)
    assert typed.warmup_flag is None  # version 6 did not check the warm-up
    assert typed.drift_earlier_jobs is None  # nor say what its drift test was made against
    assert typed.speed_clock is None and typed.clock_flag is None  # nor witness its clocks
    downgrade(engine, "0016")
    [older] = _summaries(engine)
    assert older == {**_without(summary, SUMMARY_6), "version": 5}


def _summaries(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        return [summary if isinstance(summary, dict) else json.loads(summary)
                for (summary,) in connection.execute(sa.select(_job.c.summary)
                                                     .order_by(_job.c.id))]
