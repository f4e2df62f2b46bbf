"""The MTP twins are right or wrong by construction, the same bytes every time, and pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from farm.errors import RuntimeFarmError
from workers.paths import file_sha256
from workers.setup.mtp_oracles import (
    CPU_ORACLE_DIMS,
    CPU_ORACLE_NAME,
    F16,
    F32,
    Qwen35Dims,
    write_anti_oracle,
    write_cpu_oracle,
    write_oracle,
)
from workers.setup.provision import PINNED_SHA256, QWEN35_NAME, check_pinned

N_VOCAB, N_EMBD, N_FF, SSM_STATE = 6, 8, 16, 4
# The scaled oracle's size in these tests: two heads of 8, four blocks.
DIMS = Qwen35Dims(n_embd=16, n_head=2, n_ff=24, n_layer=4)
Array = npt.NDArray[Any]


def _write_template(path: Path, n_vocab: int = N_VOCAB) -> Path:
    """A two-block Qwen3.5-shaped GGUF (one recurrent block, one attention block), random,
    with a per-tensor scale and a classifier head as test-llama-archs writes them."""
    rng = np.random.default_rng(7)
    writer = GGUFWriter(path, "qwen35")
    writer.add_block_count(2)
    writer.add_embedding_length(N_EMBD)
    writer.add_key_value("qwen35.feed_forward_length", [N_FF, N_FF], GGUFValueType.ARRAY,
                         sub_type=GGUFValueType.UINT32)
    writer.add_key_value("qwen35.attention.recurrent_layers", [True, False],
                         GGUFValueType.ARRAY, sub_type=GGUFValueType.BOOL)
    for key, value in (("ssm.state_size", SSM_STATE), ("ssm.group_count", 2),
                       ("ssm.conv_kernel", 4)):
        writer.add_uint32(f"qwen35.{key}", value)
    writer.add_token_list([f"tok_{token}" for token in range(n_vocab)])
    shapes = {"token_embd.weight": (n_vocab, N_EMBD), "output.weight": (n_vocab, N_EMBD),
              "output_norm.weight": (N_EMBD,), "cls.output.weight": (N_EMBD, N_EMBD),
              "blk.0.attn_norm.weight": (N_EMBD,), "blk.0.ssm_a": (2,),
              "blk.0.ssm_conv1d.weight": (24, 4), "blk.0.ssm_out.weight": (N_EMBD, N_EMBD),
              "blk.0.ffn_down.weight": (N_EMBD, N_FF), "blk.1.attn_norm.weight": (N_EMBD,),
              "blk.1.attn_q.weight": (N_EMBD, N_EMBD), "blk.1.attn_q.scale": (1,),
              "blk.1.attn_output.weight": (N_EMBD, N_EMBD),
              "blk.1.ffn_down.weight": (N_EMBD, N_FF)}
    for name, shape in shapes.items():
        writer.add_tensor(name, rng.normal(size=shape).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The template the twins and the scaled oracle are made from."""
    return _write_template(tmp_path_factory.mktemp("source") / "qwen35-tiny.gguf")


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


def _cpu_oracle(source: Path, target: Path) -> GGUFReader:
    return GGUFReader(write_cpu_oracle(source, target, DIMS, F16))


def test_cpu_oracle_is_the_same_bytes_from_the_same_template(
        source: Path, tmp_path: Path) -> None:
    first = write_cpu_oracle(source, tmp_path / "a" / CPU_ORACLE_NAME, DIMS, F16).read_bytes()
    assert write_cpu_oracle(source, tmp_path / "b" / CPU_ORACLE_NAME, DIMS, F16).read_bytes() \
        == first


def test_cpu_oracle_has_the_dims_asked_for_and_the_template_s_blocks_repeated(
        source: Path, tmp_path: Path) -> None:
    reader = _cpu_oracle(source, tmp_path / CPU_ORACLE_NAME)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    head = DIMS.n_embd // DIMS.n_head
    assert fields["qwen35.embedding_length"] == DIMS.n_embd
    assert fields["qwen35.feed_forward_length"] == [DIMS.n_ff] * (DIMS.n_layer + 1)
    assert fields["qwen35.block_count"] == DIMS.n_layer + 1
    assert fields["qwen35.nextn_predict_layers"] == 1
    assert fields["qwen35.attention.recurrent_layers"] == [True, False] * 2 + [False]
    assert fields["qwen35.attention.head_count"] == fields["qwen35.attention.head_count_kv"] \
        == fields["qwen35.ssm.time_step_rank"] == DIMS.n_head
    assert fields["qwen35.attention.key_length"] == fields["qwen35.rope.dimension_count"] == head
    assert fields["qwen35.ssm.inner_size"] == SSM_STATE * DIMS.n_head
    assert fields["tokenizer.ggml.tokens"] == [f"tok_{token}" for token in range(N_VOCAB)]
    shapes = {tensor.name: [int(n) for n in tensor.shape] for tensor in reader.tensors}
    conv_dim = 2 * SSM_STATE * 2 + SSM_STATE * DIMS.n_head
    recurrent = {"attn_norm.weight": [16], "ssm_a": [2], "ssm_conv1d.weight": [4, conv_dim],
                 "ssm_out.weight": [SSM_STATE * DIMS.n_head, 16], "ffn_down.weight": [24, 16]}
    attention = {"attn_norm.weight": [16], "attn_q.weight": [16, 2 * head * DIMS.n_head],
                 "attn_output.weight": [head * DIMS.n_head, 16], "ffn_down.weight": [24, 16]}
    expected = {"token_embd.weight": [16, N_VOCAB], "output.weight": [16, N_VOCAB],
                "output_norm.weight": [16]}
    for il in range(DIMS.n_layer + 1):  # the template's blocks, then the MTP block
        for suffix, ne in (attention if il % 2 or il == DIMS.n_layer else recurrent).items():
            expected[f"blk.{il}.{suffix}"] = ne
    mtp = f"blk.{DIMS.n_layer}.nextn"
    expected |= {f"{mtp}.eh_proj.weight": [32, 16], f"{mtp}.enorm.weight": [16],
                 f"{mtp}.hnorm.weight": [16]}
    assert shapes == expected  # no per-tensor scale, no classifier head


def test_cpu_oracle_matrices_are_the_type_asked_for_with_small_finite_values(
        source: Path, tmp_path: Path) -> None:
    reader = _cpu_oracle(source, tmp_path / CPU_ORACLE_NAME)
    for tensor in reader.tensors:
        data = np.array(tensor.data, dtype=np.float64)
        matrix = len(tensor.shape) == 2 and not tensor.name.endswith("ssm_conv1d.weight")
        assert tensor.tensor_type == (F16 if matrix else F32), tensor.name
        assert np.isfinite(data).all(), tensor.name
        if tensor.name.endswith("ssm_a"):
            assert (data == -1).all()  # a decaying state
        elif not tensor.name.endswith(("norm.weight", "token_embd.weight", "output.weight",
                                       "eh_proj.weight")):
            assert np.abs(data).max() <= 1 / 64, tensor.name


def test_cpu_oracle_head_drafts_the_token_the_trunk_predicts(
        source: Path, tmp_path: Path) -> None:
    weights = {t.name: np.array(t.data, dtype=np.float64)
               for t in _cpu_oracle(source, tmp_path / CPU_ORACLE_NAME).tensors}
    for il in range(DIMS.n_layer + 1):
        writer = "ssm_out.weight" if il % 2 == 0 and il < DIMS.n_layer else "attn_output.weight"
        assert not weights[f"blk.{il}.{writer}"].any()
        assert not weights[f"blk.{il}.ffn_down.weight"].any()
    embd, head = weights["token_embd.weight"], weights["output.weight"]
    eh_proj = weights[f"blk.{DIMS.n_layer}.nextn.eh_proj.weight"]
    for token in range(N_VOCAB):
        trunk = int(np.argmax(head @ embd[token]))
        draft = int(np.argmax(head @ (eh_proj @ np.concatenate([embd[token],
                                                                np.ones(DIMS.n_embd)]))))
        assert trunk == draft == (token + 1) % N_VOCAB


def test_cpu_oracle_needs_a_vocabulary_no_larger_than_n_embd(tmp_path: Path) -> None:
    template = _write_template(tmp_path / "wide-vocab.gguf", n_vocab=DIMS.n_embd + 1)
    with pytest.raises(ValueError, match=r"n_embd >= n_vocab \(16 < 17\)"):
        write_cpu_oracle(template, tmp_path / CPU_ORACLE_NAME, DIMS, F16)
    assert not (tmp_path / CPU_ORACLE_NAME).exists()


@pytest.mark.parametrize("dims", [Qwen35Dims(n_embd=24, n_head=3, n_ff=24, n_layer=2),
                                  Qwen35Dims(n_embd=12, n_head=2, n_ff=24, n_layer=2)],
                         ids=["odd-heads", "head-of-6"])
def test_cpu_oracle_refuses_heads_llama_cpp_cannot_split(
        source: Path, tmp_path: Path, dims: Qwen35Dims) -> None:
    with pytest.raises(ValueError, match="n_head must be even"):
        write_cpu_oracle(source, tmp_path / CPU_ORACLE_NAME, dims, F16)


def test_cpu_oracle_dims_hold_the_provisioned_vocabulary_in_one_hot_units() -> None:
    # test-llama-archs' Qwen3.5 has 128 tokens; the SSM inner size is 128 x n_head.
    assert CPU_ORACLE_DIMS.n_embd >= 128 and CPU_ORACLE_DIMS.n_head % 2 == 0
