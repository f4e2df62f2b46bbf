"""A job: one comparison, baseline arm vs one variant arm, identified by ``job_key``."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from farm.errors import ConfigError
from farm.matrix.flags import FlagValue, to_argv, varying_text
from farm.matrix.schema import (
    Assurance,
    BusyPolicy,
    BusyWait,
    ClassName,
    Concurrency,
    Name,
    NPredict,
    Pairs,
    PromptLength,
    Repetitions,
    Sampling,
    StopMode,
    TargetCi,
)
from farm.stats.design import Design

ArmRole = Literal["baseline", "variant"]
# What a job measures (JobSpec.kind).
JobKind = Literal["variant", "control", "synthetic"]


class Frozen(BaseModel):
    """Base of the spec models: immutable, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Prompt(Frozen):
    """One prompt of a job, from the matrix, a prompt file or the built-in suite."""

    id: Name
    text: str
    category: str


class ModelRef(Frozen):
    """A model by name; ``path`` is set once resolved on the machine that runs the job."""

    name: Name
    file: str | None = None
    path: str | None = None

    @property
    def local_path(self) -> str:
        """The resolved file; a ConfigError if the job was not resolved on this machine."""
        if self.path is None:
            raise ConfigError(f"model {self.name!r} is not resolved to a file on this machine")
        return self.path


class BuildRef(Frozen):
    """A llama-server build by name; ``path`` is set once resolved to a binary."""

    name: Name
    path: str | None = None

    @property
    def local_path(self) -> str:
        """The resolved binary; a ConfigError if the job was not resolved on this machine."""
        if self.path is None:
            raise ConfigError(f"build {self.name!r} is not resolved to a binary on this machine")
        return self.path


# llama.cpp's benchmarking-only flags that force an acceptance pattern.
SYNTHETIC_PREFIX = "spec-synth-"


class Arm(Frozen):
    """One side of a job: its role, name, build, and every flag it runs with."""

    role: ArmRole
    name: str
    build: BuildRef
    flags: tuple[tuple[str, FlagValue], ...]

    @property
    def argv(self) -> list[str]:
        """The arm's own flags, without the ones the farm adds (model, host, port...)."""
        return to_argv(self.flags)


class JobSpec(Frozen):
    """All a node needs to run one job; stored whole, as JSON, in the job's row."""

    campaign: Name
    gpu_class: ClassName
    model: ModelRef
    baseline: Arm
    variant: Arm
    varying: dict[str, str | None]
    prompt_mode: Literal["chat", "completion"]
    prompts: tuple[Prompt, ...]
    n_predict: NPredict
    sampling: dict[str, Any]
    repetitions: Repetitions
    pairs: Pairs  # the first stage: block pairs every job runs
    max_pairs: Pairs
    target_ci: TargetCi
    target_assurance: Assurance | None = None  # None: plan from the first stage's spread as is
    control: bool = False  # an A/A job: the variant is the baseline again
    stop: StopMode = "fixed"  # natural: no ignore_eos, n_predict a cap
    concurrency: Concurrency = 1  # simultaneous streams per run, one server slot each
    prompt_length: PromptLength = 0  # tokens of the bundled document before each prompt, about
    # How a block meets other work on the node; not in the job's key: it changes when a
    # block runs, not what it measures.
    busy_node: BusyPolicy = "flag"
    busy_wait: BusyWait = 600.0

    @field_validator("sampling")
    @classmethod
    def _known_sampling(cls, value: dict[str, Any]) -> dict[str, Any]:
        return Sampling.check_request_fields(value)

    @property
    def synthetic(self) -> bool:
        """Whether the variant forces its acceptance (``--spec-synth-*``): it measures the
        engine's cost at that acceptance, not a drafter, and its output is not valid."""
        return any(name.startswith(SYNTHETIC_PREFIX) for name, _ in self.variant.flags)

    @property
    def kind(self) -> JobKind:
        """What the job measures: "control" (A/A: the machine's noise floor), "synthetic"
        (the engine's cost at a forced acceptance, not a drafter's speedup) or "variant"."""
        return "control" if self.control else "synthetic" if self.synthetic else "variant"

    @property
    def outputs_differ(self) -> str | None:
        """Why the arms' outputs need not match, if they need not: then agreement does
        not apply."""
        if self.synthetic:
            return "synthetic acceptance (engine cost): the variant's output is not valid"
        if float(self.sampling.get("temperature") or 0.0) > 0.0:
            return "temperature > 0: outputs are not expected to match"
        return None

    @property
    def design(self) -> Design:
        """How many block pairs the job runs: its first stage, maximum, target, assurance."""
        return Design(self.pairs, self.max_pairs, self.target_ci, self.target_assurance)

    def arm(self, role: ArmRole) -> Arm:
        """The baseline or the variant arm."""
        return self.baseline if role == "baseline" else self.variant

    @property
    def build(self) -> BuildRef:
        """The job's build: the baseline's (a variant may run another, e.g. a fork)."""
        return self.baseline.build

    def _experiment(self) -> dict[str, Any]:
        """What the two arms measure, wherever, whenever and on whichever build they run."""
        return {
            "gpu_class": self.gpu_class,
            "model": self.model.name,
            "baseline_argv": self.baseline.argv,
            "variant_argv": self.variant.argv,
            "prompt_mode": self.prompt_mode,
            "prompts": [prompt.text for prompt in self.prompts],
            "n_predict": self.n_predict,
            "sampling": self.sampling,
            # Only when not the default, so that every fixed-length job keeps its keys.
            **({"stop": self.stop} if self.stop != "fixed" else {}),
            **({"concurrency": self.concurrency} if self.concurrency != 1 else {}),
        }

    @cached_property
    def job_key(self) -> str:
        """sha256 over exactly what makes two jobs the same experiment (sorted-key JSON)."""
        return _sha256({
            **self._experiment(),
            "campaign": self.campaign,
            "build": self.build.name,
            "variant_build": self.variant.build.name,
            "design": {"repetitions": self.repetitions, "pairs": self.pairs,
                       "max_pairs": self.max_pairs, "target_ci": self.target_ci,
                       # Only when set, so that every other job keeps its key.
                       **({"target_assurance": self.target_assurance}
                          if self.target_assurance is not None else {})},
            # Only when set, so that the keys of every other job stay as they were.
            **({"control": True} if self.control else {}),
        })

    @cached_property
    def comparable_key(self) -> str:
        """sha256 over what makes two jobs' speedups comparable: ``job_key`` without the
        campaign, the build and the design, so that a rerun, another build of one campaign
        or a longer design lines up with the first. A variant on its own build (a fork)
        keeps that build's name: it is what the variant is."""
        fork = None if self.variant.build.name == self.build.name else self.variant.build.name
        return _sha256({**self._experiment(), "variant_build": fork})

    @property
    def varying_text(self) -> str:
        """What this job changes, for humans (``farm.matrix.flags.varying_text``)."""
        return varying_text(self.varying)


def _sha256(identity: dict[str, Any]) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
