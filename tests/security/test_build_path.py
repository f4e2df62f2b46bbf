"""Opening someone's matrix runs none of their binaries: `farm run` (even `--dry-run`)
executes a matrix's `build: {path: ...}` only with --allow-build-path, or once the binary
is registered with `farm build NAME --binary PATH`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import matrix_dict, run_cli, write_matrix
from workers.setup.provision import Provisioned


def _their_binary(tmp_path: Path) -> tuple[Path, Path]:
    """An executable that leaves a marker when run, as a hostile "llama-server" would."""
    marker = tmp_path / "ran"
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\ntouch {marker}\n")
    binary.chmod(0o755)
    return binary, marker


def test_a_matrix_binary_is_not_executed_without_the_opt_in(tmp_path: Path,
                                                           smollm2: Path) -> None:
    binary, marker = _their_binary(tmp_path)
    path = write_matrix(tmp_path, matrix_dict(smollm2, build={"name": "theirs",
                                                              "path": str(binary)}))
    for args in (["run", "--dry-run", str(path)], ["run", str(path)]):
        result = run_cli(*args)
        assert result.exit_code == 2, result.output
        assert "--allow-build-path" in result.stderr
        assert "farm build theirs --binary PATH" in result.stderr
        assert not marker.exists()
    opted_in = run_cli("run", "--dry-run", "--allow-build-path", str(path))
    # The opt-in runs it (its --version and --help), in the sandbox: its marker lands in
    # the sandbox's private /tmp. With the sandbox off it lands here.
    assert opted_in.exit_code == 2 and "is this a llama-server binary?" in opted_in.stderr
    assert not marker.exists()
    unsandboxed = run_cli("run", "--dry-run", "--allow-build-path", str(path),
                          env={"FARM_SANDBOX": "off"})
    assert unsandboxed.exit_code == 2 and marker.exists()


def test_a_registered_binary_runs_by_name(tmp_path: Path, smollm2: Path,
                                         provisioned: Provisioned,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_CACHE_DIR", str(tmp_path / "cache"))  # the registry is this node's
    registered = run_cli("build", "mine", "--binary", str(provisioned.server))
    assert registered.exit_code == 0, registered.output
    assert registered.stdout.startswith(f"build mine: {provisioned.server.resolve()} "
                                        "(registered)\n")
    by_name = write_matrix(tmp_path, matrix_dict(smollm2, build="mine"))
    result = run_cli("run", "--dry-run", str(by_name))
    assert result.exit_code == 0, result.output
    assert f"{provisioned.server.resolve()} --model" in result.stdout
    # Its path, written out, is the registered binary: no opt-in needed either.
    by_path = write_matrix(tmp_path, matrix_dict(smollm2, build={
        "name": "mine", "path": str(provisioned.server.resolve())}), "by-path.yaml")
    assert run_cli("run", "--dry-run", str(by_path)).exit_code == 0
