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

from farm.errors import ConfigError
from workers.provision import cache_dir


@dataclass(frozen=True)
class ModelInfo:
    file_name: str
    size: int
    sha256: str
    architecture: str
    has_chat_template: bool


def _read_metadata(path: Path) -> tuple[str, bool]:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: not a readable GGUF file ({exc})") from exc
    arch_field = reader.fields.get("general.architecture")
    architecture = str(arch_field.contents()) if arch_field else "unknown"
    return architecture, "tokenizer.chat_template" in reader.fields


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(4 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cache_file() -> Path:
    return cache_dir() / "model-info.json"


def inspect_model(path: str | Path) -> ModelInfo:
    """Metadata and sha256 of a GGUF file, from the cache when the file is unchanged."""
    file = Path(path).resolve()
    try:
        stat = file.stat()
    except OSError as exc:
        raise ConfigError(f"{file}: model file cannot be read: {exc.strerror}") from exc
    key = f"{file}|{stat.st_size}|{stat.st_mtime_ns}"
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return ModelInfo(**cache[key])
    architecture, has_template = _read_metadata(file)
    info = ModelInfo(file_name=file.name, size=stat.st_size, sha256=_sha256(file),
                     architecture=architecture, has_chat_template=has_template)
    cache[key] = asdict(info)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(cache, indent=1, sort_keys=True))
    partial.replace(cache_path)
    return info
