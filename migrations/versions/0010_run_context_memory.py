"""run.kv_mib, run.draft_context_mib: the memory the server's contexts took, from its log

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_COLUMNS = ("kv_mib", "draft_context_mib")


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in _COLUMNS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=True))
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in reversed(_COLUMNS):
            batch_op.drop_column(name)
    create_views(VIEWS_0002)
