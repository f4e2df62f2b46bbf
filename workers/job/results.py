"""What executing a job yields: each run's result (``RunResult``: its key within the job,
its place in the design, its measurements) and how the job ended (``Outcome``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from farm.matrix.spec import ArmRole, Prompt
from workers.job.checks import Preflight
from workers.job.runtime.client import Generation, SpecCounters
from workers.job.runtime.server_log import ContextMemory, SpecStats
from workers.job.telemetry import RunTelemetry
from workers.job.telemetry.node import NodeLoad


@dataclass(frozen=True)
class RunKey:
    """What identifies a run within its job (a resumed job skips the keys it has)."""

    arm: ArmRole
    block: int
    prompt_id: str
    repetition: int


@dataclass(frozen=True)
class Slot:
    """Where a block sits in the design: its index, pair, and the arm's place in the pair."""

    block: int
    pair: int
    position: int
    role: ArmRole


@dataclass(frozen=True)
class BlockStart:
    """What a block spent before its first run, each of its runs stored with it: the
    server's start (launch to /health answering: loading the model, in the sandbox where
    it runs) and the warm-up request."""

    server_s: float
    warmup_s: float


@dataclass(frozen=True)
class RunResult:
    """One run's measurements with the provenance its row needs."""

    key: RunKey
    slot: Slot
    prompt: Prompt
    arm_name: str
    build_name: str
    generation: Generation  # the run's figures: its one stream's, or its streams' merged
    streams: tuple[Generation, ...]  # each simultaneous stream's own, by slot
    seeds: tuple[int, ...]  # each stream's request's (run_sampling)
    counters: SpecCounters
    # The server's own, from its log (the streams' together); None when not speculating.
    spec_stats: SpecStats | None
    memory: ContextMemory | None  # its contexts' sizes, from its log
    argv: list[str]
    sandboxed: bool  # whether the server ran in the node's sandbox
    server_log: str
    started_at: datetime
    telemetry: RunTelemetry
    slot_speculative: bool | None
    weights_spilled: bool
    tokens: list[int] | None
    gpu_name: str | None
    gpu_memory_mb: float | None  # the GPU's total memory, MiB
    node: NodeLoad
    start: BlockStart  # its block's server start and warm-up

    @property
    def window(self) -> Window:
        """The streams' decode window: aggregate tok/s and overlap (``stream_window``)."""
        return stream_window(self.streams)

    @property
    def joules_per_token(self) -> float | None:
        """GPU energy per generated token (None without energy or tokens)."""
        return self.telemetry.joules_per_token(self.generation.generated_tokens)

    @property
    def throttled(self) -> bool | None:
        """Whether a GPU throttled over the run; None where no GPU was sampled."""
        return self.telemetry.throttled if self.telemetry.max_vram_used_mb is not None else None


@dataclass(frozen=True)
class Window:
    """What N simultaneous streams delivered together over their decode window, from the
    first stream's first token to the last stream's last (the client's clock)."""

    aggregate_tok_s: float | None  # tokens after each stream's first, per second of window
    overlap: float | None  # share of the window in which every stream was decoding


def stream_window(streams: Sequence[Generation]) -> Window:
    """The ``Window`` of a run's streams; overlap is None for a single stream."""
    start, end = min(g.first_at for g in streams), max(g.last_at for g in streams)
    span = end - start
    if span <= 0:
        return Window(None, None)
    tokens = sum(max(g.generated_tokens - 1, 0) for g in streams)
    together = min(g.last_at for g in streams) - max(g.first_at for g in streams)
    return Window(tokens / span, None if len(streams) == 1 else max(together, 0.0) / span)


@dataclass(frozen=True)
class Outcome:
    """How a job ended: what was checked, how many block pairs ran, why it stopped."""

    checked: Preflight
    pairs: int
    stop_reason: str

    @property
    def speculation_asked(self) -> bool:
        """Whether the job's variant asked for speculative decoding of any kind."""
        return self.checked.spec.variant.speculates
