"""campaign, job and run tables

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "campaign",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("matrix_path", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaign")),
        sa.UniqueConstraint("name", name=op.f("uq_campaign_name")),
    )
    op.create_table(
        "job",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=False),
        sa.Column("job_key", sa.String(length=64), nullable=False),
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("build_name", sa.String(length=200), nullable=False),
        sa.Column("variant_name", sa.String(length=400), nullable=False),
        sa.Column("varying", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaign.id"],
            name=op.f("fk_job_campaign_id_campaign"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job")),
        sa.UniqueConstraint("campaign_id", "job_key", name=op.f("uq_job_campaign_id")),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_campaign_id"), ["campaign_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_state"), ["state"], unique=False)

    op.create_table(
        "run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("arm", sa.String(length=16), nullable=False),
        sa.Column("arm_name", sa.String(length=400), nullable=False),
        sa.Column("block", sa.Integer(), nullable=False),
        sa.Column("pair", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.String(length=200), nullable=False),
        sa.Column("prompt_category", sa.String(length=100), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("generated_tokens", sa.Integer(), nullable=False),
        sa.Column("prompt_tok_s", sa.Float(), nullable=True),
        sa.Column("decode_tok_s", sa.Float(), nullable=False),
        sa.Column("client_decode_tok_s", sa.Float(), nullable=True),
        sa.Column("ttft_ms", sa.Float(), nullable=False),
        sa.Column("e2e_ms", sa.Float(), nullable=False),
        sa.Column("tpot_ms", sa.Float(), nullable=True),
        sa.Column("draft_n", sa.Integer(), nullable=False),
        sa.Column("draft_accepted", sa.Integer(), nullable=False),
        sa.Column("spec_drafts", sa.Integer(), nullable=False),
        sa.Column("spec_drafted", sa.Integer(), nullable=False),
        sa.Column("spec_accepted", sa.Integer(), nullable=False),
        sa.Column("spec_accepted_per_pos", sa.JSON(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("server_version", sa.Text(), nullable=False),
        sa.Column("build_name", sa.String(length=200), nullable=False),
        sa.Column("model_file", sa.Text(), nullable=False),
        sa.Column("model_size", sa.BigInteger(), nullable=False),
        sa.Column("model_sha256", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("server_log", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name=op.f("fk_run_job_id_job"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run")),
        sa.UniqueConstraint(
            "job_id", "arm", "block", "prompt_id", "repetition", name=op.f("uq_run_job_id")
        ),
    )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_job_id"))

    op.drop_table("run")
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_state"))
        batch_op.drop_index(batch_op.f("ix_job_campaign_id"))

    op.drop_table("job")
    op.drop_table("campaign")
