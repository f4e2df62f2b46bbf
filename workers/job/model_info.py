"""What a GGUF file is, read from its metadata without loading it; cached on disk.

Reading metadata of a large vocabulary takes seconds and hashing a 20 GB file a minute,
so both are cached by (path, size, mtime) in the cache dir.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from workers.paths import NodePaths, file_sha256


@dataclass(frozen=True)
class ModelInfo:
    """A GGUF's identity and the metadata the checks and reports use."""

    file_name: str
    size: int
    sha256: str
    architecture: str
    file_type: str  # e.g. MOSTLY_Q4_K_M, from general.file_type
    n_params: int
    context_length: int | None
    has_chat_template: bool
    nextn_layers: int  # MTP heads: {arch}.nextn_predict_layers
    vocab_size: int
    tokenizer: str  # tokenizer.ggml.model: gpt2, llama, ...
    vocab_hash: str  # sha256 over the token strings: equal vocabularies, equal hashes


def _scalar(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return field.contents() if field is not None else None


def _vocab(reader: Any) -> tuple[int, str]:
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        return 0, ""
    digest = hashlib.sha256()
    for index in field.data:
        digest.update(bytes(field.parts[index]))
        digest.update(b"\0")
    return len(field.data), digest.hexdigest()


def _file_type(value: Any) -> str:
    from gguf import LlamaFileType

    try:
        return LlamaFileType(int(value)).name
    except (TypeError, ValueError):
        return "unknown"


def _read_metadata(path: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as exc:  # a short file: IndexError
        raise ConfigError(f"{path}: not a readable GGUF file ({exc or type(exc).__name__}); "
                          "give a whole .gguf model file") from exc
    arch = str(_scalar(reader, "general.architecture") or "unknown")
    vocab_size, vocab_hash = _vocab(reader)
    context = _scalar(reader, f"{arch}.context_length")
    return {
        "architecture": arch,
        "file_type": _file_type(_scalar(reader, "general.file_type")),
        "n_params": sum(int(tensor.n_elements) for tensor in reader.tensors),
        "context_length": int(context) if context is not None else None,
        "has_chat_template": "tokenizer.chat_template" in reader.fields,
        "nextn_layers": int(_scalar(reader, f"{arch}.nextn_predict_layers") or 0),
        "vocab_size": vocab_size,
        "tokenizer": str(_scalar(reader, "tokenizer.ggml.model") or "unknown"),
        "vocab_hash": vocab_hash,
    }


def inspect_model(path: str | Path, paths: NodePaths) -> ModelInfo:
    """Metadata and sha256 of a GGUF file, from the node's cache when the file is
    unchanged."""
    file = Path(path).resolve()
    try:
        stat = file.stat()
    except OSError as exc:
        raise ConfigError(f"{file}: model file cannot be read: {exc.strerror}") from exc
    key = f"{file}|{stat.st_size}|{stat.st_mtime_ns}"
    cache_path = paths.cache_dir / "model-info.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    try:
        return ModelInfo(**cache[key])
    except (KeyError, TypeError):  # not cached, or cached by an older version
        pass
    info = ModelInfo(file_name=file.name, size=stat.st_size, sha256=file_sha256(file),
                     **_read_metadata(file))
    cache[key] = asdict(info)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(cache, indent=1, sort_keys=True))
    partial.replace(cache_path)
    return info
