"""job.deferrals: how many times workers handed the job back to wait out an outage that
may pass (a Hub answering 503, a git source that does not answer), without refusing it

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0013)  # the views read `job`
    with op.batch_alter_table("job", schema=None, recreate="never") as batch_op:
        batch_op.add_column(sa.Column("deferrals", sa.Integer(), nullable=False,
                                      server_default="0"))
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    # A plain DROP COLUMN (SQLite 3.35+): rebuilding `job` would drop its runs with it.
    with op.batch_alter_table("job", schema=None, recreate="never") as batch_op:
        batch_op.drop_column("deferrals")
    create_views(VIEWS_0013)
