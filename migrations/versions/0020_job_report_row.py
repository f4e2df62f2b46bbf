"""job.report_row, job.report_head: a job's report row as a report worked it out, kept so
that the next report prints it without working it out again; null until then

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0013)  # the views read `job`
    with op.batch_alter_table("job", schema=None, recreate="never") as batch_op:
        batch_op.add_column(sa.Column("report_row", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("report_head", sa.Text(), nullable=True))
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    # A plain DROP COLUMN (SQLite 3.35+): rebuilding `job` would drop its runs with it.
    with op.batch_alter_table("job", schema=None, recreate="never") as batch_op:
        batch_op.drop_column("report_head")
        batch_op.drop_column("report_row")
    create_views(VIEWS_0013)
