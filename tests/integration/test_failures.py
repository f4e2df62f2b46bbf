"""Failed server starts classified from what the real llama-server says."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import RETRYABLE, ServerStartError
from workers.job.runtime.server import LlamaServer
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server


@pytest.mark.parametrize(("model", "argv", "expected"), [
    ("smollm2", ["--cache-type-k", "q9_9"], "unsupported_by_build"),
    ("smollm2", ["--no-such-flag"], "bad_flag"),
    ("qwen35-random", ["--spec-type", "draft-mtp"], "no_mtp_heads"),
    ("missing", [], "model_unreadable"),
])
def test_failed_start_is_classified_from_the_server_log(
        provisioned: Provisioned, tmp_path: Path, model: str, argv: list[str],
        expected: str) -> None:
    path = provisioned.models.get(model, tmp_path / "missing.gguf")
    # One thread: a start that fails late (the model loaded first) runs beside other tests.
    server = LlamaServer(str(provisioned.server), str(path),
                         ["-c", "256", "--threads", "1", *argv], tmp_path / "server.log")
    with pytest.raises(ServerStartError) as caught:
        server.start()
    assert caught.value.failure_class == expected
    assert expected not in RETRYABLE


def test_a_server_that_is_not_ready_in_time_is_a_retryable_timeout(
        provisioned: Provisioned, smollm2: Path, tmp_path: Path) -> None:
    server = LlamaServer(str(provisioned.server), str(smollm2), ["-c", "256", "--threads", "1"],
                         tmp_path / "slow.log", startup_timeout=0.05)
    with pytest.raises(ServerStartError) as caught:
        server.start()
    assert caught.value.failure_class == "timeout" and "timeout" in RETRYABLE
    assert server.pid is None  # stopped, not left behind
