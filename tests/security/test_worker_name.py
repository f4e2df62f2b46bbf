"""A worker's name keys its row, its leases and refusals, and its own Redis queue
(``worker.NAME``): a crafted name in a worker config is refused when the config is read,
naming the file and the key, before the worker registers or consumes anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from farm.errors import ConfigError
from workers.fleet.config import load_worker_config
from workers.paths import NodePaths

CRAFTED = ["../../etc/passwd", "/abs", "a b", "x\ny", "tab\there", "a\x06\x16b", "-rf",
           "", "a" * 201, "gpu.*", "\u0430pple", "a;rm -rf /", "$(id)"]


def _config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "worker.yaml"
    path.write_text(yaml.safe_dump({"name": name, "gpu-class": "box",
                                    "models-dir": str(tmp_path),
                                    "sources": ["https://github.com/ggml-org/llama.cpp"]}))
    return path


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_worker_name_is_refused_naming_the_file_and_key(
        tmp_path: Path, node_paths: NodePaths, name: str) -> None:
    path = _config(tmp_path, name)
    with pytest.raises(ConfigError) as refused:
        load_worker_config(path, node_paths, gpu_class=None, devices=None)
    assert str(refused.value).startswith(f"{path}: name: ")


@pytest.mark.parametrize("name", ["alpha", "rtx3090-0@box1", "box@host.lan-0,1", "null-7"])
def test_the_names_the_farm_gives_and_documents_are_accepted(
        tmp_path: Path, node_paths: NodePaths, name: str) -> None:
    config = load_worker_config(_config(tmp_path, name), node_paths, gpu_class=None,
                                devices=None)
    assert config.worker_name == name
