"""Which farm arm an imported figure stands beside (farm.results.peers.matches)."""

from __future__ import annotations

from typing import Any

import pytest

from farm.results.peers import matches, same_build

ARM = {"arm": "baseline", "model_file": "m.gguf", "build_commit": "3f545becc",
       "build_number": 11434, "n_threads": 2, "n_gpu_layers": 0, "spec_type": None}
PEER = {"model_file": "m.gguf", "build_commit": "3f545bec", "build_number": 11434,
        "n_threads": 2, "n_gpu_layers": 99, "backends": "CPU", "speculative": False,
        "spec_type": None}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


@pytest.mark.parametrize(("arm", "peer", "same"), [
    (ARM, PEER, True),  # a short hash is a prefix of the longer one
    (ARM, _with(PEER, build_commit="0123abcd"), False),  # another commit, same number: a fork
    (ARM, _with(PEER, build_commit=None), True),  # no commit: the build number decides
    (_with(ARM, build_commit=None), _with(PEER, build_number=11435), False),
    (_with(ARM, build_commit=None, build_number=None), _with(PEER, build_commit=None), False),
])
def test_a_build_is_the_same_by_commit_else_by_number(arm: dict[str, Any],
                                                      peer: dict[str, Any], same: bool) -> None:
    assert same_build(arm, peer) is same


@pytest.mark.parametrize(("arm", "peer", "beside"), [
    (ARM, PEER, True),
    (ARM, _with(PEER, model_file="other.gguf"), False),
    (ARM, _with(PEER, n_threads=4), False),
    (_with(ARM, n_threads=None), _with(PEER, n_threads=4), True),  # the farm arm did not say
    (ARM, _with(PEER, backends="CUDA"), False),  # 0 vs 99 layers offloaded on a GPU
    (ARM, _with(PEER, speculative=True), False),  # speculation is not a baseline
    (_with(ARM, arm="variant", spec_type="draft-mtp"), PEER, False),
    (_with(ARM, arm="variant", spec_type="draft-mtp"),
     _with(PEER, speculative=True, spec_type="draft-mtp"), True),
    (_with(ARM, arm="variant", spec_type="draft-mtp"),
     _with(PEER, speculative=True, spec_type="ngram-simple"), False),
    (_with(ARM, arm="variant", spec_type="draft-mtp"), _with(PEER, speculative=True), True),
])
def test_a_figure_stands_beside_the_arm_that_ran_the_same_thing(
        arm: dict[str, Any], peer: dict[str, Any], beside: bool) -> None:
    assert matches(arm, peer) is beside
