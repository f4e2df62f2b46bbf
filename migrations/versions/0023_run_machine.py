"""run.machine_class, run.gpu_memory_mb: the GPU class of the machine that measured the run
(another than its job's when `farm run --as-class` ran it there) and its GPU's memory;
null for runs stored before

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0013, create_views, drop_views

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0013)  # the views read `run`
    with op.batch_alter_table("run", schema=None, recreate="never") as batch_op:
        batch_op.add_column(sa.Column("machine_class", sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column("gpu_memory_mb", sa.Float(), nullable=True))
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    # A plain DROP COLUMN (SQLite 3.35+): rebuilding `run` would drop its streams with it.
    with op.batch_alter_table("run", schema=None, recreate="never") as batch_op:
        batch_op.drop_column("gpu_memory_mb")
        batch_op.drop_column("machine_class")
    create_views(VIEWS_0013)
