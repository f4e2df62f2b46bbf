"""The one settings object: every FARM_* variable, derived defaults, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.settings import load_settings


def test_defaults_follow_from_other_settings(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FARM_LEASE_SECONDS", "15")
    monkeypatch.setenv("FARM_BROKER_URL", "")  # empty is unset
    settings = load_settings()
    assert settings.models_dir == tmp_path / "cache" / "models"
    assert settings.repost_after == 30 and settings.broker_url is None
    assert settings.embedded and settings.database_url.endswith("farm-data/farm.db")
    monkeypatch.setenv("FARM_MODELS_DIR", "~/models")
    assert load_settings().models_dir == Path.home() / "models"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("FARM_LEASE_SECONDS", "soon", "FARM_LEASE_SECONDS='soon': input should be a valid integer"),
    ("FARM_LEASE_SECONDS", "2", "FARM_LEASE_SECONDS='2': input should be greater than or equal"),
    ("FARM_JOB_TIME_LIMIT", "50000", "FARM_VISIBILITY_TIMEOUT (43200 s) must exceed the job"),
])
def test_a_bad_variable_is_one_error_naming_it(monkeypatch: pytest.MonkeyPatch, name: str,
                                               value: str, message: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value).startswith(message)
    assert "FARM_REPOST_AFTER" not in str(caught.value)  # no second error for a derived one
