"""outbox: post generation and retry due time on jobs

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `job`, which a view reads
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("post_gen", sa.Integer(), server_default="0",
                                      nullable=False))
        batch_op.add_column(sa.Column("due_at", sa.DateTime(timezone=True), nullable=True))
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("due_at")
        batch_op.drop_column("post_gen")
    create_views(VIEWS_0002)
