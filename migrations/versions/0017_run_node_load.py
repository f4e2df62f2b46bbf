"""run.node_*: other work on the node over each run's window (other processes' CPU in
cores, the busiest of them, the load average, the CPU governor and frequency, other
processes on the GPUs) and how long the run's block waited for quiet; job summaries of
version 6 (which add the busy blocks) are written back as version 5 on downgrade

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_COLUMNS = (("node_other_cores", sa.Float()), ("node_top", sa.JSON()),
            ("node_load_1m", sa.Float()), ("cpu_governor", sa.String(100)),
            ("cpu_freq_mhz", sa.Float()), ("gpu_other_processes", sa.Integer()),
            ("busy_wait_s", sa.Float()))
# What version 6 of the job summary added (frozen here).
_SUMMARY_6 = ("measured_blocks", "busy_blocks", "busy_blocks_baseline", "busy_blocks_variant",
              "busy_cores", "busy_wait_s")
_job = sa.table("job", sa.column("id", sa.Integer()), sa.column("summary", sa.JSON()))


def _to_5(summary: dict[str, Any]) -> dict[str, Any]:
    if summary.get("version") != 6:
        return summary
    return {**{key: value for key, value in summary.items() if key not in _SUMMARY_6},
            "version": 5}


def _summaries_to_5(batch: int = 500) -> None:
    connection, last = op.get_bind(), 0
    while rows := connection.execute(
            sa.select(_job.c.id, _job.c.summary).where(_job.c.id > last)
            .order_by(_job.c.id).limit(batch)).all():
        values = [{"job_id": job_id, "new": _to_5(summary)} for job_id, summary in rows
                  if isinstance(summary, dict) and summary.get("version") == 6]
        if values:
            connection.execute(_job.update().where(_job.c.id == sa.bindparam("job_id"))
                               .values(summary=sa.bindparam("new", type_=sa.JSON())), values)
        last = rows[-1].id


def upgrade() -> None:
    drop_views(VIEWS_0013)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name, kind in _COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    create_views(VIEWS_0013)


def downgrade() -> None:
    _summaries_to_5()
    drop_views(VIEWS_0013)
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name, _ in reversed(_COLUMNS):
            batch_op.drop_column(name)
    create_views(VIEWS_0013)
