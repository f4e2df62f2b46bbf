"""SQL views for analysts, versioned with the migrations that create them.

Their median and speedup SQL is the report's own (``farm.results.sql``), so a view and
``farm report`` cannot disagree. A migration that alters a table a view reads drops the
views first and creates the then-current version after (SQLite's batch mode copies
tables, which views would block). Intervals stay in ``farm.report.frames``.
"""

from __future__ import annotations

from alembic import op

from farm.results.sql import SD_LOG_SPEEDUP, median_select, speedup_stats

# Median decode tok/s per job, arm and prompt (the per-prompt unit of the speedup).
_PROMPT_MEDIAN = "CREATE VIEW prompt_median AS\n" + median_select("run", "job_id, arm, prompt_id")

# Per job and arm: median decode tok/s over all runs, counts and speculative counters.
_ARM_SUMMARY = f"""
CREATE VIEW arm_summary AS
WITH medians AS ({median_select("run", "job_id, arm")})
SELECT r.job_id, r.arm, m.median_tok_s, COUNT(*) AS runs,
       SUM(r.spec_drafts) AS drafts, SUM(r.spec_drafted) AS drafted,
       SUM(r.spec_accepted) AS accepted, AVG(r.ttft_ms) AS mean_ttft_ms,
       AVG(r.tpot_ms) AS mean_tpot_ms
FROM run r JOIN medians m ON m.job_id = r.job_id AND m.arm = r.arm
GROUP BY r.job_id, r.arm, m.median_tok_s
"""

# Per job: the geometric-mean speedup over prompts and the spread of the log ratios.
_JOB_SPEEDUP = f"""
CREATE VIEW job_speedup AS
WITH s AS ({speedup_stats("prompt_median")})
SELECT j.id AS job_id, c.name AS campaign, j.job_key, j.model_name AS model,
       j.variant_name AS variant, j.gpu_class, j.state, s.prompts,
       s.mean_log AS mean_log_speedup, EXP(s.mean_log) AS speedup,
       {SD_LOG_SPEEDUP} AS sd_log_speedup
FROM job j
JOIN campaign c ON c.id = j.campaign_id
LEFT JOIN s ON s.job_id = j.id
"""

VIEWS_0002 = {"prompt_median": _PROMPT_MEDIAN, "arm_summary": _ARM_SUMMARY,
              "job_speedup": _JOB_SPEEDUP}


def create_views(views: dict[str, str]) -> None:
    """Create ``views`` in order (a view may read the one before)."""
    for sql in views.values():
        op.execute(sql)


def drop_views(views: dict[str, str]) -> None:
    """Drop ``views`` in reverse order, those missing included."""
    for name in reversed(list(views)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
