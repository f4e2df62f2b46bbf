#!/usr/bin/env bash
# Run once by the postgres image when it makes its data directory (docker-entrypoint-initdb.d):
# the role GPU workers log in as. It gets its grants from `farm db grant-worker`, which the
# compose file's `migrate` service runs after every `farm db upgrade`: it can claim and run
# jobs and write their results, but not create, change or delete campaigns or job specs.
set -euo pipefail
: "${POSTGRES_WORKER_USER:?}" "${POSTGRES_WORKER_PASSWORD:?}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v role="$POSTGRES_WORKER_USER" -v password="$POSTGRES_WORKER_PASSWORD" <<'SQL'
CREATE ROLE :"role" LOGIN PASSWORD :'password';
SQL
