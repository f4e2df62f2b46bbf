"""Alembic migrations of the farm's store; shipped in the wheel, run on SQLite and PostgreSQL."""
