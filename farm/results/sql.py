"""The per-job report queries and the SQL of a job's run facts.

Each fact is written once: the median decode tok/s (``median_select``) and the
geometric-mean speedup with its spread (``speedup_stats``, ``SD_LOG_SPEEDUP``) make a
job's run facts (``run_facts_sql``: kept in its summary when it finishes, computed by
reports for the jobs without). Portable SQL for SQLite >= 3.35 (window and math functions)
and PostgreSQL. The analysts' views (``migrations/views.py``) are not built from this
text: each migration holds its views as literal SQL (the same figures: a test compares
them), so a change here reaches them only through a new migration with new view text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from farm.run_metrics import AGGREGATES, RUN_METRICS

if TYPE_CHECKING:
    from farm.summary import SpeedClock


def median_select(source: str, keys: str, dialect: str = "sqlite") -> str:
    """``SELECT keys, median_tok_s, runs`` of ``source`` grouped by ``keys``: the middle
    decode tok/s, or the mean of the two middle ones, and the number of runs with one (a
    run has none by the client's clock under two tokens).

    The same value on both databases; PostgreSQL's ``percentile_cont`` computes it without
    ranking every row (a 1,000,000-run report in half the time), SQLite has no such
    aggregate and ranks."""
    if dialect == "postgresql":
        return f"""SELECT {keys},
       percentile_cont(0.5) WITHIN GROUP (ORDER BY decode_tok_s) AS median_tok_s,
       COUNT(decode_tok_s) AS runs
FROM {source}
GROUP BY {keys}"""
    return f"""SELECT {keys}, AVG(decode_tok_s) AS median_tok_s, MAX(n) AS runs
FROM (SELECT {keys}, decode_tok_s,
             ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY decode_tok_s) AS rn,
             COUNT(*) OVER (PARTITION BY {keys}) AS n
      FROM {source} WHERE decode_tok_s IS NOT NULL) ranked
WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
GROUP BY {keys}"""


def speedup_stats(prompt_medians: str) -> str:
    """Per job: ``prompts``, ``mean_log`` and ``sum_sq`` of the log ratios variant/baseline
    of per-prompt medians (``prompt_medians`` is shaped like ``median_select``'s)."""
    return f"""SELECT job_id, COUNT(*) AS prompts, AVG(log_ratio) AS mean_log,
       SUM(log_ratio * log_ratio) AS sum_sq
FROM (SELECT b.job_id, LN(v.median_tok_s / b.median_tok_s) AS log_ratio
      FROM {prompt_medians} b
      JOIN {prompt_medians} v
        ON v.job_id = b.job_id AND v.prompt_id = b.prompt_id AND v.arm = 'variant'
      WHERE b.arm = 'baseline' AND b.median_tok_s > 0 AND v.median_tok_s > 0) ratios
GROUP BY job_id"""


# The sample standard deviation of the log ratios, from ``speedup_stats`` aliased ``s``.
SD_LOG_SPEEDUP = """CASE WHEN s.prompts > 1 AND s.sum_sq - s.prompts * s.mean_log * s.mean_log > 0
            THEN SQRT((s.sum_sq - s.prompts * s.mean_log * s.mean_log) / (s.prompts - 1))
       END"""


# What a report takes from a job's runs (``run_facts_sql``: ``farm.summary.FACTS``). A
# finished job keeps them in its summary, so that reports read the runs of unfinished jobs
# only; ``runs`` marks a summary that has them (jobs finished before they were kept have
# not). The variant's decode time per token (after the first) is split into
# ``draft_ms_per_token`` (llama.cpp's draft timer) and ``verify_ms_per_token`` (the rest, less
# its accept timer: see run.spec_*). Then each run metric's summary per arm, as its
# declaration says (``farm.run_metrics``: peak memory, the variant's draft context).
PER_ARM = tuple(metric for metric in RUN_METRICS if metric.per_arm)
# Each arm's row of the query's ``arm_counts``.
_ARM_ROWS = {"baseline": "bc", "variant": "vc"}

# Each clock's decode speed column of a run (farm.summary.SpeedClock).
CLOCK_COLUMNS = {"server": "decode_tok_s", "client": "client_decode_tok_s"}


def run_facts_sql(jobs: str, dialect: str, clock: SpeedClock = "server") -> str:
    """``job_id`` and the run facts of each job meeting ``jobs`` (a condition on ``job``):
    medians, the geometric-mean speedup of per-prompt medians with its spread, counters and
    counts, each ``PER_ARM`` metric's facts; decode speeds by ``clock`` (a run without the
    client's has none)."""
    speed = f"run.{CLOCK_COLUMNS[clock]}"
    # Each metric summarized per arm is read, aggregated over each arm's runs (max_rss_mb),
    # and each of its facts taken from its arm's row.
    facts = [(metric.name, fact) for metric in PER_ARM for fact in metric.per_arm]
    read = "".join(f", run.{metric.name}" for metric in PER_ARM)
    summed = "".join(f",\n           {AGGREGATES[how]}({name}) AS {how}_{name}"
                     for how, name in dict.fromkeys((fact.how, name) for name, fact in facts))
    chosen = "".join(f",\n       {_ARM_ROWS[fact.arm]}.{fact.how}_{name} AS {fact.name}"
                     for name, fact in facts)
    # Runs are narrowed first, so a few jobs cost their own runs, not the store's.
    return f"""
WITH r AS (
    SELECT run.job_id, run.arm, run.prompt_id, {speed} AS decode_tok_s, run.spec_drafted,
           run.spec_accepted, run.gpu_name, run.model_size, run.throttled,
           run.weights_spilled, run.spec_draft_ms, run.spec_accept_ms{read},
           CASE WHEN run.spec_draft_ms IS NOT NULL AND {speed} > 0
                THEN run.generated_tokens - 1 END AS timed_tokens
    FROM run JOIN job ON job.id = run.job_id WHERE {jobs}),
prompt_med AS ({median_select("r", "job_id, arm, prompt_id", dialect)}),
arm_med AS ({median_select("r", "job_id, arm", dialect)}),
arm_counts AS (
    SELECT job_id, arm, COUNT(*) AS runs, SUM(spec_drafted) AS drafted,
           SUM(spec_accepted) AS accepted, MAX(gpu_name) AS gpu_name,
           MAX(model_size) AS model_size,
           SUM(CASE WHEN throttled THEN 1 ELSE 0 END) AS throttled_runs,
           SUM(CASE WHEN weights_spilled THEN 1 ELSE 0 END) AS spilled_runs,
           SUM(timed_tokens) AS timed_tokens,
           SUM(CASE WHEN timed_tokens IS NOT NULL THEN spec_draft_ms END) AS draft_ms,
           SUM(CASE WHEN timed_tokens IS NOT NULL
                    THEN timed_tokens * 1000.0 / decode_tok_s - spec_draft_ms - spec_accept_ms
               END) AS verify_ms{summed}
    FROM r GROUP BY job_id, arm),
stats AS ({speedup_stats("prompt_med")})
SELECT job.id AS job_id, bm.median_tok_s AS baseline_tok_s, vm.median_tok_s AS variant_tok_s,
       EXP(s.mean_log) AS median_speedup, {SD_LOG_SPEEDUP} AS sd_log_speedup,
       COALESCE(vc.drafted, 0) AS drafted, COALESCE(vc.accepted, 0) AS accepted,
       COALESCE(bc.runs, 0) + COALESCE(vc.runs, 0) AS runs, bc.gpu_name, bc.model_size,
       COALESCE(bc.throttled_runs, 0) + COALESCE(vc.throttled_runs, 0) AS throttled_runs,
       COALESCE(bc.spilled_runs, 0) + COALESCE(vc.spilled_runs, 0) AS spilled_runs,
       vc.draft_ms / NULLIF(vc.timed_tokens, 0) AS draft_ms_per_token,
       vc.verify_ms / NULLIF(vc.timed_tokens, 0) AS verify_ms_per_token{chosen}
FROM job
LEFT JOIN stats s ON s.job_id = job.id
LEFT JOIN arm_med bm ON bm.job_id = job.id AND bm.arm = 'baseline'
LEFT JOIN arm_med vm ON vm.job_id = job.id AND vm.arm = 'variant'
LEFT JOIN arm_counts bc ON bc.job_id = job.id AND bc.arm = 'baseline'
LEFT JOIN arm_counts vc ON vc.job_id = job.id AND vc.arm = 'variant'
WHERE {jobs}"""


# The states of a job whose runs may change under a report: its row is never kept.
MOVING_STATES = ("running", "lost")
MOVING = ", ".join(f"'{state}'" for state in MOVING_STATES)


# A report row's columns taken from the job (and its campaign) as they are, by name: the
# SQL of each.
JOB_SQL = {"job_id": "job.id", "campaign": "c.name", "job_key": "job.job_key",
           "model": "job.model_name", "variant": "job.variant_name",
           "build": "job.build_name", "varying": "CAST(job.varying AS TEXT)",
           "gpu_class": "job.gpu_class", "worker": "job.lease_owner", "state": "job.state",
           "error": "job.error", "failure_class": "job.failure_class",
           "speculation": "job.speculation", "pairs": "job.pairs",
           "stop_reason": "job.stop_reason", "log_se": "job.log_se", "df": "job.df",
           "attempt": "job.attempt", "finished_at": "job.finished_at"}


def job_report_sql(jobs: str) -> str:
    """One row per job meeting ``jobs`` (a condition on ``job``): its columns, its campaign,
    and either the report row kept for it (``farm.results.rows.report_rows``: never for a
    job in ``MOVING_STATES``) or its summary and whether it has runs (an index lookup; no
    run is read). The varying flags, the summary and the kept row come as JSON text, for
    the caller to parse all at once (or, the kept row, to print as it is)."""
    columns = ",\n       ".join(f"{sql} AS {name}" for name, sql in JOB_SQL.items())
    return f"""
SELECT {columns},
       job.report_head,
       CASE WHEN job.report_row IS NOT NULL AND job.state NOT IN ({MOVING})
            THEN job.report_row END AS report_row,
       CASE WHEN job.report_row IS NULL OR job.state IN ({MOVING})
            THEN CAST(job.summary AS TEXT) END AS summary,
       CASE WHEN job.report_row IS NULL OR job.state IN ({MOVING})
            THEN EXISTS (SELECT 1 FROM run WHERE run.job_id = job.id) END AS has_runs
FROM job
JOIN campaign c ON c.id = job.campaign_id
WHERE {jobs}
ORDER BY c.id, job.id
"""


def jobs_stamp_sql(jobs: str, keyed: tuple[str, ...]) -> str:
    """PostgreSQL: how many jobs meet ``jobs`` and the sum of a 64-bit hash per job of its
    id, its campaign and its ``keyed`` columns (``JOB_SQL``), of when it was last claimed
    (a job handed back and claimed again is not the job it was), and of how many runs it
    has while it is in ``MOVING_STATES``: what a report of them is printed from. A row
    value hashed as one text keeps a null apart from an empty string; its times are the
    session's time zone's (the caller sets UTC). 40 ms over 20,000 jobs."""
    values = ", ".join(["job.id", "job.campaign_id", *(JOB_SQL[name] for name in keyed),
                        "job.started_at",
                        f"CASE WHEN job.state IN ({MOVING}) THEN (SELECT count(*) FROM run "
                        "WHERE run.job_id = job.id) END"])
    return f"""
SELECT count(*) AS jobs,
       COALESCE(sum(hashtextextended(CAST(ROW({values}) AS TEXT), 0)), 0) AS hashes
FROM job
JOIN campaign c ON c.id = job.campaign_id
WHERE {jobs}
"""
