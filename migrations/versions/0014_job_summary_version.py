"""job.summary carries its version: readers upgrade older summaries by it, never by guessing

Summaries stored before this revision are stamped by what they hold, with the rules as
they stood when it was written (frozen here): `kind` kept -> 4, else the run facts
(`runs`) -> 3, else `log_se` -> 2, else 1 (farm/results/summary.py says what each
version holds). Downgrade removes the stamps, and writes a version 5 summary (facts nested,
stored by newer code) back as a version 4 one.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_job = sa.table("job", sa.column("id", sa.Integer()), sa.column("summary", sa.JSON()))


def _stamped(summary: dict[str, Any]) -> dict[str, Any]:
    if "version" in summary:
        return summary
    version = 4 if "kind" in summary else 3 if "runs" in summary else \
        2 if "log_se" in summary else 1
    return {**summary, "version": version}


def _unstamped(summary: dict[str, Any]) -> dict[str, Any]:
    flat = {key: value for key, value in summary.items() if key not in ("version", "facts")}
    facts = summary.get("facts")
    if summary.get("version") == 5 and isinstance(facts, dict):
        drafted, accepted = facts.get("drafted") or 0, facts.get("accepted") or 0
        flat |= {**facts, "acceptance_rate": accepted / drafted if drafted else None}
    return flat


def _rewrite(change: Any, batch: int = 500) -> None:
    connection, last = op.get_bind(), 0
    while rows := connection.execute(
            sa.select(_job.c.id, _job.c.summary).where(_job.c.id > last)
            .order_by(_job.c.id).limit(batch)).all():
        values = [{"job_id": job_id, "new": change(summary)} for job_id, summary in rows
                  if isinstance(summary, dict) and summary]
        if values:
            connection.execute(_job.update().where(_job.c.id == sa.bindparam("job_id"))
                               .values(summary=sa.bindparam("new", type_=sa.JSON())), values)
        last = rows[-1].id


def upgrade() -> None:
    _rewrite(_stamped)


def downgrade() -> None:
    _rewrite(_unstamped)
