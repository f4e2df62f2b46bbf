"""SQL views for analysts, versioned with the migrations that create them.

Portable SQL (SQLite >= 3.35 with math functions, PostgreSQL): window functions for
medians, LN/EXP/SQRT for log speedups. A migration that alters a table a view reads drops
the views first and creates the then-current version after (SQLite's batch mode copies
tables, which views would block). Intervals stay in ``farm.analysis``.
"""

from __future__ import annotations

from alembic import op

# Median decode tok/s per job, arm and prompt (the per-prompt unit of the speedup).
_PROMPT_MEDIAN = """
CREATE VIEW prompt_median AS
WITH ranked AS (
    SELECT job_id, arm, prompt_id, decode_tok_s,
           ROW_NUMBER() OVER (PARTITION BY job_id, arm, prompt_id ORDER BY decode_tok_s) AS rn,
           COUNT(*) OVER (PARTITION BY job_id, arm, prompt_id) AS n
    FROM run
)
SELECT job_id, arm, prompt_id, AVG(decode_tok_s) AS median_tok_s, MAX(n) AS runs
FROM ranked
WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
GROUP BY job_id, arm, prompt_id
"""

# Per job and arm: median decode tok/s over all runs, counts and speculative counters.
_ARM_SUMMARY = """
CREATE VIEW arm_summary AS
WITH ranked AS (
    SELECT job_id, arm, decode_tok_s,
           ROW_NUMBER() OVER (PARTITION BY job_id, arm ORDER BY decode_tok_s) AS rn,
           COUNT(*) OVER (PARTITION BY job_id, arm) AS n
    FROM run
), medians AS (
    SELECT job_id, arm, AVG(decode_tok_s) AS median_tok_s
    FROM ranked WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
    GROUP BY job_id, arm
)
SELECT r.job_id, r.arm, m.median_tok_s, COUNT(*) AS runs,
       SUM(r.spec_drafts) AS drafts, SUM(r.spec_drafted) AS drafted,
       SUM(r.spec_accepted) AS accepted, AVG(r.ttft_ms) AS mean_ttft_ms,
       AVG(r.tpot_ms) AS mean_tpot_ms
FROM run r JOIN medians m ON m.job_id = r.job_id AND m.arm = r.arm
GROUP BY r.job_id, r.arm, m.median_tok_s
"""

# Per job: the geometric-mean speedup over prompts and the spread of the log ratios.
_JOB_SPEEDUP = """
CREATE VIEW job_speedup AS
WITH ratios AS (
    SELECT b.job_id, LN(v.median_tok_s / b.median_tok_s) AS log_ratio
    FROM prompt_median b
    JOIN prompt_median v
      ON v.job_id = b.job_id AND v.prompt_id = b.prompt_id AND v.arm = 'variant'
    WHERE b.arm = 'baseline' AND b.median_tok_s > 0 AND v.median_tok_s > 0
), stats AS (
    SELECT job_id, COUNT(*) AS prompts, AVG(log_ratio) AS mean_log_speedup,
           SUM(log_ratio * log_ratio) AS sum_sq
    FROM ratios GROUP BY job_id
)
SELECT j.id AS job_id, c.name AS campaign, j.job_key, j.model_name AS model,
       j.variant_name AS variant, j.gpu_class, j.state, s.prompts,
       s.mean_log_speedup, EXP(s.mean_log_speedup) AS speedup,
       CASE WHEN s.prompts > 1
                 AND s.sum_sq - s.prompts * s.mean_log_speedup * s.mean_log_speedup > 0
            THEN SQRT((s.sum_sq - s.prompts * s.mean_log_speedup * s.mean_log_speedup)
                      / (s.prompts - 1))
       END AS sd_log_speedup
FROM job j
JOIN campaign c ON c.id = j.campaign_id
LEFT JOIN stats s ON s.job_id = j.id
"""

VIEWS_0002 = {"prompt_median": _PROMPT_MEDIAN, "arm_summary": _ARM_SUMMARY,
              "job_speedup": _JOB_SPEEDUP}


def create_views(views: dict[str, str]) -> None:
    for sql in views.values():
        op.execute(sql)


def drop_views(views: dict[str, str]) -> None:
    for name in reversed(list(views)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
