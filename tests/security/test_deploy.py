"""deploy/ has no unsafe default: compose refuses to start without its passwords and the
address to publish on, the worker image runs as an unprivileged user, Flower listens on a
private address. (No Docker engine here: `docker-compose config` and the files are what
can be checked; the non-root image's access to /dev/nvidia* is unverified until a GPU node
runs it, docs/deployment.md.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.integration.test_deploy import DEPLOY, ENV_EXAMPLE, SYSTEMD, compose, unit_settings

REQUIRED = ("SPECFARM_PUBLISH_ADDRESS", "POSTGRES_PASSWORD", "POSTGRES_WORKER_PASSWORD",
            "REDIS_PASSWORD", "FARM_FLOWER_AUTH")


def _env_without(tmp_path: Path, name: str, empty: bool) -> Path:
    lines = [line for line in ENV_EXAMPLE.read_text().splitlines()
             if not line.startswith(f"{name}=")]
    env = tmp_path / "env"
    env.write_text("\n".join([*lines, f"{name}=" if empty else ""]) + "\n")
    return env


@pytest.mark.parametrize("empty", [False, True], ids=["unset", "empty"])
@pytest.mark.parametrize("name", REQUIRED)
def test_compose_refuses_to_start_without_a_password_or_a_publish_address(
        tmp_path: Path, name: str, empty: bool) -> None:
    result = compose(_env_without(tmp_path, name, empty), "config", "-q")
    assert result.returncode != 0, f"compose accepted a missing {name}"
    assert name in result.stderr, result.stderr


def test_no_port_is_published_on_every_interface() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    ports = [port for spec in services.values() for port in spec.get("ports", [])]
    assert len(ports) == 3
    for port in ports:
        assert port.startswith("${SPECFARM_PUBLISH_ADDRESS:?"), port


def test_the_worker_image_runs_as_an_unprivileged_user() -> None:
    dockerfile = (DEPLOY / "worker.Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert users and users[-1] not in ("root", "0"), users
    # The last USER is set before the image's command, so the worker never runs as root.
    assert dockerfile.index(f"USER {users[-1]}") < dockerfile.index("CMD ")
    assert re.search(rf"useradd .*--groups video .*{users[-1]}", dockerfile, re.DOTALL)


def test_flower_listens_on_a_private_address_by_default() -> None:
    unit = unit_settings(SYSTEMD / "specfarm-flower.service")
    assert unit["ExecStart"] == ["/opt/specfarm/.venv/bin/farm flower --address "
                                 "${FARM_FLOWER_ADDRESS} --port 5555"]
    assert "FARM_FLOWER_ADDRESS=127.0.0.1" in unit["Environment"]
    assert "0.0.0.0" not in (SYSTEMD / "specfarm-flower.service").read_text()
