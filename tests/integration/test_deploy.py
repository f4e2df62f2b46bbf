"""deploy/: the compose file renders, the systemd units verify, the worker example parses."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
ENV_EXAMPLE = DEPLOY / "env.example"
SYSTEMD = DEPLOY / "systemd"
SECRETS = ("POSTGRES_PASSWORD", "POSTGRES_WORKER_PASSWORD", "REDIS_PASSWORD", "FARM_FLOWER_AUTH")
COORDINATOR_SERVICES = ("redis", "postgres", "flower", "migrate")
VENV_FARM = "/opt/specfarm/.venv/bin/farm"
PLACEHOLDER = re.compile(r"\$\{[A-Z_][A-Z0-9_]*(:?[-?][^}]*)?\}")
SECRET_KEY = re.compile(r"PASSWORD|AUTH|SECRET|TOKEN", re.IGNORECASE)
URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]+)@")


def tool(name: str, package: str) -> str:
    """The executable's path; a missing tool fails the test (tests/run installs it)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; tests/run installs it "
                    f"(apt-get install {package}), or install it yourself.")
    return path


def env_file_values(path: Path) -> dict[str, str]:
    """NAME=value lines of an env file, comments and blank lines skipped."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value
    return values


def compose(env_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """docker-compose on deploy/compose.yaml, shielded from this shell's variables, run
    from deploy/ as its operators do (docker-compose 1.x reads the seccomp profile from
    there)."""
    shadowed = set(env_file_values(ENV_EXAMPLE))
    env = {k: v for k, v in os.environ.items()
           if k not in shadowed and not k.startswith("COMPOSE_")}
    argv = [tool("docker-compose", "docker-compose"), "-f", str(COMPOSE),
            "--env-file", str(env_file), *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=DEPLOY, env=env, timeout=120,
                          check=False)


@pytest.fixture(scope="module")
def sentinels() -> dict[str, str]:
    """A unique value per secret, to trace where each one lands in the rendered config."""
    return {name: f"sentinel{name.lower().replace('_', '')}{uuid.uuid4().hex}" for name in SECRETS}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory, sentinels: dict[str, str]) -> Any:
    """`docker-compose config` output, parsed, with env.example's secrets swapped for sentinels."""
    lines = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        name = line.partition("=")[0]
        lines.append(f"{name}={sentinels[name]}" if name in sentinels else line)
    env_file = tmp_path_factory.mktemp("compose") / "env"
    env_file.write_text("\n".join(lines) + "\n")
    result = compose(env_file, "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="module")
def services(rendered: Any) -> dict[str, Any]:
    services: dict[str, Any] = rendered["services"]
    return services


def test_compose_config_accepts_the_example_env_with_no_unset_variable() -> None:
    result = compose(ENV_EXAMPLE, "config", "-q")
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr


def test_env_example_sets_and_explains_every_variable_compose_uses() -> None:
    used = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()))
    assert used, "compose.yaml takes no variables?"
    assert used <= set(env_file_values(ENV_EXAMPLE)), used - set(env_file_values(ENV_EXAMPLE))
    block: list[str] = []
    for line in [*ENV_EXAMPLE.read_text().splitlines(), ""]:
        if line.strip():
            block.append(line)
            continue
        assignments = [x for x in block if not x.startswith("#")]
        assert not assignments or any(x.startswith("#") for x in block), assignments
        block = []


def test_gpu_workers_reserve_one_nvidia_gpu_each(services: dict[str, Any]) -> None:
    workers = {name: spec for name, spec in services.items() if name.startswith("worker-")}
    assert len(workers) >= 2
    device_ids = []
    for name, spec in workers.items():
        devices = spec["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1, name
        assert devices[0]["driver"] == "nvidia", name
        assert devices[0]["capabilities"] == ["gpu"], name
        device_ids += devices[0]["device_ids"]
        assert spec["profiles"] == ["gpu"], name
        assert spec["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", name
        assert spec["command"].startswith("farm worker --gpu-class "), name
        assert "--devices 0 --config /etc/specfarm/worker.yaml" in spec["command"], name
        assert "depends_on" not in spec, f"{name} must start on a box without Redis/PostgreSQL"
        # tini passes SIGTERM to the worker alone (as KillMode=mixed), then a grace period.
        assert spec["init"] is True and spec["stop_signal"] == "SIGTERM", name
        assert spec["stop_grace_period"], name
        mounts = [v for v in spec["volumes"] if v.endswith(":ro")]
        assert {m.split(":")[-2] for m in mounts} >= {"/etc/specfarm/worker.yaml", "/models"}
    assert len(set(device_ids)) == len(device_ids) == len(workers)


def test_redis_persists_and_never_evicts_queued_jobs(services: dict[str, Any],
                                                     sentinels: dict[str, str]) -> None:
    redis = services["redis"]
    args = redis["command"]
    assert args[0] == "redis-server"
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--requirepass") + 1] == sentinels["REDIS_PASSWORD"]
    assert redis["image"].startswith("redis:7")
    assert redis["healthcheck"]["test"]
    assert any(v.endswith(":/data:rw") for v in redis["volumes"])


def test_coordinator_services_run_without_the_gpu_profile(services: dict[str, Any]) -> None:
    for name in COORDINATOR_SERVICES:
        assert "profiles" not in services[name], name
    postgres, flower, migrate = services["postgres"], services["flower"], services["migrate"]
    assert postgres["image"].startswith("postgres:16")
    assert postgres["healthcheck"]["test"]
    assert any(":/var/lib/postgresql/data" in v for v in postgres["volumes"])
    assert flower["command"] == "farm flower --address 0.0.0.0 --port 5555"
    assert flower["depends_on"]["redis"]["condition"] == "service_healthy"
    assert any(p.endswith(":5555:5555/tcp") for p in flower["ports"])
    assert {"FARM_BROKER_URL", "FARM_DATABASE_URL", "FARM_FLOWER_AUTH"} <= set(
        flower["environment"])
    # $$: compose prints the shell variable's escaped $ as written.
    assert migrate["command"] == ["sh", "-c", "farm db upgrade && farm db grant-worker "
                                  '"$$POSTGRES_WORKER_USER"']
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_secrets_reach_services_only_from_the_env_file(rendered: Any,
                                                       sentinels: dict[str, str]) -> None:
    text = yaml.safe_dump(rendered)
    assert "change-me" not in text, "compose.yaml hard-codes a value of env.example"
    flower = rendered["services"]["flower"]["environment"]
    assert flower["FARM_FLOWER_AUTH"] == sentinels["FARM_FLOWER_AUTH"]
    for name, spec in rendered["services"].items():
        env = spec.get("environment", {})
        if "FARM_DATABASE_URL" in env:
            # Workers log in as the worker role, the coordinator's services as the owner.
            password = "POSTGRES_WORKER_PASSWORD" if name.startswith("worker-") \
                else "POSTGRES_PASSWORD"
            assert f":{sentinels[password]}@" in env["FARM_DATABASE_URL"]
            assert f":{sentinels['REDIS_PASSWORD']}@" in env["FARM_BROKER_URL"]


def strings_under(node: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, value) for every string in a YAML tree; list items inherit their parent's key."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from strings_under(v, str(k))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            previous = node[i - 1] if i else ""
            yield from strings_under(item, "requirepass" if previous == "--requirepass" else key)
    elif isinstance(node, str):
        yield key, node


def test_compose_file_holds_no_secret_literal() -> None:
    for key, value in strings_under(yaml.safe_load(COMPOSE.read_text())):
        if SECRET_KEY.search(key) or key == "requirepass":
            assert PLACEHOLDER.fullmatch(value), f"{key}: {value!r} is not a ${{...}} placeholder"
        for password in URL_PASSWORD.findall(value):
            assert PLACEHOLDER.fullmatch(password), f"{key}: {value!r} embeds a password"


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Key -> values of a systemd unit file, sections flattened."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_worker_unit_runs_one_worker_per_gpu_index() -> None:
    unit = unit_settings(SYSTEMD / "specfarm-worker@.service")
    assert unit["ExecStart"] == [f"{VENV_FARM} worker --gpu-class ${{FARM_GPU_CLASS}} "
                                 "--devices %i --config /etc/specfarm/worker-%i.yaml"]
    assert unit["EnvironmentFile"] == ["/etc/specfarm/farm.env"]
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in unit["Environment"]
    assert unit["User"] == ["specfarm"]
    # SIGTERM to `farm worker` alone, so that llama-server keeps serving the running job.
    assert unit["KillMode"] == ["mixed"]
    assert unit["Restart"] == ["on-failure"]
    assert "TimeoutStopSec" in unit
    assert "PrivateDevices" not in unit and "DevicePolicy" not in unit, "the GPU must stay open"


@pytest.mark.parametrize(("template", "instance"), [
    ("specfarm-worker@.service", "specfarm-worker@0.service"),
    ("specfarm-flower.service", "specfarm-flower.service"),
])
def test_systemd_unit_verifies(template: str, instance: str, tmp_path: Path) -> None:
    analyze = tool("systemd-analyze", "systemd")
    farm = Path(sys.executable).with_name("farm")
    assert farm.is_file(), f"{farm}: the project is not installed in this venv"
    # verify needs the ExecStart binary to exist and the user to resolve on this machine.
    text = (SYSTEMD / template).read_text()
    assert text.count(f"ExecStart={VENV_FARM} ") == 1
    text = text.replace(f"ExecStart={VENV_FARM} ", f"ExecStart={farm} ")
    text = re.sub(r"^(User|Group)=specfarm$", r"\1=root", text, flags=re.MULTILINE)
    unit = tmp_path / instance
    unit.write_text(text)
    env = {**os.environ, "SYSTEMD_LOG_LEVEL": "warning", "SYSTEMD_COLORS": "0"}
    # No systemd as PID 1 here: verify loads the unit offline. --recursive-errors=no keeps
    # warnings from the host's own units out; unknown keys and bad values only warn, so
    # any output fails the test.
    result = subprocess.run([analyze, "verify", "--man=no", "--recursive-errors=no", str(unit)],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert not result.stderr.strip() and not result.stdout.strip(), result.stderr + result.stdout


def test_worker_example_config_parses_with_every_key() -> None:
    config = yaml.safe_load((DEPLOY / "worker.example.yaml").read_text())
    assert set(config) == {"name", "gpu-class", "devices", "models-dir", "downloads-dir",
                           "builds"}
    assert isinstance(config["name"], str) and isinstance(config["gpu-class"], str)
    assert config["devices"] and all(isinstance(d, int) for d in config["devices"])
    assert Path(config["models-dir"]).is_absolute()
    # Downloads go where both deployments let the worker write: their cache.
    assert Path(config["downloads-dir"]).is_relative_to("/var/cache/specfarm")
    assert config["builds"] and all(Path(p).is_absolute() for p in config["builds"].values())


def test_worker_image_builds_llama_cpp_only_through_farm_build() -> None:
    dockerfile = (DEPLOY / "worker.Dockerfile").read_text()
    assert re.search(r"^FROM nvidia/cuda:", dockerfile, re.MULTILINE)
    assert re.search(r"^ARG LLAMA_REF=", dockerfile, re.MULTILINE)
    runs = re.findall(r"^RUN (.*?)(?<!\\)$", dockerfile, re.MULTILINE | re.DOTALL)
    cmake_call = re.compile(r"\bcmake\s+(-S|-B|--build)")
    assert not any(cmake_call.search(run) for run in runs), "build logic belongs in `farm build`"
    # The image's builds go outside the cache volume (FARM_CACHE_DIR for that command only).
    image = "FARM_CACHE_DIR=/opt/specfarm/image "
    build_lines = [run.removeprefix(image) for run in runs
                   if run.startswith(f"{image}farm build master")]
    assert len(build_lines) == 1 and '--ref "${LLAMA_REF}"' in build_lines[0]
    argv = shlex.split(build_lines[0].replace("\\\n", " ").replace('"${', "").replace('}"', ""))
    argv = [arg.replace("LLAMA_REPO", "https://example.invalid/llama.cpp")
            .replace("LLAMA_REF", "b11434").replace("CUDA_ARCH", "86;89;90") for arg in argv]
    farm = str(Path(sys.executable).with_name("farm"))
    dry = subprocess.run([farm, *argv[1:], "--dry-run"], capture_output=True, text=True,
                         check=False)
    assert dry.returncode == 0, dry.stderr
    assert "-DGGML_CUDA=ON" in dry.stdout and "-DCMAKE_CUDA_ARCHITECTURES=86;89;90" in dry.stdout
