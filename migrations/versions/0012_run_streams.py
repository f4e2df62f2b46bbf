"""run.concurrency, run.aggregate_tok_s, run.overlap and the stream table: runs of N
simultaneous streams, and each stream's own figures

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("concurrency", sa.Integer(), nullable=False,
                                      server_default="1"))
        batch_op.add_column(sa.Column("aggregate_tok_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("overlap", sa.Float(), nullable=True))
    create_views(VIEWS_0002)
    op.create_table(
        "stream",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("stream", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("generated_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_tok_s", sa.Float(), nullable=True),
        sa.Column("decode_tok_s", sa.Float(), nullable=False),
        sa.Column("ttft_ms", sa.Float(), nullable=False),
        sa.Column("e2e_ms", sa.Float(), nullable=False),
        sa.Column("draft_n", sa.Integer(), nullable=False),
        sa.Column("draft_accepted", sa.Integer(), nullable=False),
        sa.Column("sent_ms", sa.Float(), nullable=False),
        sa.Column("first_ms", sa.Float(), nullable=False),
        sa.Column("last_ms", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_stream_run_id_run"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream")),
        sa.UniqueConstraint("run_id", "stream", name=op.f("uq_stream_run_id")),
    )
    op.create_index(op.f("ix_stream_run_id"), "stream", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_stream_run_id"), table_name="stream")
    op.drop_table("stream")
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in ("overlap", "aggregate_tok_s", "concurrency"):
            batch_op.drop_column(name)
    create_views(VIEWS_0002)
