"""job.log_se and job.df: what a group interval needs to combine jobs, as typed columns

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import math

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_job = sa.table("job", sa.column("id", sa.Integer()), sa.column("summary", sa.JSON()),
                sa.column("log_se", sa.Float()), sa.column("df", sa.Integer()))


def _read_back(summary: dict[str, object] | None) -> dict[str, object]:
    # Jobs finished before this revision: the standard error from their stored interval.
    summary = summary or {}
    pairs = summary.get("pairs")
    low, high = summary.get("ci_low"), summary.get("ci_high")
    if not isinstance(pairs, int) or pairs < 2 or not isinstance(low, float | int) \
            or not isinstance(high, float | int):
        return {"se": None, "dof": None}
    # Imported here: loading the migrations (every command checks the schema) must not pull
    # in farm.stats, and with it pandas and numpy (0.6 s of each `farm submit`).
    from farm.stats.intervals import log_standard_error

    se = log_standard_error(float(low), float(high), pairs)
    return {"se": None if math.isnan(se) else se, "dof": pairs - 1}


def _fill(batch: int = 500) -> None:
    connection, last = op.get_bind(), 0
    while rows := connection.execute(
            sa.select(_job.c.id, _job.c.summary).where(_job.c.id > last, _job.c.summary
                                                       .is_not(None))
            .order_by(_job.c.id).limit(batch)).all():
        values = [{"job_id": job_id, **_read_back(summary)} for job_id, summary in rows]
        connection.execute(_job.update().where(_job.c.id == sa.bindparam("job_id"))
                           .values(log_se=sa.bindparam("se"), df=sa.bindparam("dof")), values)
        last = rows[-1].id


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode may rebuild `job`, which a view reads
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("log_se", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("df", sa.Integer(), nullable=True))
    _fill()
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("df")
        batch_op.drop_column("log_se")
    create_views(VIEWS_0002)
