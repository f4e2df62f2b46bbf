"""Where the farm's own observation happens relative to the decode it measures (a script,
not a test): for each model and arm, a raw llama-server at the default verbosity and at
``--log-verbosity 4`` runs one request, and the script counts the server's log lines
written during the request and inside its decode window (after the prompt's sampler is
set up, before the server's "eval time" line: the window the server's decode tok/s is
timed over); then the CPU one telemetry poll costs (the sampler thread is the farm's only
work that runs beside the decode). It asserts nothing; run it alone on the CPU:

    flock /tmp/farm-cpu.lock .venv/bin/python -m tests.bench.bench_log_window
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from farm.settings import load_settings
from tests.bench.bench_observation import ARMS, PROMPT, RawServer
from workers.job.runtime.client import ServerClient
from workers.job.runtime.server import LOG_VERBOSITY, LlamaServer
from workers.job.telemetry import Sampler
from workers.paths import NodePaths
from workers.setup.provision import provision

TOKENS = 128
POLLS = 5000


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def decode_window(lines: list[str]) -> list[str]:
    """The lines between the prompt's sampler set-up and the server's "eval time" line."""
    opened = max(i for i, line in enumerate(lines)
                 if "init_sampler" in line or "create_check" in line or "launch_slot_" in line)
    closed = min(i for i, line in enumerate(lines) if "prompt eval time" in line)
    return lines[opened + 1:closed]


def logged_request(server: LlamaServer, client: ServerClient, tokens: int
                   ) -> tuple[float, list[str]]:
    """On a started server, one warm-up, then one request of ``tokens``: its decode tok/s
    and the log lines it wrote (tests/integration/test_server.py runs it on the farm's own
    servers)."""
    sampling = {"temperature": 0.0, "seed": 1}
    client.generate(PROMPT, mode="completion", n_predict=8, sampling=sampling, ignore_eos=True)
    time.sleep(0.3)  # the warm-up's last lines are written
    before = len(server.log_text())
    generation = client.generate(PROMPT, mode="completion", n_predict=tokens,
                                 sampling=sampling, ignore_eos=True)
    time.sleep(0.3)
    return generation.decode_tok_s, _lines(server.log_text()[before:])


def request_log(server: Path, model: Path, flags: list[str], log: Path
                ) -> tuple[float, list[str]]:
    """A raw server's ``logged_request`` of ``TOKENS``."""
    with RawServer(str(server), str(model), flags, log) as raw, \
            ServerClient(raw.http_transport()) as client:
        return logged_request(raw, client, TOKENS)


def poll_cost() -> float:
    """CPU seconds one telemetry poll of a live process takes (no GPU here)."""
    sampler = Sampler([], os.getpid())
    started = time.process_time()
    for _ in range(POLLS):
        sampler.poll()
    return (time.process_time() - started) / POLLS


def main() -> None:
    provisioned = provision(NodePaths.of(load_settings()))
    with tempfile.TemporaryDirectory(prefix="bench-log-window-") as scratch:
        for model, arms in ARMS.items():
            for arm, flags in arms.items():
                for verbosity in (None, LOG_VERBOSITY):
                    extra = [] if verbosity is None else ["--log-verbosity", str(verbosity)]
                    log = Path(scratch) / f"{model}-{arm}-{verbosity}.log"
                    tok_s, lines = request_log(provisioned.server, provisioned.models[model],
                                               [*flags, *extra], log)
                    inside = decode_window(lines)
                    print(f"{model} {arm} verbosity {verbosity or 'default'}: {tok_s:.1f} tok/s; "
                          f"{len(lines)} log lines in the request, {len(inside)} in its decode "
                          f"window" + (f" ({'; '.join(line[:70] for line in inside)})"
                                       if inside else ""), flush=True)
    cost = poll_cost()
    print(f"one telemetry poll: {cost * 1e6:.1f} us of CPU; every 0.2 s: "
          f"{cost * 5 * 100:.3f}% of one core")


if __name__ == "__main__":
    main()
