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

Nothing here is random: the same source gives the same bytes (for a given ``gguf``
package). Each file is written via a temporary file renamed onto the target.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

ORACLE_NAME = "qwen35-mtp-oracle.gguf"
ANTI_ORACLE_NAME = "qwen35-mtp-anti.gguf"

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

    def put_f32(self, name: str, data: Array) -> None:
        """Store ``data`` (numpy order, i.e. ggml ``ne`` reversed) as an F32 tensor."""
        array = np.ascontiguousarray(data, dtype=np.float32)
        self.tensors[name] = _Tensor(array, F32, tuple(reversed(array.shape)))


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
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    temp = Path(name)
    try:
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
        temp.chmod(0o644)  # mkstemp creates 0600
        os.replace(temp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
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


def _add_nextn_block(model: _Gguf, eh_proj: Array) -> None:
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
    model.put_f32(f"blk.{n_layer}.nextn.eh_proj.weight", eh_proj)
    model.put_f32(f"blk.{n_layer}.nextn.enorm.weight", np.ones(n_embd))
    model.put_f32(f"blk.{n_layer}.nextn.hnorm.weight", np.ones(n_embd))
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


def _write_twin(source: Path, target: Path, head_shift: int) -> Path:
    """Write ``source`` with an MTP block and next-token-oracle weights to ``target``.

    ``token_embd`` becomes one-hot (needs ``n_embd >= n_vocab``), ``output`` reads unit
    ``y-1`` for token ``y``, every ``ssm_out``/``attn_output``/``ffn_down`` is zeroed (each
    layer passes the residual through) and every norm weight is 1, so the trunk predicts
    ``token + 1 mod n_vocab``; the MTP head predicts ``token + 1 + head_shift``. Replaced
    tensors are written as F32.
    """
    model = _load(source)
    if int(model.get("nextn_predict_layers", 0)) > 0:
        raise ValueError(f"{source} already has NextN layers")
    if "output.weight" not in model.tensors:
        raise ValueError(f"{source} has a tied LM head; the oracle needs output.weight")
    n_embd, n_vocab = model.tensors["token_embd.weight"].ne
    if n_embd < n_vocab:
        raise ValueError(f"a one-hot embedding needs n_embd >= n_vocab ({n_embd} < {n_vocab})")
    for name, tensor in list(model.tensors.items()):
        replacement = _oracle_tensor(name, tensor.ne)
        if replacement is not None:
            model.put_f32(name, replacement)
    _add_nextn_block(model, _eh_proj(n_embd, n_vocab, head_shift))
    return _save(model, target)


def write_oracle(source: Path, target: Path) -> Path:
    """The oracle from the Qwen3.5 GGUF ``source``: every draft right. Returns ``target``."""
    return _write_twin(source, target, head_shift=0)


def write_anti_oracle(source: Path, target: Path) -> Path:
    """The anti-oracle from ``source``: every draft wrong by one. Returns ``target``."""
    return _write_twin(source, target, head_shift=1)
