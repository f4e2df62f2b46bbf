"""Settings from the environment (prefix ``FARM_``); no URL set means embedded SQLite."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"


def load_settings() -> Settings:
    """Read ``FARM_DATA_DIR`` and ``FARM_DATABASE_URL``; default to the user's app dir."""
    data_dir = Path(os.environ.get("FARM_DATA_DIR") or click.get_app_dir("specfarm"))
    data_dir = data_dir.expanduser()
    url = os.environ.get("FARM_DATABASE_URL") or f"sqlite:///{data_dir / 'farm.db'}"
    return Settings(data_dir=data_dir, database_url=url)


def redact_url(url: str) -> str:
    """A database URL fit for logs: the password replaced by ``***``."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
