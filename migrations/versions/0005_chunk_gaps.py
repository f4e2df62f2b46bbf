"""chunk gaps

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chunk_gap_p50_ms", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("chunk_gap_max_ms", sa.Float(), nullable=True))

    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("chunk_gap_max_ms")
        batch_op.drop_column("chunk_gap_p50_ms")

    create_views(VIEWS_0002)
