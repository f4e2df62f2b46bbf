"""report_text: a whole ``farm report --format json`` as it was printed, per scope (every
campaign, or one), with the stamp of the jobs it was printed from; the next report of the
same scope prints it as it is while the stamp is unchanged (PostgreSQL only)

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "report_text",
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("stamp", sa.String(length=128), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("made_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaign.id"], ondelete="CASCADE",
                                name=op.f("fk_report_text_campaign_id_campaign")),
        sa.PrimaryKeyConstraint("scope", name=op.f("pk_report_text")),
    )
    if op.get_bind().dialect.name == "postgresql":
        # Printed whole, tens of MB: stored out of line and uncompressed, so that reading
        # it back costs no decompression; unlogged, so that keeping it writes no WAL (half
        # the time). A crash empties it, a standby cannot read it: the next report there
        # prints without it.
        op.execute("ALTER TABLE report_text ALTER COLUMN body SET STORAGE EXTERNAL")
        op.execute("ALTER TABLE report_text SET UNLOGGED")


def downgrade() -> None:
    op.drop_table("report_text")
