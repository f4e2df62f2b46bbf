"""Where the time goes: llama-server's own speculative statistics, read from each block's
log (it runs at --log-verbosity 4), stored per run and reported per job as draft vs verify
milliseconds per token."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_farm_run import farm, report_rows
from tests.helpers import matrix_dict, write_matrix
from workers.setup.provision import Provisioned

pytestmark = [pytest.mark.server, pytest.mark.alone]

SPEC_COLUMNS = ("spec_draft_calls", "spec_accept_calls", "spec_gen_drafts", "spec_acc_drafts",
                "spec_gen_tokens", "spec_acc_tokens", "spec_begin_ms", "spec_draft_ms",
                "spec_accept_ms")


def _runs(data_dir: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(data_dir / "farm.db") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(f"select arm, spec_drafted, spec_accepted, server_log, "
                          f"{', '.join(SPEC_COLUMNS)} from run").fetchall()
    return [dict(row) for row in rows]


def _summary(data_dir: Path) -> dict[str, Any]:
    with sqlite3.connect(data_dir / "farm.db") as db:
        [(summary,)] = db.execute("select summary from job").fetchall()
    return dict(json.loads(summary))


def test_ngram_runs_store_the_servers_statistics_and_the_report_splits_decode_time(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    result = farm("run", str(write_matrix(tmp_path, matrix_dict(smollm2))))
    assert result.returncode == 0, result.stderr

    runs = _runs(isolated_data_dir)
    assert {run["arm"] for run in runs} == {"baseline", "variant"}
    for run in runs:
        assert "--log-verbosity 4" in Path(run["server_log"]).read_text()
        if run["arm"] == "baseline":
            assert all(run[column] is None for column in SPEC_COLUMNS)
            continue
        # The log's counters of this request agree with the /metrics deltas around it.
        assert run["spec_gen_tokens"] == run["spec_drafted"] > 0
        assert run["spec_acc_tokens"] == run["spec_accepted"]
        assert run["spec_draft_calls"] >= run["spec_gen_drafts"] >= run["spec_acc_drafts"]
        assert run["spec_draft_ms"] > 0 and run["spec_begin_ms"] >= 0

    [row] = report_rows()
    assert row["draft_ms_per_token"] > 0 and row["verify_ms_per_token"] > 0
    # Drafting, verifying and the accept timer make up the variant's decode time per token
    # (summed over runs here, the tok/s a median of two runs of the same length).
    per_token = row["draft_ms_per_token"] + row["verify_ms_per_token"]
    assert per_token == pytest.approx(1000.0 / row["variant_tok_s"], rel=0.25)
    summary = _summary(isolated_data_dir)
    assert summary["facts"]["draft_ms_per_token"] == pytest.approx(row["draft_ms_per_token"])
    assert summary["facts"]["verify_ms_per_token"] == pytest.approx(row["verify_ms_per_token"])


def test_mtp_oracle_runs_store_every_draft_accepted_and_its_draft_time(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    oracle = provisioned.models["qwen35-mtp-oracle"]
    matrix = matrix_dict(oracle, **{
        "models": [{"name": "oracle", "path": str(oracle)}], "prompt-mode": "completion",
        "prompts": ["hello speculative world"], "n-predict": 64, "flags": {
            "ctx-size": 256, "threads": 2},
        "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp",
                                               "spec-draft-n-max": 3}}]})
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr

    variant = [run for run in _runs(isolated_data_dir) if run["arm"] == "variant"]
    assert len(variant) == 2
    for run in variant:
        assert run["spec_acc_tokens"] == run["spec_gen_tokens"] == run["spec_drafted"] > 0
        assert run["spec_accept_calls"] == run["spec_gen_drafts"] == run["spec_acc_drafts"]
        assert run["spec_draft_ms"] > 0
    [row] = report_rows()
    assert row["draft_ms_per_token"] > 0 and row["verify_ms_per_token"] > 0
