"""``farm export``'s runs, typed by the store's schema, not by what one node happened to fill.

A CPU node leaves every GPU column empty; typed from the values alone, those columns would
be Parquet's ``null`` type there and a float or string on a GPU node, and the two exports
would not concatenate. Here each column takes its type from its ``Run`` column (JSON lists
from ``_LISTS``), and times are UTC with their offset.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# The job's columns beside the run's (``farm.results.runs.runs_frame``).
_JOB_COLUMNS = ("campaign", "job_key", "model", "variant", "kind")


def _lists() -> dict[str, pa.DataType]:
    """The JSON columns of a run, each a list of one type."""
    import pyarrow as pa

    return {"argv": pa.list_(pa.string()), "tokens": pa.list_(pa.int64()),
            "spec_accepted_per_pos": pa.list_(pa.int64()),
            "throttle_reasons": pa.list_(pa.string()),
            "node_top": pa.list_(pa.struct([("process", pa.string()), ("pid", pa.int64()),
                                            ("cores", pa.float64())]))}


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


def runs_parquet(runs: pd.DataFrame) -> bytes:
    """``typed_runs`` as Parquet, the JSON lists typed even where every value is missing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.Schema.from_pandas(runs, preserve_index=False)
    for name, list_type in _lists().items():
        if name in runs:
            schema = schema.set(schema.get_field_index(name), pa.field(name, list_type))
    table = pa.Table.from_pandas(runs, schema=schema, preserve_index=False)
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()

