"""What a worker refuses to do to its box, and how it resolves names to files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from farm.errors import ConfigError
from farm.matrix.spec import Arm, BuildRef, JobSpec, ModelRef, Prompt
from workers.fleet.config import WorkerConfig, load_worker_config
from workers.job.resolve import NodeFiles, NotOnThisNode, resolve, resolve_flag_files
from workers.paths import NodePaths


@pytest.fixture
def config(tmp_path: Path) -> WorkerConfig:
    models = tmp_path / "models"
    models.mkdir()
    (models / "target.gguf").write_bytes(b"GGUF")
    (models / "draft.gguf").write_bytes(b"GGUF")
    server = tmp_path / "llama-server"
    server.write_text("")
    return WorkerConfig.model_validate({"gpu-class": "rtx", "models-dir": str(models),
                                        "downloads-dir": str(models),
                                        "builds": {"master": str(server)}})


def _spec(variant_flags: tuple[tuple[str, str | bool], ...], model: str = "target.gguf",
          build: str = "master") -> JobSpec:
    return JobSpec(
        campaign="c", gpu_class="rtx", model=ModelRef(name="target", file=model),
        baseline=Arm(role="baseline", name="baseline", build=BuildRef(name=build), flags=()),
        variant=Arm(role="variant", name="v", build=BuildRef(name=build), flags=variant_flags),
        varying={},
        prompt_mode="chat", prompts=(Prompt(id="p", text="t", category="c"),), n_predict=8,
        sampling={}, repetitions=1, pairs=1, max_pairs=1, target_ci=0.03)


def test_names_resolve_inside_the_models_dir(config: WorkerConfig) -> None:
    spec = _spec((("spec-draft-model", "draft.gguf"),))
    resolved = resolve(spec, config.files())
    assert resolved.model.path == str(config.models_dir.resolve() / "target.gguf")
    assert resolved.build.path == str(config.builds["master"])
    assert resolved.variant.flags == spec.variant.flags  # files are looked up once checked
    assert resolve_flag_files(resolved.variant, config.files()).flags == (
        ("spec-draft-model", str(config.models_dir.resolve() / "draft.gguf")),)


@pytest.mark.parametrize(("model", "build", "message"), [
    ("missing.gguf", "master", "not found"),
    ("target.gguf", "turboquant", "build 'turboquant' is not on worker rtx@"),
])
def test_worker_refuses_what_a_matrix_must_not_do(
        config: WorkerConfig, model: str, build: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(_spec((), model, build), config.files())


def test_a_model_path_a_worker_is_given_is_a_name_inside_its_models_dir(
        config: WorkerConfig, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="is an absolute path"):
        ModelRef(name="target", file="/etc/hostname")
    spec = _spec(()).model_copy(update={"model": ModelRef(name="m", path="/etc/hostname")})
    with pytest.raises(ConfigError, match="'/etc/hostname' is outside the models dir"):
        resolve(spec, config.files())
    inside = str(config.models_dir / "target.gguf")  # a matrix's absolute path, inside
    assert resolve(spec.model_copy(update={"model": ModelRef(name="m", path=inside)}),
                   config.files()).model.path == str(config.models_dir.resolve() / "target.gguf")
    # A symlink in the models dir that leads out is no way out either.
    (config.models_dir / "link.gguf").symlink_to(tmp_path / "llama-server")
    with pytest.raises(ConfigError, match="leads out of"):
        resolve(_spec((), "link.gguf"), config.files())


@pytest.mark.parametrize(("flag", "value"), [
    ("spec-draft-model", "../../etc/passwd"), ("mmproj", "/etc/hostname"),
    ("lora", "draft.gguf,../../etc/passwd"), ("lora-scaled", "/etc/hostname:0.5"),
    ("control-vector-scaled", "draft.gguf:1,../x.gguf:2"),
])
def test_every_file_a_flag_names_stays_inside_the_models_dir(
        config: WorkerConfig, flag: str, value: str) -> None:
    arm = _spec(((flag, value),)).variant
    with pytest.raises(ConfigError, match=r"is an absolute path|climbs out of its folder"):
        resolve_flag_files(arm, config.files())


def test_farm_run_reads_flag_files_outside_the_models_dir_only_under_an_allowed_folder(
        config: WorkerConfig, tmp_path: Path) -> None:
    arm = _spec((("control-vector-scaled", "/etc/passwd:1.0"),)).variant
    with pytest.raises(ConfigError, match=r"outside the models dir .* pass --allow-path /etc"):
        resolve_flag_files(arm, _local(config, tmp_path))
    allowed = replace(_local(config, tmp_path), allow_paths=(Path("/etc"),))
    assert resolve_flag_files(arm, allowed).flags == (
        ("control-vector-scaled", "/etc/passwd:1.0"),)
    # Beside the matrix is outside too; the models dir's own names need nothing.
    (tmp_path / "beside.gguf").write_bytes(b"GGUF")
    beside = _spec((("lora", "beside.gguf,draft.gguf"),)).variant
    with pytest.raises(ConfigError, match="--allow-path"):
        resolve_flag_files(beside, _local(config, tmp_path))
    assert resolve_flag_files(beside, replace(_local(config, tmp_path), allow_paths=(
        tmp_path,))).flags == (("lora", f"{tmp_path / 'beside.gguf'},"
                                        f"{config.models_dir.resolve() / 'draft.gguf'}"),)


def test_worker_config_file_with_command_line_on_top(tmp_path: Path,
                                                    node_paths: NodePaths) -> None:
    server = tmp_path / "srv"
    server.write_text("")
    path = tmp_path / "worker.yaml"
    path.write_text(f"gpu-class: a\ndevices: [0]\nbuilds: {{x: {server}}}\n")
    config = load_worker_config(path, node_paths, gpu_class="b", devices=[0, 1])
    assert (config.gpu_class, config.devices) == ("b", [0, 1])
    assert config.worker_name.startswith("b@") and config.worker_name.endswith("-0,1")
    path.write_text("gpu-class: a\nbuilds: {x: /nowhere/llama-server}\n")
    with pytest.raises(ConfigError, match="does not exist"):
        load_worker_config(path, node_paths, gpu_class=None, devices=None)


def _local(config: WorkerConfig, matrix_dir: Path, allow_build_path: bool = False) -> NodeFiles:
    return NodeFiles(name="this machine", builds=config.builds, models_dir=config.models_dir,
                     downloads_dir=config.downloads_dir,
                     matrix_dir=matrix_dir, allow_build_path=allow_build_path)


def test_a_model_file_typo_names_the_files_it_may_have_meant(
        config: WorkerConfig, tmp_path: Path) -> None:
    with pytest.raises(NotOnThisNode, match=r"'targte.gguf' not found in the models dir .* "
                                            r"\(did you mean 'target.gguf'\?\); run"):
        resolve(_spec((), "targte.gguf"), config.files())
    with pytest.raises(NotOnThisNode, match=r"'zzz.gguf' not found in the models dir [^(]*; run"):
        resolve(_spec((), "zzz.gguf"), config.files())
    spec = _spec(()).model_copy(update={"model": ModelRef(name="m", path="models/draf.gguf")})
    with pytest.raises(NotOnThisNode, match=r"does not exist \(did you mean 'draft.gguf'\?\)"):
        resolve(spec, _local(config, tmp_path))


def test_farm_run_resolves_the_matrix_paths_a_worker_refuses(
        config: WorkerConfig, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.gguf").write_bytes(b"GGUF")
    spec = _spec(()).model_copy(update={"model": ModelRef(name="m", path="elsewhere/mine.gguf")})
    resolved = resolve(spec, _local(config, tmp_path))
    assert resolved.model.path == str(elsewhere / "mine.gguf")
    with pytest.raises(NotOnThisNode, match="not found in the models dir"):
        resolve(spec, config.files())


def test_a_matrix_binary_runs_on_farm_run_only_when_allowed_or_registered(
        config: WorkerConfig, tmp_path: Path) -> None:
    theirs = tmp_path / "their-llama-server"
    theirs.write_text("")
    spec = _spec(()).model_copy(update={"baseline": _spec(()).baseline.model_copy(
        update={"build": BuildRef(name="theirs", path=str(theirs))})})
    with pytest.raises(ConfigError, match="--allow-build-path") as caught:
        resolve(spec, _local(config, tmp_path))
    assert caught.value.role == "build" and "farm build theirs --binary PATH" in str(caught.value)
    assert resolve(spec, _local(config, tmp_path, allow_build_path=True)).build.path == str(theirs)
    registered = spec.model_copy(update={"baseline": spec.baseline.model_copy(
        update={"build": BuildRef(name="master", path=str(config.builds["master"]))})})
    assert resolve(registered, _local(config, tmp_path)).build.path == str(config.builds["master"])
    # A worker never runs a path a job names: only its own builds, by name.
    with pytest.raises(NotOnThisNode, match="build 'theirs' is not on worker"):
        resolve(spec, config.files())


def test_a_missing_build_says_what_the_node_has(config: WorkerConfig, tmp_path: Path) -> None:
    with pytest.raises(NotOnThisNode, match=r"not on this machine \(it has: master\)") as info:
        resolve(_spec((), build="turboquant"), _local(config, tmp_path))
    assert info.value.role == "build"
