"""run.spec_*: llama-server's own speculative statistics per request (calls, drafts, tokens,
begin/draft/accept ms), read from its log

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COUNTS = ("spec_draft_calls", "spec_accept_calls", "spec_gen_drafts", "spec_acc_drafts",
           "spec_gen_tokens", "spec_acc_tokens")
_DURATIONS = ("spec_begin_ms", "spec_draft_ms", "spec_accept_ms")


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode rebuilds `run`, which the views read
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in _COUNTS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=True))
        for name in _DURATIONS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=True))
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("run", schema=None) as batch_op:
        for name in reversed(_COUNTS + _DURATIONS):
            batch_op.drop_column(name)
    create_views(VIEWS_0002)
