"""Tiny Qwen3.5 GGUFs with an MTP (NextN) head, for testing ``--spec-type draft-mtp``.

``test-llama-archs`` writes a random-weight Qwen3.5 without MTP layers. This module derives
two files from it, following what llama.cpp (b11434) expects of a Qwen3.5 MTP block
(``src/models/qwen35.cpp``):

* a *random twin*: one extra decoder block (``block_count`` + 1, ``nextn_predict_layers`` = 1,
  ``attention.recurrent_layers`` extended with 0) whose weights are copied from the last
  full-attention block, plus ``blk.N.nextn.eh_proj`` / ``enorm`` / ``hnorm``. It drafts for
  real and (on random weights) practically never gets a draft accepted;
* an *oracle*: the same layout with weights rewritten so that the next token is always
  ``current + 1 mod vocab``, for the trunk and the MTP head alike, so every draft is accepted
  and the text equals the baseline's.

Both files are written deterministically, via a temporary file renamed onto the target.
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

RANDOM_NAME = "qwen35-mtp-random.gguf"
ORACLE_NAME = "qwen35-mtp-oracle.gguf"

_SEED = 20260611
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


def add_nextn_block(source: Path, target: Path) -> Path:
    """Write a copy of the Qwen3.5 GGUF ``source`` with one NextN (MTP) block appended.

    The new block ``blk.N`` (N = the old ``block_count``) gets the weights (not the
    ``.scale``/``.input_scale`` tensors) of the last full-attention block, plus
    ``blk.N.nextn.eh_proj.weight`` (ne ``[2*n_embd, n_embd]``, seeded random F32) and
    ``blk.N.nextn.enorm.weight`` / ``blk.N.nextn.hnorm.weight`` (ones). The optional
    ``nextn.shared_head_*`` and ``nextn.embed_tokens`` are left out: llama.cpp then uses
    ``output_norm``, ``output`` and ``token_embd``. Returns ``target``.
    """
    model = _load(source)
    if int(model.get("nextn_predict_layers", 0)) > 0:
        raise ValueError(f"{source} already has NextN layers")
    n_layer = int(model.get("block_count"))
    n_embd = int(model.get("embedding_length"))
    source_block = _last_full_attention_block(model, n_layer)

    prefix = f"blk.{source_block}."
    for name, tensor in list(model.tensors.items()):
        if name.startswith(prefix) and not name.endswith(_SCALE_SUFFIXES):
            copy = _Tensor(tensor.data.copy(), tensor.ggml_type, tensor.ne)
            model.tensors[f"blk.{n_layer}.{name.removeprefix(prefix)}"] = copy

    rng = np.random.default_rng(_SEED)
    scale = 1.0 / np.sqrt(2 * n_embd)
    model.put_f32(f"blk.{n_layer}.nextn.eh_proj.weight",
                  rng.normal(0.0, scale, size=(n_embd, 2 * n_embd)))
    model.put_f32(f"blk.{n_layer}.nextn.enorm.weight", np.ones(n_embd))
    model.put_f32(f"blk.{n_layer}.nextn.hnorm.weight", np.ones(n_embd))

    _extend_per_layer_arrays(model, n_layer, source_block)
    model.set_u32("block_count", n_layer + 1)
    model.set_u32("nextn_predict_layers", 1)
    return _save(model, target)


def _oracle_tensor(name: str, ne: tuple[int, ...]) -> Array | None:
    """The oracle's replacement for one tensor (numpy order), or None to keep it."""
    shape = tuple(reversed(ne))
    embedding = name == "token_embd.weight" or name.endswith(".nextn.embed_tokens.weight")
    head = name == "output.weight" or name.endswith(".nextn.shared_head_head.weight")
    if embedding or head:
        n_embd, n_vocab = ne
        rows = np.arange(n_vocab)
        # embeddings: token v -> unit v; LM head: logit of y reads unit y-1, so argmax = v+1
        cols = rows if embedding else (rows - 1) % n_vocab
        matrix = np.zeros((n_vocab, n_embd))
        matrix[rows, cols] = 1.0
        return matrix
    if name.endswith(_RESIDUAL_WRITERS):
        return np.zeros(shape)
    if name.endswith("nextn.eh_proj.weight"):
        # input is concat([enorm(embedding of the next token); hnorm(hidden)]): keep the first
        n_in, n_out = ne
        matrix = np.zeros((n_out, n_in))
        matrix[np.arange(n_out), np.arange(n_out)] = 1.0
        return matrix
    if name.endswith("norm.weight"):
        return np.ones(shape)
    return None


def make_oracle(source_with_nextn: Path, target: Path) -> Path:
    """Rewrite the weights of a GGUF from :func:`add_nextn_block` into a next-token oracle.

    ``token_embd`` becomes one-hot (needs ``n_embd >= n_vocab``), ``output`` reads unit
    ``y-1`` for token ``y``, every ``ssm_out``/``attn_output``/``ffn_down`` is zeroed (each
    layer passes the residual through), every norm weight is 1 and ``nextn.eh_proj`` keeps
    the embedding half of its input. Trunk and MTP head then both predict
    ``token + 1 mod n_vocab``. Replaced tensors are written as F32. Returns ``target``.
    """
    model = _load(source_with_nextn)
    if int(model.get("nextn_predict_layers", 0)) < 1:
        raise ValueError(f"{source_with_nextn} has no NextN layer")
    if "output.weight" not in model.tensors:
        raise ValueError(f"{source_with_nextn} has a tied LM head; the oracle needs output.weight")
    n_embd, n_vocab = model.tensors["token_embd.weight"].ne
    if n_embd < n_vocab:
        raise ValueError(f"a one-hot embedding needs n_embd >= n_vocab ({n_embd} < {n_vocab})")
    for name, tensor in list(model.tensors.items()):
        replacement = _oracle_tensor(name, tensor.ne)
        if replacement is not None:
            model.put_f32(name, replacement)
    return _save(model, target)


def _fresh(path: Path, source: Path) -> bool:
    return path.is_file() and path.stat().st_mtime > source.stat().st_mtime


def generate_fixtures(source: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write ``qwen35-mtp-random.gguf`` and ``qwen35-mtp-oracle.gguf`` into ``out_dir``.

    Skipped when both exist and are newer than ``source``. Returns (random, oracle).
    """
    random_path = out_dir / RANDOM_NAME
    oracle_path = out_dir / ORACLE_NAME
    if _fresh(random_path, source) and _fresh(oracle_path, source):
        return random_path, oracle_path
    add_nextn_block(source, random_path)
    make_oracle(random_path, oracle_path)
    return random_path, oracle_path
