"""The result store: SQLAlchemy models, engines, migrations and the writes the farm makes."""
