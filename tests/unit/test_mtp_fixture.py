"""The MTP twins are right or wrong by construction, the same bytes every time, and pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from farm.errors import RuntimeFarmError
from workers.mtp_fixture import write_anti_oracle, write_oracle
from workers.paths import file_sha256
from workers.provision import PINNED_SHA256, QWEN35_NAME, check_pinned

N_VOCAB, N_EMBD, N_FF = 6, 8, 16
Array = npt.NDArray[Any]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-block Qwen3.5-shaped GGUF (one recurrent block, one attention block), random."""
    path = tmp_path_factory.mktemp("source") / "qwen35-tiny.gguf"
    rng = np.random.default_rng(7)
    writer = GGUFWriter(path, "qwen35")
    writer.add_block_count(2)
    writer.add_embedding_length(N_EMBD)
    writer.add_key_value("qwen35.feed_forward_length", [N_FF, N_FF], GGUFValueType.ARRAY,
                         sub_type=GGUFValueType.UINT32)
    writer.add_key_value("qwen35.attention.recurrent_layers", [True, False],
                         GGUFValueType.ARRAY, sub_type=GGUFValueType.BOOL)
    shapes = {"token_embd.weight": (N_VOCAB, N_EMBD), "output.weight": (N_VOCAB, N_EMBD),
              "output_norm.weight": (N_EMBD,), "blk.0.attn_norm.weight": (N_EMBD,),
              "blk.0.ssm_out.weight": (N_EMBD, N_EMBD), "blk.0.ffn_down.weight": (N_EMBD, N_FF),
              "blk.1.attn_norm.weight": (N_EMBD,), "blk.1.attn_q.weight": (N_EMBD, N_EMBD),
              "blk.1.attn_output.weight": (N_EMBD, N_EMBD),
              "blk.1.ffn_down.weight": (N_EMBD, N_FF)}
    for name, shape in shapes.items():
        writer.add_tensor(name, rng.normal(size=shape).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tensors(path: Path) -> dict[str, Array]:
    return {t.name: np.array(t.data) for t in GGUFReader(path).tensors}


def test_twins_are_the_same_bytes_from_the_same_source(source: Path, tmp_path: Path) -> None:
    for write in (write_oracle, write_anti_oracle):
        first = write(source, tmp_path / "a" / "twin.gguf").read_bytes()
        assert write(source, tmp_path / "b" / "twin.gguf").read_bytes() == first


def test_twins_get_a_dense_mtp_block_copied_from_the_last_attention_block(
        source: Path, tmp_path: Path) -> None:
    anti = write_anti_oracle(source, tmp_path / "anti.gguf")
    fields = GGUFReader(anti).fields
    assert fields["qwen35.block_count"].contents() == 3
    assert fields["qwen35.nextn_predict_layers"].contents() == 1
    assert fields["qwen35.attention.recurrent_layers"].contents() == [True, False, False]
    assert fields["qwen35.feed_forward_length"].contents() == [N_FF] * 3
    weights = _tensors(anti)
    np.testing.assert_array_equal(weights["blk.2.attn_q.weight"], weights["blk.1.attn_q.weight"])


def test_anti_oracle_eh_proj_maps_each_token_to_the_next_ones_unit(
        source: Path, tmp_path: Path) -> None:
    oracle = _tensors(write_oracle(source, tmp_path / "oracle.gguf"))
    anti = _tensors(write_anti_oracle(source, tmp_path / "anti.gguf"))
    units = np.arange(N_VOCAB)
    expected = np.zeros((N_EMBD, 2 * N_EMBD))
    expected[units, units] = 1.0
    np.testing.assert_array_equal(oracle["blk.2.nextn.eh_proj.weight"], expected)
    shifted = np.zeros((N_EMBD, 2 * N_EMBD))
    shifted[(units + 1) % N_VOCAB, units] = 1.0
    np.testing.assert_array_equal(anti["blk.2.nextn.eh_proj.weight"], shifted)
    for name, tensor in oracle.items():
        if name != "blk.2.nextn.eh_proj.weight":
            np.testing.assert_array_equal(anti[name], tensor, err_msg=name)


def test_anti_oracle_head_never_drafts_the_token_the_trunk_predicts(
        source: Path, tmp_path: Path) -> None:
    # Every layer writes zero into the residual stream and every norm weight is 1 (an RMS
    # norm then scales by a positive number), so the argmaxes follow the linear path alone.
    weights = _tensors(write_anti_oracle(source, tmp_path / "anti.gguf"))
    for name in ("blk.0.ssm_out.weight", "blk.1.attn_output.weight", "blk.2.attn_output.weight",
                 "blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "blk.2.ffn_down.weight"):
        assert not weights[name].any(), name
    embd, head = weights["token_embd.weight"], weights["output.weight"]
    eh_proj = weights["blk.2.nextn.eh_proj.weight"]
    hidden = np.ones(N_EMBD)  # the trunk's hidden state: ignored by eh_proj
    for token in range(N_VOCAB):
        trunk = int(np.argmax(head @ embd[token]))
        draft = int(np.argmax(head @ (eh_proj @ np.concatenate([embd[token], hidden]))))
        assert trunk == (token + 1) % N_VOCAB
        assert draft == (token + 2) % N_VOCAB


def test_a_generated_model_without_its_pinned_hash_is_refused_with_the_fix(
        tmp_path: Path) -> None:
    model = tmp_path / QWEN35_NAME
    model.write_bytes(b"made with another seed")
    with pytest.raises(RuntimeFarmError) as error:
        check_pinned(model)
    message = str(error.value)
    assert str(model) in message
    assert PINNED_SHA256[QWEN35_NAME] in message and file_sha256(model) in message
    assert "deploy/setup" in message and "PINNED_SHA256" in message
