"""builds, models, telemetry, failure classes

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    op.create_table(
        "model",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("file_name", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("architecture", sa.String(length=100), nullable=False),
        sa.Column("file_type", sa.String(length=100), nullable=False),
        sa.Column("n_params", sa.BigInteger(), nullable=False),
        sa.Column("context_length", sa.Integer(), nullable=True),
        sa.Column("has_chat_template", sa.Boolean(), nullable=False),
        sa.Column("nextn_layers", sa.Integer(), nullable=False),
        sa.Column("vocab_size", sa.Integer(), nullable=False),
        sa.Column("tokenizer", sa.String(length=100), nullable=False),
        sa.Column("vocab_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_model")),
    )
    op.create_table(
        "gpu_sample",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("block", sa.Integer(), nullable=False),
        sa.Column("t", sa.Float(), nullable=False),
        sa.Column("device", sa.String(length=100), nullable=False),
        sa.Column("vram_used_mb", sa.Float(), nullable=False),
        sa.Column("power_w", sa.Float(), nullable=False),
        sa.Column("sm_clock_mhz", sa.Integer(), nullable=False),
        sa.Column("mem_clock_mhz", sa.Integer(), nullable=False),
        sa.Column("temperature_c", sa.Integer(), nullable=False),
        sa.Column("throttle_reasons", sa.BigInteger(), nullable=False),
        sa.Column("energy_mj", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["job.id"], name=op.f("fk_gpu_sample_job_id_job"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_sample")),
    )
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_sample_job_id"), ["job_id"], unique=False)

    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("translations", sa.JSON(), server_default="[]", nullable=False)
        )
        batch_op.add_column(sa.Column("failure_class", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("speculation", sa.String(length=16), nullable=True))

    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slot_speculative", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("rss_mb", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("cpu_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("energy_j", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("joules_per_token", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("mean_power_w", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("max_vram_used_mb", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("mean_sm_clock_mhz", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("max_temperature_c", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("throttled", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("throttle_reasons", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("weights_spilled", sa.Boolean(), nullable=True))

    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("weights_spilled")
        batch_op.drop_column("throttle_reasons")
        batch_op.drop_column("throttled")
        batch_op.drop_column("max_temperature_c")
        batch_op.drop_column("mean_sm_clock_mhz")
        batch_op.drop_column("max_vram_used_mb")
        batch_op.drop_column("mean_power_w")
        batch_op.drop_column("joules_per_token")
        batch_op.drop_column("energy_j")
        batch_op.drop_column("cpu_seconds")
        batch_op.drop_column("rss_mb")
        batch_op.drop_column("slot_speculative")

    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("speculation")
        batch_op.drop_column("failure_class")
        batch_op.drop_column("translations")

    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_sample_job_id"))

    op.drop_table("gpu_sample")
    op.drop_table("model")
    create_views(VIEWS_0002)
