"""How many block pairs a job runs: the design (first stage, most pairs, target, assurance)
and the stopping decision. Plain dataclasses, no numpy and no pydantic: the matrix, the
runner and the reports read a design without loading the statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# What a speedup interval answers of "is the variant faster?" (``answer``).
Answer = Literal["faster", "slower", "within", "undecided"]
# How a job decides it has enough pairs: "decision" once "is it faster?" is answered,
# "precision" once its interval is within its target (both farm.stats.sequential; a
# precision design with an assurance is two-stage), "two-stage" once the first stage's plan
# is run (farm.stats.twostage: the design before issue 56, a stored job's without a stop
# rule), "fixed" after ``first_stage`` pairs.
StopRule = Literal["decision", "precision", "two-stage", "fixed"]

# Pairs a second stage adds at least: its crossover fit needs two pairs of each order for a
# residual df of 2 (t 4.30 at 95%).
MIN_SECOND_STAGE = 4
# The fewest pairs a decision design looks at: the crossover fit's residual df of 2.
MIN_DECISION_PAIRS = 4
# A precision design's interval level, at each look and as reported (farm.stats.sequential,
# farm.stats.speedup): set by simulation: coverage 0.936-0.972 at the stop in every cell.
PRECISION_LEVEL = 0.965


@dataclass(frozen=True)
class StopDecision:
    """Whether a job has enough pairs, and why; ``pairs``: the fewest and the most it runs
    in all, as far as this decision knows (the pairs done once it stops), for progress."""

    stop: bool
    reason: str
    pairs: tuple[int, int]


@dataclass(frozen=True)
class Design:
    """How many block pairs a job runs: ``first_stage`` pairs always, at most ``max_pairs``
    (``max_pairs == first_stage`` is a fixed design), as its ``rule`` says:

    * "two-stage" (the default here, a stored job's without a rule): when ``max_pairs``
      leaves room for a second stage, as many as the first stage's spread says the
      ``target`` half-width needs. ``assurance`` (None, or a probability): None plans as if
      the first stage's spread were the true one, which meets the target about six times in
      ten; a probability plans the fewest pairs that meet it with that probability
      (``planned_pairs``), and runs on past them while the job's interval is wider than the
      target (``stop_decision``).
    * "precision" (a matrix's default): from the first stage (4 pairs at least) a look
      after each pair, until the job's interval over every pair is within ``target``
      (farm.stats.sequential); with an ``assurance``, two-stage as above.
    * "decision": a look after each pair until the question "is it faster?" is answered,
      ``target`` being the equivalence margin (farm.stats.sequential).
    * "fixed": ``first_stage`` pairs."""

    first_stage: int
    max_pairs: int
    target: float = 0.03
    assurance: float | None = None
    rule: StopRule = "two-stage"

    def __post_init__(self) -> None:
        if self.rule == "fixed" and self.max_pairs != self.first_stage:
            raise ValueError(f"a fixed design runs first_stage ({self.first_stage}) pairs, "
                             f"not up to {self.max_pairs}")
        if self.rule == "decision" and not (
                MIN_DECISION_PAIRS <= self.first_stage <= self.max_pairs):
            raise ValueError(f"a decision design looks from {MIN_DECISION_PAIRS} pairs or "
                             f"more, up to max_pairs: got {self.first_stage} to "
                             f"{self.max_pairs}")
        if self.two_stage and self.max_pairs < self.first_stage + MIN_SECOND_STAGE:
            raise ValueError(f"max_pairs ({self.max_pairs}) must equal first_stage "
                             f"({self.first_stage}) or exceed it by {MIN_SECOND_STAGE} or more")
        if self.two_stage and self.first_stage < 3:
            raise ValueError(f"a two-stage design needs a first stage of 3 or more pairs, "
                             f"got {self.first_stage}")

    @property
    def least_pairs(self) -> int:
        """The fewest pairs a job of this design runs."""
        if self.two_stage:
            return self.first_stage + MIN_SECOND_STAGE
        if self.sequential:
            return min(max(self.first_stage, MIN_DECISION_PAIRS), self.max_pairs)
        return self.first_stage

    @property
    def two_stage(self) -> bool:
        """Whether the first stage plans a second one (a two-stage design, or a precision
        one with an assurance, with room for one)."""
        return (self.rule == "two-stage" or (self.rule == "precision" and self.assurance
                                             is not None)) and self.max_pairs > self.first_stage

    @property
    def sequential(self) -> bool:
        """Whether the job looks after each pair whether it has its answer (a decision
        design, or a precision one without an assurance, with room to look)."""
        return (self.rule == "decision" or (self.rule == "precision" and self.assurance
                                            is None)) and self.max_pairs > self.first_stage


def answer(low: float, high: float, margin: float) -> Answer:
    """What a speedup interval ``[low, high]`` answers of "is the variant faster?": faster
    or slower when it leaves out 1x, within ±``margin`` when it lies inside that, else
    undecided (`farm ab`'s answer line; issue 56's simulations read jobs the same way)."""
    if low > 1:
        return "faster"
    if high < 1:
        return "slower"
    if 1 - margin <= low and high <= 1 + margin:
        return "within"
    return "undecided"
