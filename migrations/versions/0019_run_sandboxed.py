"""run.sandboxed: whether the run's server ran in the node's sandbox (bubblewrap: no
network, none of the worker's secrets); null for runs stored before it was kept

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0013)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sandboxed", sa.Boolean(), nullable=True))
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("sandboxed")
    create_views(VIEWS_0013)
