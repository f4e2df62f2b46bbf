"""adaptive design: pairs, stop reason, summaries, tokens

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pairs", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("summary", sa.JSON(), nullable=True))

    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tokens", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("gpu_name", sa.String(length=200), nullable=True))

    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("gpu_name")
        batch_op.drop_column("tokens")

    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("summary")
        batch_op.drop_column("stop_reason")
        batch_op.drop_column("pairs")

    create_views(VIEWS_0002)
