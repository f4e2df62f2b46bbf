"""What a peer's file becomes: figures (one per stored ``peer_result`` row), and the one
error a bad file gets (the file, the line or key, the fix)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import PureWindowsPath
from typing import Any

from farm.errors import ConfigError


class PeerFileError(ConfigError):
    """A peer's file that cannot be read as the format it claims; nothing of it is stored."""

    def __init__(self, file: str, where: str, problem: str, fix: str) -> None:
        super().__init__(f"{file}: {where}: {problem}; {fix}. Nothing of {file} was imported")


@dataclass(frozen=True)
class PeerFigure:
    """One figure a peer reported, with the provenance it gave (None: it did not say). The
    fields are the columns of ``farm.store.models.PeerResult``."""

    source: str
    test: str
    measure: str  # prompt, decode, prompt+decode
    tok_s: float
    raw: dict[str, Any]
    build_commit: str | None = None
    build_number: int | None = None
    model_file: str | None = None
    model_type: str | None = None
    model_size: int | None = None
    model_n_params: int | None = None
    backends: str | None = None
    cpu_info: str | None = None
    gpu_info: str | None = None
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: str | None = None
    speculative: bool | None = None
    spec_type: str | None = None
    n_prompt: int | None = None
    n_gen: int | None = None
    n_depth: int | None = None
    tok_s_sd: float | None = None
    repetitions: int | None = None
    samples: list[float] | None = None
    drafts: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    drafted_per_pos: list[int] | None = None
    accepted_per_pos: list[int] | None = None
    measured_at: datetime | None = None

    def columns(self) -> dict[str, Any]:
        """The figure as the values of its ``peer_result`` row."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


@dataclass(frozen=True)
class PeerFile:
    """A file read whole: which tool wrote it, in which format, and its figures."""

    tool: str
    format: str
    figures: list[PeerFigure] = field(default_factory=list)


# What a user may add at import for what a file does not record (speed-bench and
# llama-spec-bench write no build; speed-bench no model file).
GIVEN_FIELDS = ("build_commit", "build_number", "model_file", "n_threads", "n_gpu_layers",
                "spec_type")


def with_given(peer: PeerFile, given: Mapping[str, Any], file: str) -> PeerFile:
    """``peer`` with what the user gave filled in where the file is silent; a value that
    contradicts the file is an error (the file is the peer's own record)."""
    wanted = {key: value for key, value in given.items() if value is not None}
    figures = []
    for figure in peer.figures:
        for key, value in wanted.items():
            said = getattr(figure, key)
            if said is not None and str(said) != str(value):
                option = "--" + key.replace("_", "-")
                raise PeerFileError(file, figure.source, f"it records {key} {said!r}, "
                                    f"{option} says {value!r}",
                                    f"drop {option} (the file's own value is kept)")
        figures.append(replace(figure, **{key: value for key, value in wanted.items()
                                          if getattr(figure, key) is None}))
    return replace(peer, figures=figures)


def base_name(path: str | None) -> str | None:
    """A model path's file name, whichever system wrote it."""
    return PureWindowsPath(path).name if path else None
