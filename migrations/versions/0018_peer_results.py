"""peer_import and peer_result: other tools' figures read by `farm import` (llama-bench,
llama.cpp's speed-bench, ik_llama.cpp's llama-spec-bench), kept apart from the farm's runs

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "peer_import",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=32), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("file_name", sa.Text(), nullable=False),
        sa.Column("file_sha256", sa.String(length=64), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("imported_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_peer_import")),
        sa.UniqueConstraint("file_sha256", name=op.f("uq_peer_import_file_sha256")),
    )
    op.create_table(
        "peer_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("import_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("build_commit", sa.String(length=64), nullable=True),
        sa.Column("build_number", sa.Integer(), nullable=True),
        sa.Column("model_file", sa.Text(), nullable=True),
        sa.Column("model_type", sa.String(length=200), nullable=True),
        sa.Column("model_size", sa.BigInteger(), nullable=True),
        sa.Column("model_n_params", sa.BigInteger(), nullable=True),
        sa.Column("backends", sa.String(length=200), nullable=True),
        sa.Column("cpu_info", sa.Text(), nullable=True),
        sa.Column("gpu_info", sa.Text(), nullable=True),
        sa.Column("n_threads", sa.Integer(), nullable=True),
        sa.Column("n_gpu_layers", sa.Integer(), nullable=True),
        sa.Column("n_batch", sa.Integer(), nullable=True),
        sa.Column("n_ubatch", sa.Integer(), nullable=True),
        sa.Column("type_k", sa.String(length=32), nullable=True),
        sa.Column("type_v", sa.String(length=32), nullable=True),
        sa.Column("flash_attn", sa.String(length=16), nullable=True),
        sa.Column("speculative", sa.Boolean(), nullable=True),
        sa.Column("spec_type", sa.String(length=200), nullable=True),
        sa.Column("test", sa.String(length=200), nullable=False),
        sa.Column("measure", sa.String(length=16), nullable=False),
        sa.Column("n_prompt", sa.Integer(), nullable=True),
        sa.Column("n_gen", sa.Integer(), nullable=True),
        sa.Column("n_depth", sa.Integer(), nullable=True),
        sa.Column("tok_s", sa.Float(), nullable=False),
        sa.Column("tok_s_sd", sa.Float(), nullable=True),
        sa.Column("repetitions", sa.Integer(), nullable=True),
        sa.Column("samples", sa.JSON(), nullable=True),
        sa.Column("drafts", sa.BigInteger(), nullable=True),
        sa.Column("drafted", sa.BigInteger(), nullable=True),
        sa.Column("accepted", sa.BigInteger(), nullable=True),
        sa.Column("drafted_per_pos", sa.JSON(), nullable=True),
        sa.Column("accepted_per_pos", sa.JSON(), nullable=True),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("raw", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["import_id"], ["peer_import.id"],
                                name=op.f("fk_peer_result_import_id_peer_import"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_peer_result")),
    )
    op.create_index(op.f("ix_peer_result_import_id"), "peer_result", ["import_id"],
                    unique=False)
    op.create_index(op.f("ix_peer_result_build_commit"), "peer_result", ["build_commit"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_peer_result_build_commit"), table_name="peer_result")
    op.drop_index(op.f("ix_peer_result_import_id"), table_name="peer_result")
    op.drop_table("peer_result")
    op.drop_table("peer_import")
