"""Each per-run metric is declared once (``farm.run_metrics``) and every place made from it
agrees: the store's column and the migration that added it, a bundle's field, where a worker
finds it and the row it writes, the run facts summarized per arm, their SQL and their report
columns. A metric named in one of those places and not the others fails here."""

from __future__ import annotations

import ast
import inspect
import re
import types
import typing
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy import text

from farm.board.bundle import DROPPED_RUN_COLUMNS, FORMAT_SCHEMA, UNIT_BOUNDS, RunRecord
from farm.columns import REPORT_COLUMNS
from farm.matrix.spec import Prompt
from farm.results.runs import DRIFT_COLUMNS, STATS_COLUMNS
from farm.results.sql import run_facts_sql
from farm.run_metrics import RUN_METRICS, RunMetric, Unit
from farm.store.db import make_engine, upgrade
from farm.store.models import Base, Run, Stream
from farm.summary import FACTS
from workers.job.checks import Preflight
from workers.job.results import BlockStart, RunKey, RunResult, Slot
from workers.job.runtime.client import Generation, SpecCounters
from workers.job.runtime.server_log import ContextMemory, SpecStats
from workers.job.sinks import run_row
from workers.job.telemetry import RunTelemetry
from workers.job.telemetry.node import CpuState, NodeLoad, OtherWork

ROOT = Path(__file__).resolve().parents[2]
NAMES = [metric.name for metric in RUN_METRICS]
ARM_FACTS = [fact.name for metric in RUN_METRICS for fact in metric.per_arm]
PER_STREAM = [metric for metric in RUN_METRICS if metric.stream]
PYTHON_TYPES = {"float": float, "int": int, "flag": bool, "text": str}


def _hand_written(path: str, class_name: str) -> set[str]:
    """The names ``class_name`` in ``path`` annotates by hand (its columns or fields)."""
    tree = ast.parse((ROOT / path).read_text())
    [found] = [node for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef) and node.name == class_name]
    return {node.target.id for node in found.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


def test_each_metric_and_each_of_its_facts_is_named_once() -> None:
    assert len(set(NAMES)) == len(NAMES)
    assert len(set(ARM_FACTS)) == len(ARM_FACTS)


@pytest.mark.parametrize(("table", "metrics"), [(Run, RUN_METRICS), (Stream, PER_STREAM)],
                         ids=["run", "stream"])
def test_a_table_is_its_hand_written_columns_and_its_metrics(
        table: type[Base], metrics: list[RunMetric]) -> None:
    hand = _hand_written("farm/store/models.py", table.__name__) - {"job", "streams", "run"}
    assert not hand & set(NAMES), "declare a metric in farm.run_metrics alone"
    columns = table.__table__.columns
    assert set(columns.keys()) == hand | {metric.name for metric in metrics}
    for metric in metrics:
        column = columns[metric.name]
        assert column.type.python_type is PYTHON_TYPES[metric.kind], metric.name
        assert column.nullable is not metric.required, metric.name


@pytest.mark.parametrize("metric", RUN_METRICS, ids=NAMES)
def test_each_metric_is_added_by_the_migration_it_names(metric: RunMetric) -> None:
    [revision] = (ROOT / "migrations" / "versions").glob(f"{metric.since}_*.py")
    assert f'"{metric.name}"' in revision.read_text(), (
        f"{metric.name}: migration {revision.name} does not add it; a new metric's column "
        "comes with a new migration, named by the metric's since")


def test_a_bundle_carries_each_shared_metric_absent_only_from_older_bundles() -> None:
    assert not _hand_written("farm/board/bundle.py", "RunRecord") & set(NAMES)
    assert set(UNIT_BOUNDS) == set(typing.get_args(Unit)), "bound every unit in a bundle"
    for metric in RUN_METRICS:
        if not metric.shared:
            assert metric.name in DROPPED_RUN_COLUMNS and metric.name not in RunRecord.model_fields
            continue
        field = RunRecord.model_fields[metric.name]
        assert field.is_required() is (metric.required or metric.since <= FORMAT_SCHEMA), (
            f"{metric.name}: a metric added after bundle format 1 may be absent from a bundle")


def _attribute_type(owner: type, name: str) -> Any:
    """The declared type of ``owner.name``: a property's return or a dataclass field's."""
    found = inspect.getattr_static(owner, name, None)
    if isinstance(found, property):
        assert found.fget is not None
        return typing.get_type_hints(found.fget)["return"]
    hints = typing.get_type_hints(owner)
    assert name in hints, f"{owner.__name__} has no {name}"
    return hints[name]


def _source_type(source: str) -> tuple[Any, bool]:
    """The type ``source`` ends in from a ``RunResult``, and whether a None may come on the
    way (a value or an object it passes through)."""
    owner: Any = RunResult
    optional = False
    for name in source.split("."):
        found = _attribute_type(owner, name)
        options = typing.get_args(found) if isinstance(found, types.UnionType) else (found,)
        optional |= type(None) in options
        [owner] = [option for option in options if option is not type(None)]
    return owner, optional


@pytest.mark.parametrize("metric", RUN_METRICS, ids=NAMES)
def test_a_worker_finds_each_metric_where_its_source_says(metric: RunMetric) -> None:
    found, optional = _source_type(metric.source)
    assert found is PYTHON_TYPES[metric.kind], f"{metric.source} is a {found}"
    assert not (metric.required and optional), f"{metric.source} may be None"


def _generation(sent: float) -> Generation:
    return Generation(text="hi", prompt_tokens=10, generated_tokens=20, prompt_tok_s=300.0,
                      decode_tok_s=50.0, ttft_ms=12.0, e2e_ms=400.0, draft_n=8,
                      draft_accepted=5, chunk_gaps_ms=[3.0, 9.0, 1.0], sent_at=sent,
                      first_at=sent + 0.01, last_at=sent + 0.4)


def _result() -> RunResult:
    """A run of two streams on a GPU node, every measurement taken."""
    streams = (_generation(1.0), _generation(1.05))
    return RunResult(
        key=RunKey("variant", 1, "p", 0), slot=Slot(1, 0, 1, "variant"),
        prompt=Prompt(id="p", text="t", category="c"), arm_name="v", build_name="b",
        generation=streams[0], streams=streams, seeds=(7, 8),
        counters=SpecCounters(3, 9, 6, (4, 2)),
        spec_stats=SpecStats(1, 2, 3, 4, 5, 6, 0.5, 1.5, 2.5),
        memory=ContextMemory(11.0, 2.0), argv=["llama-server"], sandboxed=True,
        server_log="server.log", started_at=datetime(2026, 1, 1, tzinfo=UTC),
        telemetry=RunTelemetry(5.0, 100.0, 2000.0, 1500.0, 70, False, [], 900.0, 1.5),
        slot_speculative=True, weights_spilled=False, tokens=[1, 2], gpu_name="GPU",
        gpu_memory_mb=8000.0,
        node=NodeLoad(OtherWork(1.0, 0.25, (("make", 1, 0.2),)),
                      CpuState(0.5, "performance", 3000.0), 1, 2.5),
        start=BlockStart(4.0, 0.7))


def _row() -> Run:
    checked = SimpleNamespace(
        probe=lambda arm: SimpleNamespace(version="v1"),
        spec=SimpleNamespace(arm=lambda arm: SimpleNamespace(build=SimpleNamespace(source=None)),
                             model=SimpleNamespace(provenance=None)),
        model=SimpleNamespace(file_name="m.gguf", size=3, sha256="0" * 64))
    return run_row(1, _result(), cast(Preflight, checked), "host", "default")


def test_a_run_row_holds_every_metric_its_result_measured() -> None:
    row = _row()
    values = {name: getattr(row, name) for name in NAMES}
    assert [name for name, value in values.items() if value is None] == []
    # The streams' window: 1.01 s to 1.45 s, both decoding from 1.06 s to 1.40 s.
    assert {name: values[name] for name in ("decode_tok_s", "spec_drafted", "spec_draft_ms",
                                            "server_start_s", "overlap")} == {
        "decode_tok_s": 50.0, "spec_drafted": 9, "spec_draft_ms": 1.5, "server_start_s": 4.0,
        "overlap": pytest.approx(0.34 / 0.44)}


def test_each_stream_row_holds_every_metric_declared_per_stream() -> None:
    streams = _row().streams
    assert [stream.stream for stream in streams] == [0, 1]
    assert [(stream.stream, metric.name) for stream in streams for metric in PER_STREAM
            if getattr(stream, metric.name) is None] == []


def test_each_metric_summarized_per_arm_is_a_run_fact_its_sql_makes(tmp_path: Path) -> None:
    assert not _hand_written("farm/summary.py", "_CountedFacts") & set(ARM_FACTS)
    assert set(ARM_FACTS) <= set(FACTS) and set(FACTS) <= set(REPORT_COLUMNS)
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    try:
        upgrade(engine)
        with engine.connect() as connection:
            made = connection.execute(text(run_facts_sql("job.id = 0", "sqlite"))).keys()
    finally:
        engine.dispose()
    assert list(made) == ["job_id", *FACTS]


def test_what_reads_runs_by_name_names_run_columns() -> None:
    columns = set(Run.__table__.columns.keys())
    read = set(re.findall(r"\brun\.(\w+)", run_facts_sql("job.id = 0", "sqlite", "client")))
    assert read | set(STATS_COLUMNS) | set(DRIFT_COLUMNS) <= columns
    assert {name for name in STATS_COLUMNS if name in NAMES} == {
        metric.name for metric in RUN_METRICS if metric.statistics}
