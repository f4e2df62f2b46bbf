"""The prompts of a matrix: those written in it (``prompts``), those of a prompt file
(``prompt-file``) and of the built-in suite (``prompt-suite``, ``farm.prompts``), each id
once; and a ``prompt-length`` tier's copy of them, each after its excerpt of the bundled
document."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from farm.errors import ConfigError
from farm.matrix.schema import Matrix, PromptEntry
from farm.matrix.spec import Prompt
from farm.matrix.yaml_file import read_yaml
from farm.prompts import document_text, document_tokens, load_suite, with_document


def _prompt_file(matrix: Matrix, path: Path) -> list[tuple[str, str | PromptEntry]]:
    if not matrix.prompt_file:
        return []
    file_path = (path.parent / matrix.prompt_file).expanduser()
    data = read_yaml(file_path)
    if not isinstance(data, list):
        raise ConfigError(f"{file_path}: a prompt file is a YAML list of prompts "
                          "(text, or {id, text, category})")
    entries: list[tuple[str, str | PromptEntry]] = []
    for i, item in enumerate(data):
        try:
            entry = item if isinstance(item, str) else PromptEntry.model_validate(item)
        except ValidationError as exc:
            raise ConfigError(f"{file_path}: [{i}]: {exc.errors()[0]['msg']}") from exc
        entries.append((f"{file_path}[{i}]", entry))
    return entries


def _prompt_suite(matrix: Matrix, path: Path) -> list[tuple[str, str | PromptEntry]]:
    if matrix.prompt_suite is None:
        return []
    try:
        suite = load_suite(None if matrix.prompt_suite == "all" else matrix.prompt_suite)
    except ValueError as exc:
        raise ConfigError(f"{path}: prompt-suite: {exc}") from exc
    return [(f"prompt-suite {item['id']}", PromptEntry.model_validate(item)) for item in suite]


def matrix_prompts(matrix: Matrix, path: Path) -> tuple[Prompt, ...]:
    """Every prompt of the matrix in ``path``, in order: written, from its file, from the
    suite; a text without an id is ``p<N>``, by its place."""
    entries: list[tuple[str, str | PromptEntry]] = [
        (f"prompts[{i}]", item) for i, item in enumerate(matrix.prompts)]
    entries += _prompt_file(matrix, path) + _prompt_suite(matrix, path)
    if not entries:
        raise ConfigError(f"{path}: prompts: give at least one prompt (`prompts:`, "
                          "`prompt-file:` or `prompt-suite:`)")
    prompts: dict[str, Prompt] = {}
    for index, (where, entry) in enumerate(entries):
        prompt = (Prompt(id=f"p{index + 1}", text=entry, category="general")
                  if isinstance(entry, str)
                  else Prompt(id=entry.id, text=entry.text, category=entry.category))
        if not prompt.text.strip():
            raise ConfigError(f"{path}: {where}: empty prompt")
        if prompt.id in prompts:
            raise ConfigError(f"{path}: {where}: prompt id {prompt.id!r} is used twice")
        prompts[prompt.id] = prompt
    return tuple(prompts.values())


def tier(prompts: tuple[Prompt, ...], length: int, path: Path) -> tuple[Prompt, ...]:
    """The prompts of one ``prompt-length`` tier: each after its own excerpt of the bundled
    document (``farm.prompts.with_document``); as written for 0."""
    if not length:
        return prompts
    document = document_text()
    try:
        return tuple(prompt.model_copy(update={"text": with_document(prompt.text, length, index,
                                                                     document)})
                     for index, prompt in enumerate(prompts))
    except ValueError as exc:
        raise ConfigError(f"{path}: prompt-length: {exc}; give at most "
                          f"{document_tokens()}") from exc
