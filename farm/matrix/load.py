"""Read a matrix file: YAML (``farm.matrix.yaml_file``) -> validated ``Matrix``
(``farm.matrix.schema``; errors worded by ``farm.matrix.explain``) -> its source builds'
refs resolved to commits (``farm.matrix.build_refs``) -> a deterministic list of
``JobSpec`` (``farm.matrix.expansion``).

Every problem is a ``ConfigError`` naming the file, the key path and the fix, raised
before anything runs or is written.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from farm.errors import ConfigError
from farm.matrix.build_refs import at_ref, resolve_refs
from farm.matrix.expansion import expand
from farm.matrix.explain import explain
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.matrix.yaml_file import read_yaml


def load_matrix(path: Path, allow: frozenset[str] = frozenset(), ref: str | None = None,
                ) -> tuple[Matrix, list[JobSpec]]:
    """Validate ``path`` and expand it (``allow``: see ``farm.matrix.expansion.expand``;
    ``ref``: every source build at this ref, ``farm.matrix.build_refs.at_ref``); raises
    ``ConfigError`` with file and key on error."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a matrix is a YAML mapping (campaign:, models:, ...), "
                          f"not a {type(data).__name__}")
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        raise explain(path, exc) from exc
    if ref is not None:
        matrix = at_ref(matrix, path, ref)
    return matrix, expand(matrix, path, allow, resolve_refs(matrix, path))
