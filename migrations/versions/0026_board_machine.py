"""board_machine: the key each machine id on a board belongs to (the first that signed a
bundle of it), filled from the bundles a board took already (docs/board.md)

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "board_machine",
        sa.Column("machine_id", sa.String(length=32), nullable=False),
        sa.Column("signer", sa.String(length=16), nullable=False),
        sa.Column("bound_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("machine_id", name=op.f("pk_board_machine")),
    )
    # Each machine already signed for belongs to the key of its first signed bundle.
    op.execute(
        "INSERT INTO board_machine (machine_id, signer) "
        "SELECT bundle.machine_id, bundle.signer FROM board_bundle AS bundle "
        "WHERE bundle.id = (SELECT MIN(earliest.id) FROM board_bundle AS earliest "
        "WHERE earliest.machine_id = bundle.machine_id AND earliest.signer IS NOT NULL)")


def downgrade() -> None:
    op.drop_table("board_machine")
