"""``farm recommend``'s prediction beside the board's rows, and settings typed differently
that are one setting.

The store is ``farm recommend``'s known answer (tests/integration/test_recommend.py): an
engine whose step with k drafted tokens costs 1 + 0.3 k plain steps, its synthetic-acceptance
jobs the engine curve, and a drafter measured at n-max 4 whose acceptance falls off after
position 2, so that n-max 2 is predicted fastest (2.7 / 1.6 = 1.69x) and n-max 4 predicted
as measured (2.85 / 2.2 = 1.30x). Shared as one machine's bundle, the board shows the
measured n-max 4 row with its prediction beside it, and n-max 2, never measured, as the
setting `farm recommend` predicts fastest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.board.add import add_bundle
from farm.board.bundle import write_bundle
from farm.board.share import Places, collect
from farm.board.view import canonical_flags, setting_text
from farm.matrix.load import load_matrix
from farm.store.db import make_engine, upgrade
from tests.helpers import matrix_dict, run_cli, write_matrix
from tests.integration.test_recommend import known_answer

MACHINE = "0123456789abcdef" * 2
MEASURED = "--ctx-size 1024 --spec-draft-n-max 4 --spec-type draft-mtp"
PICK = "--ctx-size 1024 --spec-draft-n-max 2 --spec-type draft-mtp"


@pytest.fixture
def board(tmp_path: Path) -> dict[str, str]:
    """A board holding one machine's bundle of the engine curve and the drafter."""
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    upgrade(engine)
    known_answer(engine, tmp_path)
    jobs, runs = collect(engine, ["curve", "drafter"], machine_id=MACHINE,
                         places=Places(tmp_path / "models"))
    engine.dispose()
    bundle = tmp_path / "mine.zip"
    write_bundle(bundle, machine_id=MACHINE, campaigns=["curve", "drafter"], with_host=False,
                 jobs=jobs, runs=runs)
    url = f"sqlite:///{tmp_path / 'board.db'}"
    board_engine = make_engine(url)
    upgrade(board_engine)
    added = add_bundle(board_engine, bundle, require_signed=False)
    board_engine.dispose()
    # Every engine-curve job is taken (a point of the curve), none refused.
    assert (added.jobs, added.refused) == (22, [])
    return {"FARM_DATA_DIR": str(tmp_path / "data"), "FARM_BOARD_URL": url}


def test_the_board_shows_recommends_prediction_beside_the_measured_row(
        board: dict[str, str]) -> None:
    result = run_cli("board", "show", "--format", "json", env=board)
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    # The engine-curve jobs are points of the curve, never settings of the board.
    [row] = found["rows"]
    assert row["setting"] == MEASURED and row["draft_n_max"] == 4
    assert row["low"] <= 2.85 / 2.2 <= row["high"]
    assert row["predicted_low"] <= 2.85 / 2.2 <= row["predicted_high"]
    assert row["predicted_machines"] == 1
    predicted = {item["draft_n_max"]: item for item in found["predictions"]}
    assert sorted(predicted) == [1, 2, 3, 4]
    assert predicted[2]["predicted_low"] <= 2.7 / 1.6 <= predicted[2]["predicted_high"]
    [best] = found["best"]
    assert best["setting"] == MEASURED and best["recommended"] == PICK
    assert best["recommended_speedup"] == max(item["predicted"] for item in predicted.values())
    table = run_cli("board", "show", "--wide", env=board)
    assert table.exit_code == 0, table.output
    assert "farm recommend predicts" in table.stdout and "predicted [95% CI]" in table.stdout


def test_the_site_goes_through_the_format_registry(board: dict[str, str],
                                                   tmp_path: Path) -> None:
    site = tmp_path / "site"
    shown = run_cli("board", "show", "--format", "site", "-o", str(site), env=board)
    assert shown.exit_code == 0, shown.output
    assert "wrote 3 files to" in shown.stderr and shown.stdout == ""
    page = next((site / "models").glob("*.html")).read_text(encoding="utf-8")
    assert "farm recommend predicts" in page
    again = tmp_path / "again"
    assert run_cli("board", "site", "-o", str(again), env=board).exit_code == 0
    assert sorted(path.name for path in again.rglob("*.html")) == sorted(
        path.name for path in site.rglob("*.html"))
    refused = run_cli("board", "show", "--format", "site", env=board)
    assert refused.exit_code != 0 and "give -o board/" in refused.output


def test_a_setting_typed_with_aliases_or_in_another_order_is_one_setting(
        tmp_path: Path) -> None:
    spec = load_matrix(write_matrix(tmp_path, matrix_dict(tmp_path / "m.gguf", variants=[
        {"name": "mtp", "flags": {"spec-type": "draft-mtp", "spec-draft-n-max": 3,
                                  "n-gpu-layers": 99}}])))[1][0]
    typed = spec.model_copy(update={"variant": spec.variant.model_copy(update={"flags": (
        ("draft-max", 3), ("ngl", 99), *((name, value) for name, value in reversed(
            spec.variant.flags) if name not in ("spec-draft-n-max", "n-gpu-layers")))})})
    assert setting_text(canonical_flags(typed)) == setting_text(canonical_flags(spec))
    assert "--n-gpu-layers 99" in setting_text(canonical_flags(typed))
    assert "--spec-draft-n-max 2" in setting_text(canonical_flags(typed), 2)
