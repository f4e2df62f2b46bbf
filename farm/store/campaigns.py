"""Campaigns by name, in plain SQL: what every report and status command looks up first
(without the ORM, which takes a tenth of a second to load)."""

from __future__ import annotations

from sqlalchemy import Engine, text

from farm.errors import ConfigError


def latest_campaign(engine: Engine) -> str:
    """The name of the campaign created last."""
    query = text("SELECT name FROM campaign ORDER BY created_at DESC, id DESC LIMIT 1")
    with engine.connect() as connection:
        name = connection.scalar(query)
    if name is None:
        raise ConfigError("the store holds no campaign yet; run `farm run MATRIX` first")
    return str(name)


def campaign_id(engine: Engine, name: str) -> int:
    """The id of the campaign called ``name``; a ConfigError naming it if there is none."""
    with engine.connect() as connection:
        campaign_id = connection.scalar(text("SELECT id FROM campaign WHERE name = :name"),
                                        {"name": name})
    if campaign_id is None:
        raise ConfigError(f"no campaign named {name!r}; `farm report` without a name shows "
                          "the latest")
    return int(campaign_id)
