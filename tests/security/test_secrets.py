"""No secret in any output: passwords planted in every URL the farm reads, then every
command's output and the stored job rows scanned for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from farm.settings import load_settings, redact_url
from farm.store.db import make_engine
from farm.store.models import Job
from tests.helpers import matrix_dict, run_cli, write_matrix

SECRET = "pw-5ecre7-d0d0"
# Where nothing answers: every command that needs a service fails, and must say so without
# the password.
URLS = {
    "user:password": f"postgresql://farm:{SECRET}@127.0.0.1:1/farm",
    "password with @ and /": f"postgresql://farm:{SECRET}@x/y@127.0.0.1:1/farm",
    "query parameter": f"postgresql://farm@127.0.0.1:1/farm?password={SECRET}",
    "unparseable": f"postgresql://farm:{SECRET}@127.0.0.1:port/farm",
}
COMMANDS = [["status"], ["report"], ["workers"], ["cancel", "c"], ["db", "upgrade"],
            ["db", "grant-worker", "w"], ["export", "-o", "x.csv"], ["compare", "a", "b"]]


@pytest.mark.parametrize("url", list(URLS.values()), ids=list(URLS))
@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_a_database_url_password_never_reaches_the_output(url: str, args: list[str]) -> None:
    result = run_cli(*args, env={"FARM_DATABASE_URL": url,
                                 "FARM_BROKER_URL": f"redis://:{SECRET}@127.0.0.1:1/0"})
    assert result.exit_code in (1, 2), result.output
    assert SECRET not in result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_a_broker_password_never_reaches_the_output(tmp_path: Path, smollm2: Path,
                                                   postgres_url: str) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2))
    env = {"FARM_DATABASE_URL": postgres_url,
           "FARM_BROKER_URL": f"redis://:{SECRET}@127.0.0.1:1/0?password={SECRET}"}
    assert run_cli("db", "upgrade", env=env).exit_code == 0
    for args in (["submit", str(path)], ["workers"], ["flower"]):
        result = run_cli(*args, env={**env, "FARM_FLOWER_AUTH": f"admin:{SECRET}"})
        assert SECRET not in result.output, args


@pytest.mark.parametrize("url", [f"redis://:{SECRET}@h:1/0", f"redis://u:{SECRET}@h/0",
                                 f"postgresql://h/db?sslmode=require&token={SECRET}&x=1",
                                 f"amqp://guest:{SECRET}@h:5672//"])
def test_redaction_hides_userinfo_passwords_and_secret_parameters(url: str) -> None:
    assert SECRET not in redact_url(url) and "***" in redact_url(url)


@pytest.mark.server
def test_a_failed_start_stores_its_failure_lines_and_nothing_else(
        tmp_path: Path, smollm2: Path) -> None:
    # A context no machine holds: the server loads the model (logging its metadata, the
    # chat template among it), then fails to allocate its KV cache and exits.
    path = write_matrix(tmp_path, matrix_dict(smollm2, flags={"ctx-size": 100_000_000,
                                                              "threads": 1, "fit": "off"}))
    result = run_cli("run", str(path))
    assert result.exit_code == 1, result.output
    engine = make_engine(load_settings().database_url)
    with Session(engine) as session:
        [job] = session.scalars(select(Job))
    engine.dispose()
    assert job.state == "failed" and job.failure_class == "out_of_memory"
    assert job.error is not None and "failed to allocate" in job.error
    assert "server log: " in job.error  # the whole log stays on the node, named
    for line in job.error.splitlines()[2:]:
        assert " E " in line or " W " in line, line
    for hidden in ("chat_template", "llama_model_loader", "example_format", "n_ctx "):
        assert hidden not in job.error and hidden not in result.output
    status = run_cli("status")
    assert "failed to allocate" in status.output and "chat_template" not in status.output
