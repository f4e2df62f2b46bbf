"""job_speedup's columns named for what they are: median_speedup, log_median_speedup

The view's `speedup` was the geometric mean over prompts of the per-prompt median ratios
(the report's run fact `median_speedup`), not `farm report`'s speedup (the crossover
estimate over block pairs); `mean_log_speedup` was its log. The figures are unchanged.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from migrations.views import VIEWS_0002, VIEWS_0013, create_views, drop_views

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    drop_views(VIEWS_0002)
    create_views(VIEWS_0013)


def downgrade() -> None:
    drop_views(VIEWS_0013)
    create_views(VIEWS_0002)
