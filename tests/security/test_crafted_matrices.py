"""Matrices that try to make a node run a program, reach the network or touch files: each
refused at load with one message naming the option and why, exit 2, nothing run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import matrix_dict, run_cli, write_matrix

# (flags of a variant, what the one-line error must say)
CRAFTED: list[tuple[dict[str, Any], str]] = [
    ({"tools": "exec_shell_command"}, "--tools runs programs"),
    ({"mcp-servers-json": '{"x": {"command": "/bin/sh", "args": ["-c", "id"]}}'},
     "--mcp-servers-json runs programs"),
    ({"mcp-servers-config": "/tmp/mcp.json"}, "--mcp-servers-config runs programs"),
    ({"agent": True}, "--agent runs programs"),
    ({"-ag": True}, "--agent runs programs"),
    ({"tools-runtime": "docker:alpine"}, "--tools-runtime runs programs"),
    ({"model-url": "http://host/x.gguf"}, "--model-url reaches the network"),
    ({"-mu": "http://host/x.gguf"}, "--model-url reaches the network"),
    ({"-hf": "user/model"}, "--hf-repo reaches the network"),
    ({"-hfd": "user/model"}, "--spec-draft-hf reaches the network"),
    ({"-dr": "ai/model"}, "--docker-repo reaches the network"),
    ({"rpc": "10.0.0.1:50052"}, "--rpc reaches the network"),
    ({"log-prompts-dir": "/tmp/anywhere"}, "--log-prompts-dir writes files"),
    ({"log-file": "/tmp/x.log"}, "--log-file writes files"),
    ({"slot-save-path": "/tmp"}, "--slot-save-path writes files"),
    ({"-lcd": "/tmp/cache.bin"}, "--lookup-cache-dynamic writes files"),
    ({"chat-template-file": "/etc/passwd"}, "--chat-template-file reads files outside"),
    ({"api-key-file": "/etc/shadow"}, "--api-key-file reads files outside"),
    ({"-jf": "/etc/passwd"}, "--json-schema-file reads files outside"),
    ({"host": "0.0.0.0"}, "--host belongs to the farm"),
    ({"no-slots": True}, "--no-slots belongs to the farm"),
    ({"offline": False}, "--offline belongs to the farm"),
    ({"embedding": True}, "--embedding is not a benchmark option"),
    ({"gpt-oss-20b-default": True}, "--gpt-oss-20b-default reaches the network"),
    ({"ctx-size": "1024\x00"}, "contains a control character"),
    ({"alias": "a\x1bb"}, "contains a control character"),
    ({"ctx-size": "1024; touch /tmp/pwned"}, "contains ';'"),
    ({"n-gpu-layers": "../../x"}, "is not a number"),
    ({"override-tensor": "blk.*=CPU rm"}, "is not tensor-pattern=buffer-type pairs"),
]


@pytest.mark.parametrize(("flags", "message"), CRAFTED,
                         ids=[next(iter(flags)) + f"-{i}" for i, (flags, _) in enumerate(CRAFTED)])
@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_crafted_matrix_is_refused_with_its_reason_and_exit_2(
        tmp_path: Path, smollm2: Path, flags: dict[str, Any], message: str,
        command: str) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2, variants=[
        {"name": "v", "flags": {"spec-type": "ngram-simple", **flags}}]))
    result = run_cli(command, "--dry-run", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "farm-data" / "farm.db").exists()  # nothing written


def test_an_args_string_is_held_to_the_same_list(tmp_path: Path, smollm2: Path) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2, variants=[
        {"name": "v", "args": "--spec-type ngram-simple --tools exec_shell_command"}]))
    result = run_cli("run", "--dry-run", str(path))
    assert result.exit_code == 2 and "--tools runs programs" in result.stderr


def test_a_short_name_is_canonical_in_the_argv_and_confined_as_its_long_name(
        tmp_path: Path, smollm2: Path) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2, flags={"-c": 1024, "-t": 2, "ngl": 0},
                                              variants=[{"name": "v", "flags": {
                                                  "spec-type": "ngram-simple"}}]))
    result = run_cli("run", "--dry-run", str(path))
    assert result.exit_code == 0, result.output
    assert "--ctx-size 1024 --threads 2 --n-gpu-layers 0" in result.stdout
    # A worker resolves every file a flag names inside its models dir: -mm is --mmproj.
    escape = write_matrix(tmp_path, matrix_dict(smollm2, variants=[
        {"name": "v", "flags": {"spec-type": "ngram-simple", "-mm": "../../../etc/hostname"}}]),
        "escape.yaml")
    result = run_cli("submit", "--dry-run", str(escape))
    assert result.exit_code == 2, result.output
    assert "--mmproj '../../../etc/hostname' climbs out of its folder with '..'" \
        in result.stderr


def test_an_operator_allowed_option_passes_and_a_dangerous_one_cannot_be_allowed(
        tmp_path: Path, smollm2: Path) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2, variants=[
        {"name": "v", "flags": {"spec-type": "ngram-simple", "reverse-prompt": "STOP"}}]))
    assert run_cli("run", "--dry-run", str(path)).exit_code == 2
    allowed = run_cli("run", "--dry-run", "--allow-option", "reverse-prompt", str(path))
    assert allowed.exit_code == 0, allowed.output
    assert "--reverse-prompt STOP" in allowed.stdout
    refused = run_cli("run", "--dry-run", "--allow-option", "tools", str(path))
    assert refused.exit_code == 2
    assert refused.stderr == ("error: --allow-option: --tools runs programs (built-in tools for "
                              "agents, a shell among them, served on the server's port without "
                              "authentication); it cannot be allowed\n")


SHA = "0" * 64
# A `file:` that would climb out of the download's folder, and what the one line must say.
CRAFTED_FILES: list[tuple[str, str]] = [
    ("../../../../var/cache/specfarm/builds/master/bin/llama-server.gguf",
     "climbs out of its folder with '..'"),
    ("/home/me/.ssh/authorized_keys.gguf", "is an absolute path"),
    ("sub\\..\\..\\x.gguf", "holds a backslash"),
    ("x\nmodel.gguf", "holds a control character"),
    ("--model-url.gguf", "has a component starting with '-'"),
    ("Q4_K_M//x.gguf", "has an empty or '.' component"),
]
SOURCES = {"url": {"url": "https://host.example/x.gguf", "sha256": SHA},
           "hf": {"hf": "owner/repo"}}


@pytest.mark.parametrize(("file", "message"), CRAFTED_FILES,
                         ids=[message.split()[-1] for _, message in CRAFTED_FILES])
@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("key", ["models", "draft-models"])
def test_a_download_named_to_climb_out_is_refused_at_load(
        tmp_path: Path, smollm2: Path, file: str, message: str, source: str, key: str) -> None:
    entry = {"name": "crafted", **SOURCES[source], "file": file}
    matrix = matrix_dict(smollm2)
    if key == "models":
        matrix["models"] = [entry]
    else:
        matrix |= {"draft-models": [entry], "variants": [{"name": "v", "flags": {
            "spec-type": "draft-simple", "spec-draft-model": "crafted"}}]}
    result = run_cli("run", "--dry-run", str(write_matrix(tmp_path, matrix)))
    assert result.exit_code == 2, result.output
    assert f"{key}[0].file" in result.stderr and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_url_that_ends_in_no_file_name_needs_file(tmp_path: Path, smollm2: Path) -> None:
    matrix = matrix_dict(smollm2, models=[{"name": "m", "url": "https://host.example/-rf",
                                           "sha256": SHA}])
    result = run_cli("run", "--dry-run", str(write_matrix(tmp_path, matrix)))
    assert result.exit_code == 2
    assert "model 'm': the file name its `url` ends in (or give `file:`) '-rf' has a " \
           "component starting with '-'" in result.stderr


def test_a_symlink_in_the_models_dir_that_leads_out_is_refused_before_a_download(
        tmp_path: Path, smollm2: Path) -> None:
    models, outside = tmp_path / "models", tmp_path / "outside"
    (models / "url").mkdir(parents=True)
    outside.mkdir()
    (models / "url" / SHA).symlink_to(outside)
    matrix = matrix_dict(smollm2, models=[{"name": "m", "url": "http://127.0.0.1:9/x.gguf",
                                           "sha256": SHA}])
    result = run_cli("run", str(write_matrix(tmp_path, matrix)),
                     env={"FARM_MODELS_DIR": str(models)})
    assert result.exit_code == 2, result.output
    assert "leads out of" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(outside.iterdir()) == []  # no .partial, no file, no folder


def test_farm_run_reads_a_flag_file_outside_the_models_dir_only_with_allow_path(
        tmp_path: Path, smollm2: Path) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2, variants=[{"name": "v", "flags": {
        "spec-type": "ngram-simple", "control-vector-scaled": "/etc/passwd:1.0"}}]))
    refused = run_cli("run", "--dry-run", str(path))
    assert refused.exit_code == 2, refused.output
    assert "--control-vector-scaled '/etc/passwd' (/etc/passwd) is outside the models dir" \
        in refused.stderr and "pass --allow-path /etc" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    allowed = run_cli("run", "--dry-run", "--allow-path", "/etc", str(path))
    assert allowed.exit_code == 0, allowed.output
    assert "--control-vector-scaled /etc/passwd:1.0" in allowed.stdout


@pytest.mark.parametrize(("design", "message"), [
    ({"stop-rule": "decision; rm -rf /"}, "stop-rule"),
    ({"stop-rule": "decision\x1b[2J"}, "stop-rule"),
    ({"stop-rule": "decision", "pairs": 2**70, "max-pairs": 12}, "pairs"),
    ({"stop-rule": "decision", "pairs": 3, "max-pairs": 12}, "which must be 4 or more"),
    ({"stop-rule": "fixed", "pairs": 4, "max-pairs": 100}, "remove max-pairs (100)"),
])
@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_crafted_stop_rule_is_refused_in_one_line_before_anything_runs(
        tmp_path: Path, smollm2: Path, design: dict[str, Any], message: str,
        command: str) -> None:
    path = write_matrix(tmp_path, matrix_dict(smollm2, **design))
    result = run_cli(command, "--dry-run", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "\x1b" not in result.stderr
    assert not (tmp_path / "farm-data" / "farm.db").exists()  # nothing written
