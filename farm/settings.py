"""Every setting of the farm, from the environment (prefix ``FARM_``), validated once.

No database URL means embedded SQLite in the data dir. The one ``Settings`` object is read
by the command line and passed down; nothing below it calls ``load_settings`` (what else
reads the environment, and why: docs/architecture.md).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Literal

import click
from pydantic import AliasChoices, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from farm.errors import ConfigError
from farm.gpus import ClassName

# Whether a commit's builds and servers run in the sandbox (docs/security.md): the node
# operator's choice, never a job's.
SandboxMode = Literal["on", "off"]


def _data_home() -> Path:
    """The farm's data dir by the XDG base directory spec: ``$XDG_DATA_HOME/specfarm``, or
    ``~/.local/share/specfarm`` (a relative XDG_DATA_HOME is ignored, as the spec says)."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share") / "specfarm"


def old_data_dir() -> Path:
    """Where versions before 0.2 kept the data: click's config dir (``~/.config/specfarm``
    on Linux)."""
    return Path(click.get_app_dir("specfarm"))


def adopt_old_data_dir() -> str | None:
    """Move the data of the old location (a ``farm.db`` there) to the data dir, once, and
    say so; ``None`` when there is nothing to move or ``FARM_DATA_DIR`` or
    ``FARM_DATABASE_URL`` chose another place. With a database in both, nothing moves and
    the line says which one is read."""
    if os.environ.get("FARM_DATA_DIR") or os.environ.get("FARM_DATABASE_URL"):
        return None
    old, new = old_data_dir(), _data_home()
    if not (old / "farm.db").is_file() or old.resolve() == new.resolve():
        return None
    if (new / "farm.db").exists():
        return (f"note: {old / 'farm.db'} is an older database the farm no longer reads; it "
                f"reads {new / 'farm.db'}. Move or delete the old one")
    new.mkdir(parents=True, exist_ok=True)
    for entry in sorted(old.iterdir()):
        if not (new / entry.name).exists():
            shutil.move(entry, new / entry.name)
    if not any(old.iterdir()):
        old.rmdir()
    return (f"moved the farm's data from {old} to {new}, its data dir now "
            "(FARM_DATA_DIR chooses another)")


class Settings(BaseSettings):
    """Every ``FARM_*`` setting; build it with :func:`load_settings` for errors that name them."""

    model_config = SettingsConfigDict(env_prefix="FARM_", env_ignore_empty=True,
                                      extra="ignore", frozen=True, populate_by_name=True)

    data_dir: Path = Field(default_factory=_data_home, description=(
        "Embedded database, server logs; default $XDG_DATA_HOME/specfarm or "
        "~/.local/share/specfarm."))
    database_url: str = Field(description="Result store; default SQLite in the data dir, "
                                          "postgresql://... for a fleet.")
    broker_url: str | None = Field(None, description="Redis for the fleet (redis://...).")
    cache_dir: Path = Field(Path.home() / ".cache" / "specfarm",
                            description="Builds, downloads, model hashes.")
    models_dir: Path = Field(description="GGUF files; default CACHE_DIR/models.")
    # Hub and URL models are downloaded here (their lock file too): a node whose GGUF
    # folder is read-only (a deployed worker's /models) downloads into its cache instead.
    downloads_dir: Path = Field(description="Hub and URL model downloads; default MODELS_DIR.")
    # Job lease on the database clock; heartbeats renew it every third of its length.
    lease_seconds: int = Field(300, ge=5, description="A running job's lease, seconds.")
    # A queued or lost job whose message has not been claimed this long after it was
    # posted is checked against what the broker holds, and posted again if its message is
    # gone (default: twice the lease).
    repost_after: int = Field(ge=5, description="Re-post an unclaimed job after this long, "
                                                "seconds; default twice the lease.")
    # Redis redelivers an unacknowledged message after this long: it must exceed the
    # longest job (the time limit below), or a running job is handed to a second worker.
    visibility_timeout: int = Field(12 * 3600, ge=60, description=(
        "Redis redelivers an unacknowledged job after this long, seconds."))
    max_attempts: int = Field(3, ge=1, description="Attempts before a job fails.")
    # Soft time limit of one job on a worker (the hard limit is 5 minutes later).
    job_time_limit: int = Field(6 * 3600, ge=60, description="One job's time limit on a "
                                                             "worker, seconds.")
    # Most seconds a worker spends making a job's builds before the job's own time limit
    # starts (the build is not the job's time).
    build_time_limit: int = Field(2 * 3600, ge=60, description="Most seconds a worker spends "
                                  "making a job's builds.")
    flower_auth: str | None = Field(None, description="user:password for `farm flower`.")
    # The Hugging Face Hub, under huggingface_hub's own variable names: a node's token
    # stays in its environment (never in a job, never passed to llama-server).
    hf_endpoint: str = Field("https://huggingface.co", validation_alias=AliasChoices(
        "FARM_HF_ENDPOINT", "HF_ENDPOINT"), description="The Hub's URL.")
    hf_token: SecretStr | None = Field(None, validation_alias=AliasChoices(
        "FARM_HF_TOKEN", "HF_TOKEN"), description="Token for gated or private repositories.")
    hf_offline: bool = Field(False, validation_alias=AliasChoices(
        "FARM_HF_OFFLINE", "HF_HUB_OFFLINE"), description="Use downloaded models only.")
    # What this machine's runs join: `farm run`, `bisect` and `track` run a matrix's jobs
    # of this class only (another with --as-class NAME), so that a laptop's runs never
    # enter an RTX 3090's history. A worker's class is its config's.
    gpu_class: ClassName = Field("default", description="This machine's GPU class.")
    sandbox: SandboxMode = Field("on", description=(
        "Run every build and server of a commit in bubblewrap (no network, no secrets); "
        "`off` only where this node's operator trusts every source it builds."))

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """Defaults that follow from other settings: the embedded database in the data dir,
        the models dir in the cache dir, downloads in the models dir, the repost bound from
        the lease."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("data_dir", "cache_dir", "models_dir", "downloads_dir"):
            if isinstance(data.get(key), str):
                data[key] = Path(data[key]).expanduser()
        data_dir = data.get("data_dir") or _data_home()
        data.setdefault("database_url", f"sqlite:///{Path(data_dir) / 'farm.db'}")
        cache = data.get("cache_dir") or cls.model_fields["cache_dir"].default
        data.setdefault("models_dir", Path(cache) / "models")
        data.setdefault("downloads_dir", data["models_dir"])
        lease = str(data.get("lease_seconds", 300))
        # An invalid lease reports its own error; the bound then needs no second one.
        data.setdefault("repost_after", max(5, 2 * int(lease)) if lease.isdigit() else 600)
        return data

    @property
    def task_time_limit(self) -> int:
        """The most seconds one job may take on a worker (Celery's soft limit; the hard one
        is 300 s later): its builds, its measurement, and as long as a build again while it
        lets other jobs' builds go first (``workers.fleet.task``)."""
        return self.job_time_limit + 2 * self.build_time_limit

    @model_validator(mode="after")
    def _visibility_outlasts_jobs(self) -> Settings:
        if self.visibility_timeout <= self.task_time_limit + 300:
            raise ValueError(
                f"FARM_VISIBILITY_TIMEOUT ({self.visibility_timeout} s) must exceed the job "
                f"time limit FARM_JOB_TIME_LIMIT ({self.job_time_limit} s) + twice the "
                f"FARM_BUILD_TIME_LIMIT ({self.build_time_limit} s: its own builds, and other "
                "jobs' it lets go first) + 300 s, or Redis hands a running job to a second "
                "worker")
        return self

    @property
    def logs_dir(self) -> Path:
        """Where llama-server logs go: ``DATA_DIR/logs``."""
        return self.data_dir / "logs"

    @property
    def embedded(self) -> bool:
        """True for SQLite: the single-machine store of `farm run`, not a fleet's PostgreSQL."""
        return self.database_url.startswith("sqlite")


def load_settings(**overrides: Any) -> Settings:
    """The ``FARM_*`` environment (``overrides`` on top), or a ConfigError naming the
    variable and what it takes."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError("; ".join(_explain(error) for error in exc.errors())) from exc


def _explain(error: Any) -> str:
    name = "FARM_" + "_".join(str(part) for part in error["loc"]).upper()
    if not error["loc"]:  # a check across settings: its message says it all
        return str(error["msg"]).removeprefix("Value error, ")
    value = redact_url(str(error.get("input")))
    if "AUTH" in name or "PASSWORD" in name or "TOKEN" in name:
        value = "***"
    return f"{name}={value!r}: {error['msg'].lower()}"


# A URL's password (everything between the user's ``:`` and the last ``@``: a password may
# hold ``@`` or ``/``), and query parameters that carry secrets (``?password=``,
# ``&token=``...). Plain text, no parsing: it works on URLs no parser accepts.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*):\S*@")
_SECRET_PARAM = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|pass|token|secret|api[-_]?key|access[-_]?token|"
    r"auth)=)[^&;#\s]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """A URL fit for any output: its password and secret query parameters as ``***``."""
    return _SECRET_PARAM.sub(r"\g<key>***", _USERINFO.sub(r"\g<head>:***@", url))
