"""board_key, board_bundle, board_job, board_run: a board's bundles, known keys, and where
each of its jobs and runs came from (``farm board``, docs/board.md)

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "board_key",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("public_key", sa.String(length=64), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_board_key")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_board_key_fingerprint")),
        sa.UniqueConstraint("name", name=op.f("uq_board_key_name")),
    )
    op.create_table(
        "board_bundle",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("machine_id", sa.String(length=32), nullable=False),
        sa.Column("signer", sa.String(length=16), nullable=True),
        sa.Column("farm_version", sa.String(length=100), nullable=False),
        sa.Column("summary_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("campaigns", sa.JSON(), nullable=False),
        sa.Column("with_host", sa.Boolean(), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_board_bundle")),
        sa.UniqueConstraint("sha256", name=op.f("uq_board_bundle_sha256")),
    )
    op.create_index(op.f("ix_board_bundle_machine_id"), "board_bundle", ["machine_id"])
    op.create_table(
        "board_job",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("bundle_id", sa.Integer(), nullable=False),
        sa.Column("machine_id", sa.String(length=32), nullable=False),
        sa.Column("source_key", sa.String(length=64), nullable=False),
        sa.Column("stated", sa.JSON(), nullable=False),
        sa.Column("differences", sa.Text(), nullable=True),
        sa.Column("refused", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["bundle_id"], ["board_bundle.id"],
                                name=op.f("fk_board_job_bundle_id_board_bundle"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"], name=op.f("fk_board_job_job_id_job"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_board_job")),
        sa.UniqueConstraint("job_id", name=op.f("uq_board_job_job_id")),
    )
    op.create_index(op.f("ix_board_job_bundle_id"), "board_job", ["bundle_id"])
    op.create_index(op.f("ix_board_job_machine_id"), "board_job", ["machine_id"])
    op.create_table(
        "board_run",
        sa.Column("identity", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("bundle_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["bundle_id"], ["board_bundle.id"],
                                name=op.f("fk_board_run_bundle_id_board_bundle"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_board_run_run_id_run"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("identity", name=op.f("pk_board_run")),
        sa.UniqueConstraint("run_id", name=op.f("uq_board_run_run_id")),
    )
    op.create_index(op.f("ix_board_run_bundle_id"), "board_run", ["bundle_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_board_run_bundle_id"), table_name="board_run")
    op.drop_table("board_run")
    op.drop_index(op.f("ix_board_job_machine_id"), table_name="board_job")
    op.drop_index(op.f("ix_board_job_bundle_id"), table_name="board_job")
    op.drop_table("board_job")
    op.drop_index(op.f("ix_board_bundle_machine_id"), table_name="board_bundle")
    op.drop_table("board_bundle")
    op.drop_table("board_key")
