"""run.model_source: where each run's model came from when a node downloaded it (a Hub
repository at the commit its revision was pinned to, ``OWNER/NAME@COMMIT``, or the URL);
null for a model file of the node's own (runs keep its sha256 either way)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0013)  # they read `run`
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_source", sa.Text(), nullable=True))
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    # A plain DROP COLUMN (SQLite 3.35+): rebuilding `run` would drop its streams with it.
    with op.batch_alter_table("run", schema=None, recreate="never") as batch_op:
        batch_op.drop_column("model_source")
    create_views(VIEWS_0013)
