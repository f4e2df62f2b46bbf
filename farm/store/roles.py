"""The PostgreSQL role GPU workers log in as: it runs jobs, it does not make them.

A worker claims a job, renews its lease, writes its runs, streams, GPU samples and the
job's outcome, registers itself and its models, and re-posts jobs whose messages were
lost. It never creates, changes or deletes a campaign or a job's identity and spec: the
role gets SELECT on everything, INSERT and UPDATE on the tables of measurements, and
UPDATE on the job table's state columns only. A worker whose credentials leak can then
write results, but cannot make another worker run a job of its own making.
"""

from __future__ import annotations

import re

from sqlalchemy import Engine, text

from farm.errors import ConfigError

# Tables a worker fills (runs and what belongs to them, its own row, the models it read).
WORKER_WRITES = ("run", "stream", "gpu_sample", "model", "worker")
# The job columns a worker changes: state, lease, outbox, retries, the refusals of workers
# that handed it back, the time its builds took and the finished job's figures. Not
# campaign_id, job_key, comparable_key, the names, varying, spec, gpu_class or
# max_attempts: what the job is belongs to whoever submitted it.
JOB_STATE_COLUMNS = ("state", "attempt", "error", "lease_owner", "lease_expires_at",
                     "task_id", "posted_at", "post_gen", "due_at", "translations",
                     "failure_class", "speculation", "pairs", "stop_reason", "log_se", "df",
                     "summary", "started_at", "finished_at", "refusals", "build_seconds",
                     "deferrals")
_ROLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def grant_statements(role: str) -> list[str]:
    """The SQL that gives ``role`` a worker's rights on the current schema, revoking any
    other (idempotent: run it after every upgrade, new tables included)."""
    if not _ROLE.match(role):
        raise ConfigError(f"role {role!r}: lower-case letters, digits and _ (a PostgreSQL "
                          "identifier)")
    quoted = f'"{role}"'
    columns = ", ".join(JOB_STATE_COLUMNS)
    return [
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {quoted}",
        f"GRANT USAGE ON SCHEMA public TO {quoted}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {quoted}",
        f"GRANT INSERT, UPDATE ON {', '.join(WORKER_WRITES)} TO {quoted}",
        f"GRANT UPDATE ({columns}) ON job TO {quoted}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {quoted}",
    ]


def require_owner(engine: Engine, command: str) -> None:
    """Refuse, before anything is written, a login that may not create campaigns: the
    worker role's URL given where the owner's is needed."""
    if engine.dialect.name != "postgresql":
        return  # the embedded SQLite store has no roles
    with engine.connect() as connection:
        role, owner, worker = connection.execute(text(
            "SELECT current_user, has_table_privilege('campaign', 'INSERT'), "
            "has_table_privilege('run', 'INSERT')")).one()
    if owner:
        return
    whose = ("the worker role's (it may write runs, not campaigns)" if worker
             else "a role's without permission on campaign")
    raise ConfigError(f"FARM_DATABASE_URL logs in as {role}: that URL is {whose}; "
                      f"`{command}` needs the owner's URL, the role that ran `farm db upgrade`")


def grant_worker(engine: Engine, role: str) -> None:
    """Give the existing PostgreSQL ``role`` a worker's rights (``grant_statements``)."""
    if engine.dialect.name != "postgresql":
        raise ConfigError("worker roles are PostgreSQL's: the embedded SQLite store has no "
                          "roles (set FARM_DATABASE_URL or --url)")
    with engine.begin() as connection:
        exists = connection.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = :role"),
                                   {"role": role})
        if not exists:
            raise ConfigError(f"PostgreSQL has no role {role!r}; create it first (CREATE ROLE "
                              f"{role} LOGIN PASSWORD '...'), then grant it")
        for statement in grant_statements(role):
            connection.execute(text(statement))
