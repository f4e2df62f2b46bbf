"""The one settings object: every FARM_* variable, derived defaults, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.settings import load_settings
from tests.helpers import run_cli


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


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME with no FARM_* or XDG_* variable: the default places."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("FARM_DATA_DIR", "FARM_DATABASE_URL", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def test_the_data_dir_is_the_xdg_data_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().data_dir == home / ".local" / "share" / "specfarm"
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    settings = load_settings()
    assert settings.data_dir == home / "data" / "specfarm"
    assert settings.database_url == f"sqlite:///{home / 'data' / 'specfarm' / 'farm.db'}"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")  # ignored, as the spec says
    assert load_settings().data_dir == home / ".local" / "share" / "specfarm"


def test_data_in_the_old_config_dir_is_moved_once_with_a_line(home: Path) -> None:
    old, new = home / ".config" / "specfarm", home / ".local" / "share" / "specfarm"
    (old / "logs").mkdir(parents=True)
    (old / "farm.db").write_bytes(b"SQLite format 3\x00")
    (old / "logs" / "block-1.log").write_text("server log")

    first = run_cli("paths")
    assert first.exit_code == 0, first.output
    assert first.stderr == (f"moved the farm's data from {old} to {new}, its data dir now "
                            "(FARM_DATA_DIR chooses another)\n")
    assert first.stdout.splitlines()[0].startswith(f"database   {new / 'farm.db'}  #")
    assert (new / "farm.db").read_bytes() == b"SQLite format 3\x00"
    assert (new / "logs" / "block-1.log").read_text() == "server log"
    assert not old.exists()
    again = run_cli("paths")
    assert again.exit_code == 0 and again.stderr == ""


def test_a_database_in_both_places_is_left_where_it_is_and_named(home: Path) -> None:
    old, new = home / ".config" / "specfarm", home / ".local" / "share" / "specfarm"
    for place, content in ((old, b"old"), (new, b"new")):
        place.mkdir(parents=True)
        (place / "farm.db").write_bytes(content)
    result = run_cli("paths")
    assert result.stderr == (f"note: {old / 'farm.db'} is an older database the farm no longer "
                             f"reads; it reads {new / 'farm.db'}. Move or delete the old one\n")
    assert (old / "farm.db").read_bytes() == b"old" and (new / "farm.db").read_bytes() == b"new"


def test_an_old_database_is_left_alone_when_farm_data_dir_chooses_the_place(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = home / ".config" / "specfarm"
    old.mkdir(parents=True)
    (old / "farm.db").write_bytes(b"old")
    monkeypatch.setenv("FARM_DATA_DIR", str(home / "elsewhere"))
    result = run_cli("paths")
    assert result.exit_code == 0 and result.stderr == ""
    assert (old / "farm.db").is_file() and not (home / ".local").exists()
    assert f"data       {home / 'elsewhere'}  #" in result.stdout
