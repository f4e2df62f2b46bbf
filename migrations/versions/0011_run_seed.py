"""run.seed: the seed each run's request was sent with (the same in both arms)

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("seed", sa.BigInteger(), nullable=True))
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("seed")
    create_views(VIEWS_0002)
