"""Tiny Qwen3.5 GGUFs with an MTP (NextN) head whose drafts are right or wrong by construction.

``test-llama-archs`` writes a random-weight Qwen3.5 without MTP layers. This module derives
two files from it, following what llama.cpp (b11434) expects of a Qwen3.5 MTP block
(``src/models/qwen35.cpp``). Both get one extra decoder block (``block_count`` + 1,
``nextn_predict_layers`` = 1, ``attention.recurrent_layers`` extended with 0) copied from the
last full-attention block, plus ``blk.N.nextn.eh_proj`` / ``enorm`` / ``hnorm``, and weights
rewritten so that the trunk's next token is always ``token + 1 mod vocab``:

* the *oracle*'s MTP head predicts the same, so every draft is accepted and the text equals
  the baseline's;
* the *anti-oracle*'s MTP head predicts ``token + 2``: its ``eh_proj`` moves the embedding
  of token v to the unit of token v + 1, so each draft is the oracle's plus one and never
  equals the trunk's token. Acceptance is exactly 0 at every draft position, and the text is
  the oracle's (every token comes from the same trunk).

Both are too small for drafting to pay on a CPU. The *CPU oracle* is the oracle at a size
where it does: the source's metadata and tensor names with larger dimensions
(``CPU_ORACLE_DIMS``, F16 matrices, the source's 128-token vocabulary and tokenizer kept),
filled with fixed small values, then given the same construction.

Nothing here is random: the same source gives the same bytes (for a given ``gguf``
package). Each file is written via a temporary file renamed onto the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

from workers.paths import written_whole

ORACLE_NAME = "qwen35-mtp-oracle.gguf"
ANTI_ORACLE_NAME = "qwen35-mtp-anti.gguf"
CPU_ORACLE_NAME = "qwen35-mtp-oracle-cpu.gguf"

# Per-layer hyperparameters that llama.cpp may read as arrays of length ``block_count``;
# the MTP block gets the value of the block it is copied from.
_PER_LAYER_KEYS = (
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "expert_used_count",
    "swiglu_clamp_exp",
    "swiglu_clamp_shexp",
    "attention.sliding_window_pattern",
)
_RECURRENT_KEY = "attention.recurrent_layers"
# Per-tensor quantization scales: llama.cpp loads them only next to a loaded weight, and the
# MTP block's weights are skipped without ``draft-mtp``, so copying them would break the
# baseline load ("wrong number of tensors").
_SCALE_SUFFIXES = (".scale", ".input_scale")
# Projections whose output is added to the residual stream: zero makes a layer a no-op.
_RESIDUAL_WRITERS = ("ssm_out.weight", "attn_output.weight", "ffn_down.weight")

F32 = GGMLQuantizationType.F32
F16 = GGMLQuantizationType.F16
_NUMPY_TYPES = {F32: np.float32, F16: np.float16}
Array = npt.NDArray[Any]


@dataclass
class _Tensor:
    data: Array
    ggml_type: GGMLQuantizationType
    ne: tuple[int, ...]  # ggml order: ne[0] is the innermost (row) dimension


@dataclass
class _KV:
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


@dataclass
class _Gguf:
    arch: str
    kv: dict[str, _KV] = field(default_factory=dict)
    tensors: dict[str, _Tensor] = field(default_factory=dict)

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, default: Any = None) -> Any:
        entry = self.kv.get(self.key(suffix))
        return default if entry is None else entry.value

    def set_u32(self, suffix: str, value: int) -> None:
        self.kv[self.key(suffix)] = _KV(value, GGUFValueType.UINT32)

    def put(self, name: str, data: Array, ggml_type: GGMLQuantizationType = F32) -> None:
        """Store ``data`` (numpy order, i.e. ggml ``ne`` reversed) as an F32 or F16 tensor."""
        array = np.ascontiguousarray(data, dtype=_NUMPY_TYPES[ggml_type])
        self.tensors[name] = _Tensor(array, ggml_type, tuple(reversed(array.shape)))


def _load(path: Path) -> _Gguf:
    reader = GGUFReader(path)
    arch = str(reader.fields["general.architecture"].contents())
    model = _Gguf(arch)
    for name, entry in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = entry.types[0]
        if vtype == GGUFValueType.ARRAY and len(entry.types) < 2:
            continue  # an empty array: gguf-py cannot write it and llama.cpp does not need it
        sub_type = entry.types[1] if vtype == GGUFValueType.ARRAY else None
        model.kv[name] = _KV(entry.contents(), vtype, sub_type)
    for tensor in reader.tensors:
        ne = tuple(int(n) for n in tensor.shape)
        model.tensors[tensor.name] = _Tensor(np.array(tensor.data), tensor.tensor_type, ne)
    return model


def _save(model: _Gguf, target: Path) -> Path:
    """Write ``model`` to a temporary file next to ``target``, then rename it onto it."""
    with written_whole(target) as temp:
        writer = GGUFWriter(temp, model.arch)
        for key, entry in model.kv.items():
            if key == "general.alignment":
                writer.add_custom_alignment(int(entry.value))
            else:
                writer.add_key_value(key, entry.value, entry.vtype, sub_type=entry.sub_type)
        for tensor_name, tensor in model.tensors.items():
            writer.add_tensor(tensor_name, tensor.data, raw_dtype=tensor.ggml_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return target


def _last_full_attention_block(model: _Gguf, n_layer: int) -> int:
    for il in range(n_layer - 1, -1, -1):
        if f"blk.{il}.attn_output.weight" in model.tensors:
            return il
    raise ValueError("the model has no full-attention block to copy into an MTP block")


def _extend_per_layer_arrays(model: _Gguf, n_layer: int, source_block: int) -> None:
    for suffix in (*_PER_LAYER_KEYS, _RECURRENT_KEY):
        entry = model.kv.get(model.key(suffix))
        if entry is None or entry.vtype != GGUFValueType.ARRAY or len(entry.value) != n_layer:
            continue
        values = list(entry.value)
        if suffix == _RECURRENT_KEY:
            # the MTP block is a dense attention block: never recurrent (bool or int array)
            values.append(False if entry.sub_type == GGUFValueType.BOOL else 0)
        else:
            values.append(values[source_block])
        entry.value = values


def _add_nextn_block(model: _Gguf, eh_proj: Array, eh_proj_type: GGMLQuantizationType) -> None:
    """Append one NextN (MTP) block ``blk.N`` (N = the old ``block_count``) to ``model``.

    It gets the weights (not the ``.scale``/``.input_scale`` tensors) of the last
    full-attention block, ``eh_proj`` as ``blk.N.nextn.eh_proj.weight`` and ones as
    ``enorm`` / ``hnorm``. The optional ``nextn.shared_head_*`` and ``nextn.embed_tokens``
    are left out: llama.cpp then uses ``output_norm``, ``output`` and ``token_embd``.
    """
    n_layer = int(model.get("block_count"))
    n_embd = int(model.get("embedding_length"))
    source_block = _last_full_attention_block(model, n_layer)
    prefix = f"blk.{source_block}."
    for name, tensor in list(model.tensors.items()):
        if name.startswith(prefix) and not name.endswith(_SCALE_SUFFIXES):
            copy = _Tensor(tensor.data.copy(), tensor.ggml_type, tensor.ne)
            model.tensors[f"blk.{n_layer}.{name.removeprefix(prefix)}"] = copy
    model.put(f"blk.{n_layer}.nextn.eh_proj.weight", eh_proj, eh_proj_type)
    model.put(f"blk.{n_layer}.nextn.enorm.weight", np.ones(n_embd))
    model.put(f"blk.{n_layer}.nextn.hnorm.weight", np.ones(n_embd))
    _extend_per_layer_arrays(model, n_layer, source_block)
    model.set_u32("block_count", n_layer + 1)
    model.set_u32("nextn_predict_layers", 1)


def _eh_proj(n_embd: int, n_vocab: int, shift: int) -> Array:
    """The twins' ``nextn.eh_proj`` in numpy order, ``(n_embd, 2 * n_embd)``.

    Its input is ``concat([enorm(embedding of the last token); hnorm(hidden)])``: output unit
    ``(v + shift) mod n_vocab`` reads input unit v of the embedding half; the hidden half and
    the units from ``n_vocab`` on (which a one-hot embedding never sets) are ignored.
    """
    units = np.arange(n_vocab)
    matrix = np.zeros((n_embd, 2 * n_embd))
    matrix[(units + shift) % n_vocab, units] = 1.0
    return matrix


def _oracle_tensor(name: str, ne: tuple[int, ...]) -> Array | None:
    """The oracle's replacement for one trunk tensor (numpy order), or None to keep it."""
    shape = tuple(reversed(ne))
    if name in ("token_embd.weight", "output.weight"):
        n_embd, n_vocab = ne
        rows = np.arange(n_vocab)
        # embeddings: token v -> unit v; LM head: logit of y reads unit y-1, so argmax = v+1
        cols = rows if name == "token_embd.weight" else (rows - 1) % n_vocab
        matrix = np.zeros((n_vocab, n_embd))
        matrix[rows, cols] = 1.0
        return matrix
    if name.endswith(_RESIDUAL_WRITERS):
        return np.zeros(shape)
    if name.endswith("norm.weight"):
        return np.ones(shape)
    return None


def _make_twin(model: _Gguf, origin: Path, head_shift: int) -> None:
    """Give ``model`` (read from ``origin``) an MTP block and next-token-oracle weights.

    ``token_embd`` becomes one-hot (needs ``n_embd >= n_vocab``), ``output`` reads unit
    ``y-1`` for token ``y``, every ``ssm_out``/``attn_output``/``ffn_down`` is zeroed (each
    layer passes the residual through) and every norm weight is 1, so the trunk predicts
    ``token + 1 mod n_vocab``; the MTP head predicts ``token + 1 + head_shift``. Replaced
    tensors keep their type (F32 or F16); ``eh_proj`` gets the type of ``output``.
    """
    if int(model.get("nextn_predict_layers", 0)) > 0:
        raise ValueError(f"{origin} already has NextN layers")
    if "output.weight" not in model.tensors:
        raise ValueError(f"{origin} has a tied LM head; the oracle needs output.weight")
    n_embd, n_vocab = model.tensors["token_embd.weight"].ne
    if n_embd < n_vocab:
        raise ValueError(f"a one-hot embedding needs n_embd >= n_vocab ({n_embd} < {n_vocab})")
    for name, tensor in list(model.tensors.items()):
        replacement = _oracle_tensor(name, tensor.ne)
        if replacement is not None:
            model.put(name, replacement, tensor.ggml_type)
    _add_nextn_block(model, _eh_proj(n_embd, n_vocab, head_shift),
                     model.tensors["output.weight"].ggml_type)


def _write_twin(source: Path, target: Path, head_shift: int) -> Path:
    """Write ``source`` with an MTP block and next-token-oracle weights to ``target``."""
    model = _load(source)
    _make_twin(model, source, head_shift)
    return _save(model, target)


def write_oracle(source: Path, target: Path) -> Path:
    """The oracle from the Qwen3.5 GGUF ``source``: every draft right. Returns ``target``."""
    return _write_twin(source, target, head_shift=0)


def write_anti_oracle(source: Path, target: Path) -> Path:
    """The anti-oracle from ``source``: every draft wrong by one. Returns ``target``."""
    return _write_twin(source, target, head_shift=1)


@dataclass(frozen=True)
class Qwen35Dims:
    """The size of a scaled Qwen3.5 trunk (the template's vocabulary and SSM state are kept)."""

    n_embd: int
    n_head: int  # attention heads (head size n_embd / n_head), and gated delta net value heads
    n_ff: int
    n_layer: int  # the template's blocks repeated: recurrent, full attention, recurrent, ...


# Measured through `farm run` on 2 cores (-t 2, 256 tokens, every draft accepted): ~100
# tok/s baseline, draft-mtp 1.7x at n-max 2 and 1.9x at n-max 3 (tests/bench/bench_oracle.py).
# F32 models of 120-190 MB (512/4/1408/8-12, 640/4/1792/8) swung between 1.1x and 2.1x from
# one session to the next; F16 ones of 90-95 MB (512/4/1408/12, 640/4/1792/8) gave 0.8-1.1x.
CPU_ORACLE_DIMS = Qwen35Dims(n_embd=768, n_head=6, n_ff=2048, n_layer=10)
CPU_ORACLE_TYPE = F16
# test-llama-archs writes 256; a trunk that passes the residual through works at any length.
_SCALED_CONTEXT_LENGTH = 4096


def _qwen35_shapes(model: _Gguf, dims: Qwen35Dims) -> dict[str, tuple[int, ...]]:
    """Each Qwen3.5 tensor's ggml ``ne`` at ``dims``, by name (``blk.N.`` dropped).

    As llama.cpp (``src/models/qwen35.cpp``) creates them: the gated delta net has
    ``ssm.group_count`` key heads and ``n_head`` value heads of ``ssm.state_size``.
    """
    n_embd, n_head, n_ff = dims.n_embd, dims.n_head, dims.n_ff
    n_vocab = model.tensors["token_embd.weight"].ne[1]
    head = n_embd // n_head
    state = int(model.get("ssm.state_size"))
    value_dim = state * n_head
    conv_dim = 2 * state * int(model.get("ssm.group_count")) + value_dim
    return {
        "token_embd.weight": (n_embd, n_vocab), "output.weight": (n_embd, n_vocab),
        "output_norm.weight": (n_embd,), "attn_norm.weight": (n_embd,),
        "post_attention_norm.weight": (n_embd,),
        "attn_q.weight": (n_embd, 2 * head * n_head), "attn_k.weight": (n_embd, head * n_head),
        "attn_v.weight": (n_embd, head * n_head), "attn_output.weight": (head * n_head, n_embd),
        "attn_q_norm.weight": (head,), "attn_k_norm.weight": (head,),
        "attn_qkv.weight": (n_embd, conv_dim), "attn_gate.weight": (n_embd, value_dim),
        "ssm_conv1d.weight": (int(model.get("ssm.conv_kernel")), conv_dim),
        "ssm_dt.bias": (n_head,), "ssm_a": (n_head,), "ssm_beta.weight": (n_embd, n_head),
        "ssm_alpha.weight": (n_embd, n_head), "ssm_norm.weight": (state,),
        "ssm_out.weight": (value_dim, n_embd),
        "ffn_gate.weight": (n_embd, n_ff), "ffn_up.weight": (n_embd, n_ff),
        "ffn_down.weight": (n_ff, n_embd),
    }


def _filler(ne: tuple[int, ...], ggml_type: GGMLQuantizationType) -> Array:
    """Small values (|x| <= 1/64) from integer arithmetic alone, exact in F16 and F32.

    No random generator: its stream could change with numpy's version, and so would the
    file's pinned hash. The oracle zeroes what these weights write into the residual stream,
    so only their cost counts, not their values.
    """
    steps = (np.arange(math.prod(ne), dtype=np.int64) * 40503) % 257 - 128
    return (steps / 8192).astype(_NUMPY_TYPES[ggml_type]).reshape(tuple(reversed(ne)))


def _scaled_kv(template: _Gguf, model: _Gguf, dims: Qwen35Dims) -> None:
    """``template``'s metadata in ``model``, with the hyperparameters that give ``dims``."""
    n_template = int(template.get("block_count"))
    for key, entry in template.kv.items():
        value = entry.value
        per_layer = key.removeprefix(f"{template.arch}.") in (*_PER_LAYER_KEYS, _RECURRENT_KEY)
        if per_layer and entry.vtype == GGUFValueType.ARRAY and len(value) == n_template:
            value = [value[il % n_template] for il in range(dims.n_layer)]
        model.kv[key] = _KV(value, entry.vtype, entry.sub_type)
    head = dims.n_embd // dims.n_head
    sizes = {"context_length": _SCALED_CONTEXT_LENGTH, "embedding_length": dims.n_embd,
             "feed_forward_length": dims.n_ff, "block_count": dims.n_layer,
             "attention.head_count": dims.n_head, "attention.head_count_kv": dims.n_head,
             "ssm.time_step_rank": dims.n_head,
             "ssm.inner_size": int(template.get("ssm.state_size")) * dims.n_head}
    for suffix in ("attention.key_length", "attention.value_length", "attention.key_length_swa",
                   "attention.value_length_swa", "rope.dimension_count",
                   "rope.dimension_count_swa"):
        sizes[suffix] = head
    for suffix, size in sizes.items():
        current = model.kv.get(model.key(suffix))
        if current is not None and current.vtype == GGUFValueType.ARRAY:  # one value per block
            current.value = [size] * len(current.value)
        else:
            model.set_u32(suffix, size)
    model.kv[model.key("rope.dimension_sections")] = _KV(
        [head // 4] * 4, GGUFValueType.ARRAY, GGUFValueType.INT32)


def _scaled(template: _Gguf, dims: Qwen35Dims, matrix_type: GGMLQuantizationType) -> _Gguf:
    """A Qwen3.5 at ``dims`` with ``template``'s metadata, tensor names and block pattern.

    Its matrices (not ``ssm_conv1d``) are ``matrix_type``, everything else F32; values come
    from ``_filler``, except ``ssm_a`` = -1 (a real model's ``-exp(A_log)`` is negative: the
    gated delta net's state decays instead of growing over a long context). Tensors a
    Qwen3.5 does not have (test-llama-archs adds biases, per-tensor scales, a classifier
    head) are left out.
    """
    if dims.n_head % 2 or dims.n_embd % dims.n_head or (dims.n_embd // dims.n_head) % 4:
        raise ValueError(f"{dims}: n_head must be even and split n_embd into heads of a "
                         "multiple of 4 (the gated delta net pairs its value heads; rope has "
                         "4 sections)")
    model = _Gguf(template.arch)
    _scaled_kv(template, model, dims)
    shapes = _qwen35_shapes(template, dims)
    n_template = int(template.get("block_count"))
    names = [name for name in template.tensors if not name.startswith("blk.")]
    for il in range(dims.n_layer):
        prefix = f"blk.{il % n_template}."
        names += [f"blk.{il}.{name.removeprefix(prefix)}" for name in template.tensors
                  if name.startswith(prefix)]
    for name in names:
        suffix = name.split(".", 2)[2] if name.startswith("blk.") else name
        ne = shapes.get(suffix)
        if ne is None:
            continue
        ggml_type = matrix_type if len(ne) == 2 and suffix != "ssm_conv1d.weight" else F32
        values = -np.ones(ne) if suffix == "ssm_a" else _filler(ne, ggml_type)
        model.put(name, values, ggml_type)
    return model


def write_cpu_oracle(template: Path, target: Path, dims: Qwen35Dims = CPU_ORACLE_DIMS,
                     matrix_type: GGMLQuantizationType = CPU_ORACLE_TYPE) -> Path:
    """An oracle big enough for ``draft-mtp`` to pay on a CPU, shaped like ``template``.

    The trunk is ``template`` scaled to ``dims`` (``_scaled``), then made an oracle as the
    tiny one is: every draft right. Returns ``target``.
    """
    model = _scaled(_load(template), dims, matrix_type)
    _make_twin(model, template, head_shift=0)
    return _save(model, target)
