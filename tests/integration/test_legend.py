"""Flags explained where they appear: under `farm report`'s table, one line per flag its rows
show (what it means, what to do), on the store of every summary shape ever stored."""

from __future__ import annotations

from pathlib import Path

from farm.report.legend import MEANINGS, flag_legend
from tests.helpers import run_cli
from tests.integration.test_golden_reports import load_fixture


def test_each_flag_shown_gets_its_line_in_the_report_order() -> None:
    shown = ["drift, best of 2: [0.82, 1.52] together",
             "3 runs stopped at another length, server_start",
             "busy node: other processes used 0.9 of a core during 3 of 12 blocks; more in "
             "the variant's (1 baseline, 2 variant): the speedup is biased; blocks waited 40 s "
             "for quiet", ""]
    meaning = dict(MEANINGS)
    assert flag_legend(shown) == [
        f"{name}: {meaning[name]}" for name in (
            "drift", "busy node", "blocks waited", "runs stopped at another length",
            "best of")] + ["server_start: the job failed with this failure class; `farm "
                           "status` says why, and the server logs are in `farm paths`' logs"]
    assert flag_legend(["", ""]) == []


def test_a_sequential_designs_stop_is_explained_as_its_answer_not_as_a_failure() -> None:
    """A decision or precision job shows how it stopped among its flags; each wording of
    farm.stats.sequential gets its meaning, none the failure-class line."""
    meaning = dict(MEANINGS)
    shown = ["faster (decided after 4 of at most 12 pairs)",
             "slower (decided after 6 of at most 12 pairs)",
             "within ±3% (decided after 9 of at most 12 pairs)",
             "undecided after 5 of at most 12 pairs: more pairs would not decide it",
             "undecided at max pairs (12)",
             "target met at 7 of at most 12 pairs (±2.8%)"]
    assert flag_legend(shown) == [
        f"{name}: {meaning[name]}" for name in (
            "faster (decided", "slower (decided", "within ±", "undecided", "target met")]


def test_farm_report_explains_the_flags_of_its_table_and_only_those(
        tmp_path: Path, isolated_data_dir: Path) -> None:
    isolated_data_dir.mkdir()
    load_fixture(f"sqlite:///{isolated_data_dir / 'farm.db'}")
    table = run_cli("report", "--all", "--wide")
    assert table.exit_code == 0, table.output
    legend = [line for line in table.stdout.splitlines()
              if any(line.startswith(f"{name}: ") for name, _ in MEANINGS)]
    assert {line.split(":")[0] for line in legend} >= {"drift", "best of"}
    for name, meaning in MEANINGS:
        explained = f"{name}: {meaning}" in " ".join(table.stdout.split())
        assert explained == (name in {line.split(":")[0] for line in legend})
    assert "drift: " not in run_cli("report", "--all", "--format", "csv").stdout
