"""``farm export --format parquet``: the typed runs (``farm.results.export.typed_runs``) as
Parquet, each JSON list column of one type even where every value is missing, so that the
exports of a CPU node and a GPU node concatenate."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


def _lists() -> dict[str, pa.DataType]:
    """The JSON columns of a run, each a list of one type."""
    import pyarrow as pa

    return {"argv": pa.list_(pa.string()), "tokens": pa.list_(pa.int64()),
            "spec_accepted_per_pos": pa.list_(pa.int64()),
            "throttle_reasons": pa.list_(pa.string()),
            "node_top": pa.list_(pa.struct([("process", pa.string()), ("pid", pa.int64()),
                                            ("cores", pa.float64())]))}


def runs_parquet(runs: pd.DataFrame) -> bytes:
    """Typed runs as Parquet, the JSON lists typed even where every value is missing."""
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

