"""A node in the fleet: the Celery task that claims and runs a job under its lease, the
worker process with its heartbeat, and the worker's own config."""
