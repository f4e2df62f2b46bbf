"""`farm compare` on stored jobs: across campaigns, across builds, on an upgraded store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.cli import cli
from farm.errors import ConfigError
from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from farm.results.compare import compare
from farm.store import repo
from farm.store.db import upgrade
from farm.store.models import Job, Run
from tests.helpers import NEWER_THAN_0007, matrix_dict, write_matrix


def _specs(tmp_path: Path, campaign: str, **overrides: Any) -> list[JobSpec]:
    matrix = matrix_dict(Path("m.gguf"), campaign=campaign, **overrides)
    return load_matrix(write_matrix(tmp_path, matrix, f"{campaign}.yaml"))[1]


def _runs(job_id: int, build: str, baseline: float, variant: float) -> list[Run]:
    return [Run(job_id=job_id, arm=arm, arm_name=arm, block=block, pair=0, position=block,
                prompt_id="copy", prompt_category="rewrite", repetition=0, prompt_tokens=10,
                generated_tokens=32, decode_tok_s=tok_s, ttft_ms=5.0, e2e_ms=100.0,
                spec_drafted=10, spec_accepted=8, text="t", server_version="v",
                build_name=build, model_file="m.gguf", model_size=1, model_sha256="0" * 64,
                host="h", argv=[], started_at=datetime.now(UTC))
            for block, (arm, tok_s) in enumerate((("baseline", baseline), ("variant", variant)))]


def _store(engine: Engine, specs: list[JobSpec], variant_tok_s: float) -> None:
    """Register ``specs`` and give each job a baseline at 100 tok/s."""
    job_ids = repo.register(engine, specs[0].campaign, "m.yaml", specs)
    with Session(engine) as session, session.begin():
        for job_id, spec in zip(job_ids, specs, strict=True):
            session.add_all(_runs(job_id, spec.build.name, 100.0, variant_tok_s))


def test_compare_matches_the_same_experiment_across_campaigns(
        engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    _store(engine, _specs(tmp_path, "before"), 150.0)
    _store(engine, _specs(tmp_path, "after", pairs=3, **{"max-pairs": 7}), 180.0)
    [row] = compare(engine, "before", "after").to_dict(orient="records")
    assert row["variant"] == "ngram" and row["change"] == pytest.approx(1.2)
    assert row["build_a"] == row["build_b"] == "cpu"


def test_compare_matches_two_builds_of_one_campaign(engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    specs = _specs(tmp_path, "builds", build=["b1", "b2"])
    assert {spec.varying["build"] for spec in specs} == {"b1", "b2"}
    job_ids = repo.register(engine, "builds", "m.yaml", specs)
    with Session(engine) as session, session.begin():
        for job_id, spec in zip(job_ids, specs, strict=True):
            session.add_all(_runs(job_id, spec.build.name, 100.0,
                                  120.0 if spec.build.name == "b1" else 150.0))
    [row] = compare(engine, "builds", "builds", build_a="b1", build_b="b2").to_dict(
        orient="records")
    assert (row["build_a"], row["build_b"]) == ("b1", "b2")
    assert row["change"] == pytest.approx(1.25)
    with pytest.raises(ConfigError, match="no job on build 'b3'"):
        compare(engine, "builds", "builds", build_a="b3")


def test_compare_pairs_each_build_with_itself_when_both_campaigns_sweep_builds(
        engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    _store(engine, _specs(tmp_path, "before", build=["b1", "b2"]), 150.0)
    _store(engine, _specs(tmp_path, "after", build=["b1", "b2"]), 150.0)
    frame = compare(engine, "before", "after")
    assert sorted(zip(frame["build_a"], frame["build_b"], strict=True)) == [
        ("b1", "b1"), ("b2", "b2")]


def test_a_fork_variant_matches_only_the_same_fork(tmp_path: Path) -> None:
    fork = {"variants": [{"name": "fork", "build": "turbo", "flags": {"threads": 4}}]}
    [mainline] = _specs(tmp_path, "a", **fork)
    [rebuilt] = _specs(tmp_path, "b", build="cpu-2", **fork)
    [other] = _specs(tmp_path, "c", variants=[{"name": "fork", "build": "turbo-2",
                                                "flags": {"threads": 4}}])
    assert mainline.comparable_key == rebuilt.comparable_key != other.comparable_key


def _insert_at_0006(engine: Engine, spec: JobSpec, campaign_id: int,
                    stored: dict[str, Any] | None = None) -> int:
    """A job row as the farm wrote it before job.comparable_key existed, its spec as
    ``stored`` (default: ``spec``'s)."""
    job = sa.table("job", *(sa.column(name) for name in (
        "id", "campaign_id", "job_key", "model_name", "build_name", "variant_name", "state",
        "gpu_class", "attempt", "max_attempts")), sa.column("varying", sa.JSON()),
        sa.column("spec", sa.JSON()))
    with engine.begin() as connection:
        return int(connection.execute(job.insert().returning(job.c.id), {
            "campaign_id": campaign_id, "job_key": spec.job_key, "model_name": spec.model.name,
            "build_name": spec.build.name, "variant_name": spec.variant.name,
            "varying": spec.varying, "state": "done",
            "spec": _dump_at_0006(spec) if stored is None else stored,
            "gpu_class": spec.gpu_class, "attempt": 1, "max_attempts": 3}).scalar_one())


def _dump_at_0006(spec: JobSpec) -> dict[str, Any]:
    """``spec`` as the farm of revision 0006 stored it: without the fields added since (the
    busy-node policy of 0017, the stop rule), which that farm's specs never had."""
    dump = spec.model_dump(mode="json")
    for later in NEWER_THAN_0007:
        del dump[later]
    return dump


_RUN_COLUMNS_0006 = ("job_id", "arm", "arm_name", "block", "pair", "position", "prompt_id",
                     "prompt_category", "repetition", "prompt_tokens", "generated_tokens",
                     "decode_tok_s", "ttft_ms", "e2e_ms", "spec_drafted", "spec_accepted",
                     "text", "server_version", "build_name", "model_file", "model_size",
                     "model_sha256", "host", "argv", "started_at")


def test_compare_works_on_a_store_created_before_comparable_keys(
        engine: Engine, url: str, tmp_path: Path) -> None:
    upgrade(engine, "0006")
    campaign = sa.table("campaign", sa.column("id"), sa.column("name"), sa.column("matrix_path"))
    for campaign_id, name, tok_s in ((1, "before", 150.0), (2, "after", 120.0)):
        [spec] = _specs(tmp_path, name)
        with engine.begin() as connection:
            connection.execute(campaign.insert(), {"id": campaign_id, "name": name,
                                                   "matrix_path": "m.yaml"})
        job_id = _insert_at_0006(engine, spec, campaign_id)
        # Columns of that schema only: the model's later ones do not exist yet.
        rows = [{column: getattr(run, column) for column in _RUN_COLUMNS_0006}
                for run in _runs(job_id, "cpu", 100.0, tok_s)]
        with engine.begin() as connection:
            connection.execute(sa.insert(Run), rows)
    # A spec from before builds moved into the arms: unreadable now, so it keeps no key.
    _insert_at_0006(engine, spec.model_copy(update={"variant": spec.variant.model_copy(
        update={"name": "old"})}), 1, stored={"build": {"name": "cpu"}})
    upgrade(engine)
    with Session(engine) as session:
        keys = dict(session.execute(sa.select(Job.variant_name, Job.comparable_key)).all())
    assert keys == {"ngram": spec.comparable_key, "old": None}
    result = CliRunner().invoke(cli, ["compare", "before", "after", "--format", "json"],
                                env={"FARM_DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["change"] == pytest.approx(0.8) and row["verdict"] == "no interval"
