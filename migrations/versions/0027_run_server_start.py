"""run.server_start_s and run.warmup_s: what each run's block spent before its first run,
its server's start (launch to /health answering: the model's load) and its warm-up
request, in seconds; null for runs stored before they were kept

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_COLUMNS = ("server_start_s", "warmup_s")


def upgrade() -> None:
    drop_views(VIEWS_0013)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in _COLUMNS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=True))
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in _COLUMNS:
            batch_op.drop_column(name)
    create_views(VIEWS_0013)
