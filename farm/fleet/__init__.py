"""The fleet: Celery on Redis posts jobs to GPU workers; PostgreSQL owns job state."""
