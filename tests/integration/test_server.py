"""A real llama-server: start, measure, stop; failures carry the server's own words."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from farm.errors import ServerStartError
from tests.bench.bench_log_window import decode_window, logged_request
from workers.job.runtime.client import ServerClient
from workers.job.runtime.server import LlamaServer
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
ARGS = ["--ctx-size", "512", "--threads", "1"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_server_answers_a_fixed_length_streamed_generation(
        provisioned: Provisioned, smollm2: Path, tmp_path: Path) -> None:
    server = LlamaServer(str(provisioned.server), str(smollm2), ARGS, tmp_path / "s.log")
    with server, ServerClient(server.http_transport()) as client:
        pid = server.pid
        assert pid is not None
        generation = client.generate("Count from one to ten.", mode="chat", n_predict=24,
                                     sampling={"temperature": 0.0, "seed": 1})
        counters = client.spec_counters()
    assert generation.generated_tokens == 24
    assert generation.decode_tok_s > 0 and generation.prompt_tokens > 0
    assert 0 < generation.ttft_ms < generation.e2e_ms
    assert generation.text
    assert counters.drafted == 0
    assert not _alive(pid)
    assert "--parallel 1 --metrics" in (tmp_path / "s.log").read_text()


def test_server_that_exits_on_start_raises_with_its_log_tail(
        provisioned: Provisioned, smollm2: Path, tmp_path: Path) -> None:
    server = LlamaServer(str(provisioned.server), str(smollm2),
                         [*ARGS, "--cache-type-k", "q9_9"], tmp_path / "bad.log")
    with pytest.raises(ServerStartError, match="exited with code 1") as caught:
        server.start()
    assert "q9_9" in caught.value.log_tail


@pytest.mark.parametrize(("model", "spec"), [
    ("smollm2", []), ("smollm2", ["--spec-type", "ngram-simple"]),
    ("qwen35-mtp-oracle-cpu", ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"])],
    ids=["smollm2-baseline", "smollm2-ngram", "mtp-oracle-draft-mtp"])
def test_the_farms_log_verbosity_writes_nothing_inside_the_decode_window(
        provisioned: Provisioned, tmp_path: Path, model: str, spec: list[str]) -> None:
    """The farm's ``--log-verbosity 4`` costs a run's decode tok/s nothing only because
    llama.cpp writes its trace lines before a request's first decoded token and after its
    last, none per token or per draft (docs/busy-node.md). A build that logged per token at
    this level would slow every run the farm times; this pins that b11434 does not."""
    server = LlamaServer(str(provisioned.server), str(provisioned.models[model]),
                         [*ARGS, *spec], tmp_path / "s.log")
    with server, ServerClient(server.http_transport()) as client:
        _, lines = logged_request(server, client, 64)
    assert len(lines) >= 15, lines  # the trace level took: the default writes about 7
    assert any("prompt eval time" in line for line in lines), lines
    assert decode_window(lines) == []
