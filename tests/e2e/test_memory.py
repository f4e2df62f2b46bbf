"""Memory cost from real processes: each run keeps its server's peak RSS (from /proc) and
the sizes the server's log gives its contexts; an MTP arm has a draft context, a
baseline none."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.e2e.test_farm_run import farm, report_rows
from tests.helpers import write_matrix
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server


def test_runs_keep_rss_and_context_sizes_and_only_mtp_has_a_draft_context(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    matrix = {
        "campaign": "memory", "prompt-mode": "completion",
        "models": [{"name": "oracle", "path": str(provisioned.models["qwen35-mtp-oracle"])}],
        "prompts": ["one two three"], "n-predict": 32, "repetitions": 1, "pairs": 1,
        "max-pairs": 1, "flags": {"ctx-size": 256, "threads": 1},
        "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp"}}],
    }
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        rows = {arm: (rss, kv, draft) for arm, rss, kv, draft in db.execute(
            "select arm, rss_mb, kv_mib, draft_context_mib from run")}
    base_rss, base_kv, base_draft = rows["baseline"]
    mtp_rss, mtp_kv, mtp_draft = rows["variant"]
    assert base_rss > 0 and mtp_rss > 0
    assert base_kv > 0 and mtp_kv >= base_kv
    assert base_draft == 0.0 and mtp_draft > 0
    print(f"peak RSS baseline {base_rss:.1f} MiB, MTP {mtp_rss:.1f} MiB "
          f"(+{mtp_rss - base_rss:.1f}); the server says: KV {base_kv:.2f} -> "
          f"{mtp_kv:.2f} MiB, draft context {mtp_draft:.2f} MiB")
    # The report shows the MTP arm's extra memory beside the draft context its log gave.
    [job] = report_rows("memory")
    assert job["draft_context_mib"] == pytest.approx(mtp_draft)
    assert job["memory_cost_mb"] == pytest.approx(mtp_rss - base_rss)
