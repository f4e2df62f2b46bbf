"""``farm export``'s runs, typed by the store's schema, not by what one node happened to fill.

A CPU node leaves every GPU column empty; typed from the values alone, those columns would
be Parquet's ``null`` type there and a float or string on a GPU node, and the two exports
would not concatenate. Here each column takes its type from its ``Run`` column (JSON lists
in farm.report.parquet), and times are UTC with their offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# The job's columns beside the run's (``farm.results.runs.runs_frame``).
_JOB_COLUMNS = ("campaign", "job_key", "model", "variant", "kind")


def _dtype(sql_type: str) -> str:
    """The pandas dtype of a SQL column type (nullable: a CPU node leaves GPU columns empty)."""
    return {"Integer": "Int64", "BigInteger": "Int64", "Float": "float64",
            "Boolean": "boolean", "String": "string", "Text": "string"}.get(sql_type, "object")


def typed_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with every column of the store's type and ``node_top`` as records;
    ``started_at`` in UTC with its offset."""
    import pandas as pd

    from farm.store.models import Run

    types = {column.name: type(column.type).__name__ for column in Run.__table__.columns}
    typed = runs.copy()
    if "node_top" in typed:
        # Stored as [name, pid, cores] triples; a record each, so Parquet types the column.
        typed["node_top"] = typed["node_top"].map(
            lambda top: None if not isinstance(top, list) else [
                {"process": name, "pid": pid, "cores": cores} for name, pid, cores in top])
    for name in typed.columns:
        if types.get(name) == "DateTime":
            times = pd.to_datetime(typed[name])
            typed[name] = (times.dt.tz_localize("UTC") if times.dt.tz is None
                           else times.dt.tz_convert("UTC"))
        elif name in _JOB_COLUMNS or name in types:
            dtype = "string" if name in _JOB_COLUMNS else _dtype(types[name])
            if dtype != "object":
                typed[name] = typed[name].astype(dtype)  # type: ignore[call-overload]
    return typed
