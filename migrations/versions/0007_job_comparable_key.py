"""job.comparable_key, filled from each stored job spec

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from pydantic import ValidationError

from farm.matrix.spec import JobSpec
from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_job = sa.table("job", sa.column("id", sa.Integer()), sa.column("spec", sa.JSON()),
                sa.column("comparable_key", sa.String(64)))


def _comparable_key(spec: dict[str, object]) -> str | None:
    # The same function that keys new jobs; a spec from before builds moved into the arms
    # (or from before the adaptive design) cannot be read and keeps no key.
    try:
        return JobSpec.model_validate(spec).comparable_key
    except ValidationError:
        return None


def _fill_keys(batch: int = 500) -> None:
    # Page by id: specs carry every prompt, too many for memory in a large store.
    connection, last = op.get_bind(), 0
    while rows := connection.execute(sa.select(_job.c.id, _job.c.spec).where(_job.c.id > last)
                                     .order_by(_job.c.id).limit(batch)).all():
        keys = [{"job_id": job_id, "key": _comparable_key(spec)} for job_id, spec in rows]
        connection.execute(_job.update().where(_job.c.id == sa.bindparam("job_id"))
                           .values(comparable_key=sa.bindparam("key")), keys)
        last = rows[-1].id


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode may rebuild `job`, which a view reads
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("comparable_key", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_job_comparable_key"), ["comparable_key"],
                              unique=False)
    _fill_keys()
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_comparable_key"))
        batch_op.drop_column("comparable_key")
    create_views(VIEWS_0002)
