"""What a job's llama-server is given: its argv (offline, farm-owned flags), a minimal
environment, and a start that fails as the job's error, never as a hang; what the build
leaves out (downloads, TLS, subprocesses)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from farm.errors import ConfigError, ProcessNotStarted
from workers.job.runtime.server import LlamaServer
from workers.paths import NodePaths
from workers.setup.builds import SAFE_FLAGS, BuildRequest, configure_argv
from workers.setup.manifests import load_manifest
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
ARGS = ["--ctx-size", "512", "--threads", "1"]
PLANTED = {"FARM_DATABASE_URL": "postgresql://u:pw-db-4f1c@db.invalid/farm",
           "FARM_BROKER_URL": "redis://:pw-broker-77ae@redis.invalid:6379/0",
           "FARM_FLOWER_AUTH": "admin:pw-flower-0b3d", "HF_TOKEN": "hf_pw-hub-9e21",
           "AWS_SECRET_ACCESS_KEY": "pw-aws-51c0", "OPENAI_API_KEY": "sk-pw-oai-7d2e",
           # llama.cpp reads LLAMA_ARG_* as options: this one would start a shell tool.
           "LLAMA_ARG_TOOLS": "exec_shell_command", "LLAMA_ARG_HOST": "0.0.0.0"}


def test_a_server_gets_a_minimal_environment_and_starts_offline(
        provisioned: Provisioned, smollm2: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    server = LlamaServer(str(provisioned.server), str(smollm2), ARGS, tmp_path / "env.log",
                         env={"CUDA_VISIBLE_DEVICES": "0"})
    with server:
        assert server.pid is not None
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().decode().split("\0")
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")
    names = {entry.partition("=")[0] for entry in environ if entry}
    # PWD: bubblewrap's, the sandbox's working folder ("/").
    assert names <= {"PATH", "HOME", "LC_ALL", "LANG", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
                     "CUDA_VISIBLE_DEVICES", "PWD"} | {n for n in names if n.startswith(
                         ("LC_", "CUDA_", "GGML_", "NVIDIA_"))}, names
    assert not [v for v in PLANTED.values() if v in "\0".join(environ)]
    assert f"PATH={os.environ['PATH']}" in environ and "CUDA_VISIBLE_DEVICES=0" in environ
    assert "--offline" in cmdline
    assert cmdline[cmdline.index("--host") + 1] == "/run/specfarm/llama-server.sock"


def test_a_value_with_a_nul_byte_fails_the_start_as_the_jobs_error(
        provisioned: Provisioned, smollm2: Path, tmp_path: Path) -> None:
    server = LlamaServer(str(provisioned.server), str(smollm2), ["--alias", "a\x00b"],
                         tmp_path / "nul.log")
    with pytest.raises(ProcessNotStarted, match="could not be started") as caught:
        server.start()
    assert caught.value.failure_class == "config" and isinstance(caught.value, ConfigError)
    assert server.pid is None


def test_a_binary_that_cannot_be_executed_fails_as_config(smollm2: Path, tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("not a program")  # not executable
    with pytest.raises(ProcessNotStarted, match="Permission denied"):
        LlamaServer(str(binary), str(smollm2), ARGS, tmp_path / "x.log").start()


def test_the_farms_builds_leave_downloads_tls_and_subprocesses_out(
        provisioned: Provisioned, smollm2: Path, node_paths: NodePaths) -> None:
    manifest = load_manifest("cpu", node_paths)
    assert manifest is not None and set(SAFE_FLAGS) <= set(manifest.configure)
    # Even if --tools reached this binary, it could not start a program.
    result = subprocess.run([str(provisioned.server), "-m", str(smollm2), "--port", "0",
                             "--tools", "exec_shell_command", *ARGS], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "subprocess is not enabled on this build" in result.stdout + result.stderr
    for arg in ("-DLLAMA_OPENSSL=ON", "-DLLAMA_CURL=ON", "-DLLAMA_SUBPROCESS=ON"):
        with pytest.raises(ConfigError, match="without downloads, TLS and subprocesses"):
            configure_argv(BuildRequest(name="x", source="y", cmake_args=(arg,)), Path("/s"),
                           Path("/s/b"))
