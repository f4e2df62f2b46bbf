"""job.log_se and job.df: what a group interval needs to combine jobs, as typed columns

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import math

import sqlalchemy as sa
from alembic import op

from migrations.views import VIEWS_0002, create_views, drop_views

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_job = sa.table("job", sa.column("id", sa.Integer()), sa.column("summary", sa.JSON()),
                sa.column("log_se", sa.Float()), sa.column("df", sa.Integer()))

# A frozen copy of farm.stats.log_standard_error and of the Student t quantile it used
# (farm/studentt.py) at 6d1ce4e, function by function, less the quantile's cache: the
# read-back must not change with the code. Same operations in the same order, same floats.
_TINY = 1e-300
_CF_EPS = 1e-15


def _nonzero(value: float) -> float:
    return _TINY if abs(value) < _TINY else value


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    c, d = 1.0, 1.0 / _nonzero(1.0 - (a + b) * x / (a + 1.0))
    result = d
    for m in range(1, 100_000):
        numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 / _nonzero(1.0 + numerator * d)
        c = _nonzero(1.0 + numerator / c)
        result *= d * c
        numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 / _nonzero(1.0 + numerator * d)
        c = _nonzero(1.0 + numerator / c)
        result *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            return result
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def _regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, df: float) -> float:
    return 0.5 * _regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def _student_t_quantile(p: float, df: float) -> float:
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -_student_t_quantile(1.0 - p, df)
    tail = 1.0 - p
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if _t_upper_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2.0


def _log_standard_error(low: float, high: float, pairs: int, level: float = 0.95) -> float:
    # The standard error of a job's log speedup, read back from its paired-t interval.
    if pairs < 2 or not (low > 0 and high > 0):
        return math.nan
    quantile = _student_t_quantile(0.5 + level / 2.0, pairs - 1)
    return (math.log(high) - math.log(low)) / (2.0 * quantile)


def _read_back(summary: dict[str, object] | None) -> dict[str, object]:
    # Jobs finished before this revision: the standard error from their stored interval.
    summary = summary or {}
    pairs = summary.get("pairs")
    low, high = summary.get("ci_low"), summary.get("ci_high")
    if not isinstance(pairs, int) or pairs < 2 or not isinstance(low, float | int) \
            or not isinstance(high, float | int):
        return {"se": None, "dof": None}
    se = _log_standard_error(float(low), float(high), pairs)
    return {"se": None if math.isnan(se) else se, "dof": pairs - 1}


def _fill(batch: int = 500) -> None:
    connection, last = op.get_bind(), 0
    while rows := connection.execute(
            sa.select(_job.c.id, _job.c.summary).where(_job.c.id > last, _job.c.summary
                                                       .is_not(None))
            .order_by(_job.c.id).limit(batch)).all():
        values = [{"job_id": job_id, **_read_back(summary)} for job_id, summary in rows]
        connection.execute(_job.update().where(_job.c.id == sa.bindparam("job_id"))
                           .values(log_se=sa.bindparam("se"), df=sa.bindparam("dof")), values)
        last = rows[-1].id


def upgrade() -> None:
    drop_views(VIEWS_0002)  # SQLite's batch mode may rebuild `job`, which a view reads
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.add_column(sa.Column("log_se", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("df", sa.Integer(), nullable=True))
    _fill()
    create_views(VIEWS_0002)


def downgrade() -> None:
    drop_views(VIEWS_0002)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_column("df")
        batch_op.drop_column("log_se")
    create_views(VIEWS_0002)
