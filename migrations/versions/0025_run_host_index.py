"""ix_run_host: an index on run.host, for a job's drift test, which reads the earlier jobs
of the host that measured it (farm.results.runs.earlier_runs)

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_run_host"), "run", ["host"])


def downgrade() -> None:
    op.drop_index(op.f("ix_run_host"), table_name="run")
