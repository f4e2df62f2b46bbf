"""The report's one column spec (farm/columns.py): every field of the job summary and its
run facts is a report column, every column has a field or its own dtype, the per-job
tables show only report columns, and the frame's dtypes are the fields' types."""

from __future__ import annotations

import math

import pytest

from farm.columns import (
    JOB_TABLE,
    OWN_DTYPES,
    REPORT,
    REPORT_COLUMNS,
    columns_of,
    report_frame,
    table_columns,
)
from farm.report.html_tables import JOB_CELLS as HTML_CELLS
from farm.report.text import JOB_CELLS as TEXT_CELLS
from farm.summary import FACTS, STATISTICS


def test_every_summary_field_is_a_report_column() -> None:
    missing = [name for name in (*STATISTICS, *FACTS) if name not in REPORT_COLUMNS]
    assert not missing, f"summary fields without a report column: {missing}"


def test_every_report_column_is_a_summary_field_or_says_its_own_dtype() -> None:
    fields = {*STATISTICS, *FACTS}
    assert not [name for name in REPORT_COLUMNS if name not in fields and name not in OWN_DTYPES]
    assert not [name for name in OWN_DTYPES if name in fields], "typed twice"
    assert len(set(REPORT_COLUMNS)) == len(REPORT_COLUMNS)


def test_the_tables_show_report_columns_each_with_a_cell_in_every_place() -> None:
    assert {name for column in JOB_TABLE for name in column.shows} <= set(REPORT_COLUMNS)
    assert [column.header for column in table_columns("text")] == list(TEXT_CELLS)
    assert [column.header for column in table_columns("html")] == list(HTML_CELLS)
    # One header per column: the page and the terminal name a column alike.
    assert len({column.header for column in JOB_TABLE}) == len(JOB_TABLE)


def test_dtypes_come_from_the_fields_types() -> None:
    dtypes = {column.name: column.dtype for column in REPORT}
    assert dtypes["tpot_p50_ms_variant"] == dtypes["e2e_p99_ms_variant"] == "float"
    assert dtypes["drafted"] == "count" and dtypes["df"] == "optional count"
    assert dtypes["agreement_suspect"] == dtypes["slot_acceptance"] == "object"
    assert set(columns_of("count")) == {"drafted", "accepted", "runs", "throttled_runs",
                                        "spilled_runs"}


@pytest.mark.parametrize("value", [12, None])
def test_a_latency_column_loads_as_float_whatever_the_values(value: int | None) -> None:
    # The defect issue 36 found: tpot_p50_ms_* and e2e_p50_ms_*, tpot_p99_ms_variant and
    # e2e_p99_ms_variant were left to pandas' guess (int64 for whole numbers, object for
    # None), because a hand list of float columns had drifted from the summary.
    row = dict.fromkeys(REPORT_COLUMNS) | dict.fromkeys(columns_of("count"), 0)
    frame = report_frame([row | dict.fromkeys(("tpot_p50_ms_baseline", "tpot_p50_ms_variant",
                                               "tpot_p99_ms_variant", "e2e_p50_ms_baseline",
                                               "e2e_p50_ms_variant", "e2e_p99_ms_variant"),
                                              value)])
    for name in ("tpot_p50_ms_baseline", "tpot_p99_ms_variant", "e2e_p50_ms_variant"):
        assert frame[name].dtype == "float64", name
        assert frame[name].iloc[0] == value or (value is None and math.isnan(
            frame[name].iloc[0]))
    assert str(frame["df"].dtype) == "Int64"
