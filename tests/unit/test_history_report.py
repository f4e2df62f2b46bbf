"""`farm history` as it prints: each build's row names the campaign of its job, a line
under the tables says what the acceptance columns measure, and positions past the fourth
are folded (named in that line) unless `--wide`."""

from __future__ import annotations

import json

import pytest

from farm.report import kinds
from farm.report.formats import Target, render
from farm.report.history import acceptance_legend, history_html, history_sheets
from farm.results.history import History
from tests.fixtures.histories import one_job_history

KEY = "e" * 64
BUILDS = ["111111111111", "222222222222"]
# The latest job per key and build, whichever campaign ran it.
CAMPAIGNS = ["my-first-campaign", "my-second-campaign"]
LEGEND = ("acceptance @1..@{last}: the share of drafts accepted at each draft position; "
          "acceptance length: the mean accepted length per draft, (accepted + drafts) / "
          "drafts (not the report's accept, accepted over drafted tokens)")


def _history(positions: int = 13) -> History:
    """One n-gram job on two builds of two campaigns, acceptance at ``positions``."""
    levels = {"speedup": 1.08, "baseline_tok_s": 120.0, "variant_tok_s": 130.0,
              **{f"acceptance_{n}": 0.9 / n for n in range(1, positions + 1)},
              "mean_accepted_length": 1.8, "draft_ms_per_token": 0.1,
              "verify_ms_per_token": 8.0}
    return one_job_history({series: [value] * 2 for series, value in levels.items()}, BUILDS,
                           [101, 102], CAMPAIGNS, key=KEY,
                           label="smollm2 · ngram · spec-type=ngram-simple")


def _printed(history: History, fmt: str = "table", *, wide: bool = False) -> str:
    printed = render(kinds.History(history, "history of matrix.yaml"), fmt, Target(wide))
    assert isinstance(printed, str)
    return printed


@pytest.fixture(autouse=True)
def _pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables at their natural width, as in a pipe."""
    monkeypatch.delenv("COLUMNS", raising=False)


def test_each_build_row_names_the_campaign_its_figures_come_from() -> None:
    [sheet] = history_sheets(_history(), "history")
    headers = [column.header for column in sheet.columns]
    assert headers[:4] == ["build", "number", "campaign", "speedup"]
    assert sheet.texts[headers.index("campaign")] == CAMPAIGNS
    assert not sheet.columns[headers.index("campaign")].numeric
    markdown = _printed(_history(), "md")
    assert "| build | number | campaign | speedup |" in markdown
    assert "| 222222222222 | 102 | my-second-campaign | 1.08" in markdown


def test_json_points_carry_the_campaign_of_their_job() -> None:
    found = json.loads(_printed(_history(), "json"))
    assert {(point["build"], point["campaign"]) for point in found["points"]} == set(
        zip(BUILDS, CAMPAIGNS, strict=True))
    assert [job["campaign"] for job in found["jobs"]] == CAMPAIGNS


def test_positions_past_the_fourth_are_folded_and_the_line_under_says_how_to_see_them(
        ) -> None:
    printed = _printed(_history())
    header = next(line for line in printed.splitlines() if "speedup" in line)
    assert [f"acceptance @{n}" in header for n in (1, 4, 5, 13)] == [True, True, False, False]
    assert "acceptance length" in header
    assert printed.splitlines()[-1] == (LEGEND.format(last=13)
                                        + "; @5..@13 folded (--wide shows them)")
    markdown = _printed(_history(), "md")
    assert "acceptance @4 |" in markdown and "acceptance @5" not in markdown
    assert markdown.rstrip("\n").splitlines()[-1].endswith("@5..@13 folded (--wide shows them)")


def test_wide_shows_every_position_and_folds_none() -> None:
    for fmt in ("table", "md"):
        printed = _printed(_history(), fmt, wide=True)
        assert all(f"acceptance @{n}" in printed for n in range(1, 14)), fmt
        assert LEGEND.format(last=13) in printed and "folded" not in printed, fmt


def test_four_positions_or_fewer_fold_nothing_and_still_explain_the_columns() -> None:
    printed = _printed(_history(positions=3))
    assert printed.splitlines()[-1] == LEGEND.format(last=3)
    assert acceptance_legend(_history(positions=1)) == LEGEND.replace(
        "acceptance @1..@{last}", "acceptance @1")


def test_the_legend_wraps_to_the_terminal_and_is_absent_without_acceptance(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    tail = _printed(_history()).split("\u2518\n")[-1]
    assert " ".join(tail.split()).endswith("@5..@13 folded (--wide shows them)")
    history = _history()
    speeds = history.points[~history.points["series"].str.startswith("acceptance")
                            & (history.points["series"] != "mean_accepted_length")]
    assert acceptance_legend(History(history.builds, history.jobs, speeds, history.changes,
                                     history.described)) is None


def test_the_page_keeps_every_position_and_explains_them() -> None:
    page = history_html(_history(), "history")
    assert "<th>acceptance @13</th>" in page and "<th>campaign</th>" in page
    assert "Acceptance @1..@13: the share of drafts accepted at each draft position" in page
