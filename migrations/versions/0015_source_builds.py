"""Builds made from source on the worker: worker.sources (the git sources it may build
from), job.refusals (the workers that could not make a
job's build, and why), job.build_seconds (the time spent making its builds, apart from the
measurement), run.build_commit (the llama.cpp commit each run's server was built from)

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0013)  # SQLite's batch mode rebuilds `job` and `run`, which they read
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("refusals", sa.JSON(), nullable=False,
                                      server_default="{}"))
        batch_op.add_column(sa.Column("build_seconds", sa.Float(), nullable=True))
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("build_commit", sa.String(40), nullable=True))
    create_views(VIEWS_0013)
    with op.batch_alter_table("worker", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sources", sa.JSON(), nullable=False,
                                      server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("worker", schema=None) as batch_op:
        batch_op.drop_column("sources")
    drop_views(VIEWS_0013)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("build_commit")
    # A plain DROP COLUMN (SQLite 3.35+): rebuilding `job` would drop it, and its runs with
    # it (ON DELETE CASCADE).
    with op.batch_alter_table("job", schema=None, recreate="never") as batch_op:
        batch_op.drop_column("build_seconds")
        batch_op.drop_column("refusals")
    create_views(VIEWS_0013)
