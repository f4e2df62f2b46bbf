"""What a worker tells the coordinator about itself when it registers."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from workers.fleet.config import WorkerConfig
from workers.job.runtime.probe import probe_binary
from workers.job.runtime.sandbox import Sandbox
from workers.paths import gguf_files


@dataclass(frozen=True)
class Advertisement:
    """What a worker tells the coordinator about itself: host, builds, models, sources."""

    host: str
    builds: dict[str, str]  # build name -> `llama-server --version`
    models: list[str]  # GGUF files in the models dir, relative to it
    sources: list[str]  # git sources it makes jobs' source builds from


def advertise(config: WorkerConfig, sandbox: Sandbox) -> Advertisement:
    """This worker's host, each build's ``--version`` (asked in ``sandbox``), and the GGUF
    files in its models dir."""
    builds = {name: probe_binary(path, sandbox, trusted=True).version
              for name, path in config.builds.items()}
    root = config.models_dir
    models = sorted(str(path.relative_to(root)) for path in gguf_files(root))
    return Advertisement(host=socket.gethostname(), builds=builds, models=models,
                         sources=list(config.sources))
