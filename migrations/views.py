"""SQL views for analysts, versioned with the migrations that create them.

Each version is literal SQL, frozen when it was written: a migration creates the views
exactly as they were then, whatever the farm's code says later (no ``farm`` import here;
``tests/integration/test_frozen_migrations.py`` pins each text's sha256). A new text is a
new version and a migration that recreates the views; the old ones stay for downgrades.
A migration that alters a table a view reads drops the views first and creates its
version after (SQLite's batch mode copies tables, which views would block).

The figures are the per-prompt medians of the runs: ``job_speedup`` gives the geometric
mean over prompts of the variant/baseline median ratios (the report's run fact
``median_speedup``), not ``farm report``'s ``speedup``, which is the crossover estimate
over block pairs; since 0013 its columns say so. The same text on SQLite and PostgreSQL
(the median is ranked on both). Intervals stay in the reports.
"""

from __future__ import annotations

from alembic import op

# Median decode tok/s per job, arm and prompt (the per-prompt unit of the speedup).
_PROMPT_MEDIAN = """CREATE VIEW prompt_median AS
SELECT job_id, arm, prompt_id, AVG(decode_tok_s) AS median_tok_s, MAX(n) AS runs
FROM (SELECT job_id, arm, prompt_id, decode_tok_s,
             ROW_NUMBER() OVER (PARTITION BY job_id, arm, prompt_id ORDER BY decode_tok_s) AS rn,
             COUNT(*) OVER (PARTITION BY job_id, arm, prompt_id) AS n
      FROM run) ranked
WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
GROUP BY job_id, arm, prompt_id"""

# Per job and arm: median decode tok/s over all runs, counts and speculative counters.
_ARM_SUMMARY = """
CREATE VIEW arm_summary AS
WITH medians AS (SELECT job_id, arm, AVG(decode_tok_s) AS median_tok_s, MAX(n) AS runs
FROM (SELECT job_id, arm, decode_tok_s,
             ROW_NUMBER() OVER (PARTITION BY job_id, arm ORDER BY decode_tok_s) AS rn,
             COUNT(*) OVER (PARTITION BY job_id, arm) AS n
      FROM run) ranked
WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
GROUP BY job_id, arm)
SELECT r.job_id, r.arm, m.median_tok_s, COUNT(*) AS runs,
       SUM(r.spec_drafts) AS drafts, SUM(r.spec_drafted) AS drafted,
       SUM(r.spec_accepted) AS accepted, AVG(r.ttft_ms) AS mean_ttft_ms,
       AVG(r.tpot_ms) AS mean_tpot_ms
FROM run r JOIN medians m ON m.job_id = r.job_id AND m.arm = r.arm
GROUP BY r.job_id, r.arm, m.median_tok_s
"""

# 0002-0012, per job: the geometric mean over prompts of the variant/baseline ratios of
# the per-prompt medians as `speedup`, the mean and sd of their logs: a name that passed
# for the report's speedup, which it is only for jobs without a crossover estimate.
_JOB_SPEEDUP_0002 = """
CREATE VIEW job_speedup AS
WITH s AS (SELECT job_id, COUNT(*) AS prompts, AVG(log_ratio) AS mean_log,
       SUM(log_ratio * log_ratio) AS sum_sq
FROM (SELECT b.job_id, LN(v.median_tok_s / b.median_tok_s) AS log_ratio
      FROM prompt_median b
      JOIN prompt_median v
        ON v.job_id = b.job_id AND v.prompt_id = b.prompt_id AND v.arm = 'variant'
      WHERE b.arm = 'baseline' AND b.median_tok_s > 0 AND v.median_tok_s > 0) ratios
GROUP BY job_id)
SELECT j.id AS job_id, c.name AS campaign, j.job_key, j.model_name AS model,
       j.variant_name AS variant, j.gpu_class, j.state, s.prompts,
       s.mean_log AS mean_log_speedup, EXP(s.mean_log) AS speedup,
       CASE WHEN s.prompts > 1 AND s.sum_sq - s.prompts * s.mean_log * s.mean_log > 0
            THEN SQRT((s.sum_sq - s.prompts * s.mean_log * s.mean_log) / (s.prompts - 1))
       END AS sd_log_speedup
FROM job j
JOIN campaign c ON c.id = j.campaign_id
LEFT JOIN s ON s.job_id = j.id
"""

# 0013: the same figures, named for what they are: `median_speedup` (the report's run
# fact of that name) and `log_median_speedup`; `sd_log_speedup` keeps its name (a run
# fact too).
_JOB_SPEEDUP_0013 = """
CREATE VIEW job_speedup AS
WITH s AS (SELECT job_id, COUNT(*) AS prompts, AVG(log_ratio) AS mean_log,
       SUM(log_ratio * log_ratio) AS sum_sq
FROM (SELECT b.job_id, LN(v.median_tok_s / b.median_tok_s) AS log_ratio
      FROM prompt_median b
      JOIN prompt_median v
        ON v.job_id = b.job_id AND v.prompt_id = b.prompt_id AND v.arm = 'variant'
      WHERE b.arm = 'baseline' AND b.median_tok_s > 0 AND v.median_tok_s > 0) ratios
GROUP BY job_id)
SELECT j.id AS job_id, c.name AS campaign, j.job_key, j.model_name AS model,
       j.variant_name AS variant, j.gpu_class, j.state, s.prompts,
       s.mean_log AS log_median_speedup, EXP(s.mean_log) AS median_speedup,
       CASE WHEN s.prompts > 1 AND s.sum_sq - s.prompts * s.mean_log * s.mean_log > 0
            THEN SQRT((s.sum_sq - s.prompts * s.mean_log * s.mean_log) / (s.prompts - 1))
       END AS sd_log_speedup
FROM job j
JOIN campaign c ON c.id = j.campaign_id
LEFT JOIN s ON s.job_id = j.id
"""

VIEWS_0002 = {"prompt_median": _PROMPT_MEDIAN, "arm_summary": _ARM_SUMMARY,
              "job_speedup": _JOB_SPEEDUP_0002}
VIEWS_0013 = {"prompt_median": _PROMPT_MEDIAN, "arm_summary": _ARM_SUMMARY,
              "job_speedup": _JOB_SPEEDUP_0013}


def create_views(views: dict[str, str]) -> None:
    """Create ``views`` in order (a view may read the one before)."""
    for sql in views.values():
        op.execute(sql)


def drop_views(views: dict[str, str]) -> None:
    """Drop ``views`` in reverse order, those missing included."""
    for name in reversed(list(views)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
