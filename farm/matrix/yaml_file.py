"""YAML as the farm reads and writes a matrix or a prompt file: read with every key given
once (a duplicate is an error with both lines, where YAML would keep the last), every
problem a ``ConfigError`` naming the file and the line; written in the order given, one
line a value."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml

from farm.errors import ConfigError


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, first: int, second: int) -> None:
        super().__init__(f"key {key!r} is given twice, on lines {first} and {second}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping, where YAML would silently
    keep the last value (`n-predict` set twice: the first one is lost)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys of a `<<: *anchor` merge may be overridden here
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base constructor explains an unhashable key
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(key, seen[key], line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def matrix_yaml(matrix: Mapping[str, Any]) -> str:
    """A matrix as the farm writes it (`farm ab`, `farm recommend --write-matrix`, the
    selftest's): its keys in their order, one line a value (a long model path is not
    folded at 80 columns; YAML would read it back the same, a reader's grep would not)."""
    return yaml.safe_dump(dict(matrix), sort_keys=False, width=1_000_000)


def read_yaml(path: Path) -> Any:
    """Parse YAML, turning syntax errors and duplicate keys into messages with the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # safe: a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: {exc}; give it once (YAML would silently keep the last "
                          "one)") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: YAML syntax error: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {exc}") from exc
    if data is None:
        raise ConfigError(f"{path}: the file is empty; a matrix needs at least `campaign`, "
                          "`models`, `prompts` and `variants` (see examples/)")
    return data
