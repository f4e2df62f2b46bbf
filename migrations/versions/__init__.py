"""Alembic revisions, one a file; a package so that lint-imports reads them too."""
