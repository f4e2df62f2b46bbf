"""A job: one comparison, baseline arm vs one variant arm, identified by ``job_key``."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from farm.errors import ConfigError
from farm.matrix.flags import FlagValue, to_argv

ArmRole = Literal["baseline", "variant"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Prompt(Frozen):
    id: str
    text: str
    category: str


class ModelRef(Frozen):
    """A model by name; ``path`` is set once resolved on the machine that runs the job."""

    name: str
    file: str | None = None
    path: str | None = None

    @property
    def local_path(self) -> str:
        if self.path is None:
            raise ConfigError(f"model {self.name!r} is not resolved to a file on this machine")
        return self.path


class BuildRef(Frozen):
    """A llama-server build by name; ``path`` is set once resolved to a binary."""

    name: str
    path: str | None = None

    @property
    def local_path(self) -> str:
        if self.path is None:
            raise ConfigError(f"build {self.name!r} is not resolved to a binary on this machine")
        return self.path


class Arm(Frozen):
    role: ArmRole
    name: str
    build: BuildRef
    flags: tuple[tuple[str, FlagValue], ...]

    @property
    def argv(self) -> list[str]:
        """The arm's own flags, without the ones the farm adds (model, host, port...)."""
        return to_argv(self.flags)


class JobSpec(Frozen):
    campaign: str
    gpu_class: str
    model: ModelRef
    baseline: Arm
    variant: Arm
    varying: dict[str, str | None]
    prompt_mode: Literal["chat", "completion"]
    prompts: tuple[Prompt, ...]
    n_predict: int
    sampling: dict[str, Any]
    repetitions: int
    pairs: int  # at least this many block pairs
    max_pairs: int
    target_ci: float

    def arm(self, role: ArmRole) -> Arm:
        return self.baseline if role == "baseline" else self.variant

    @property
    def build(self) -> BuildRef:
        """The job's build: the baseline's (a variant may run another, e.g. a fork)."""
        return self.baseline.build

    @cached_property
    def job_key(self) -> str:
        """sha256 over exactly what makes two jobs the same experiment (sorted-key JSON)."""
        identity = {
            "campaign": self.campaign,
            "gpu_class": self.gpu_class,
            "build": self.build.name,
            "variant_build": self.variant.build.name,
            "model": self.model.name,
            "baseline_argv": self.baseline.argv,
            "variant_argv": self.variant.argv,
            "prompt_mode": self.prompt_mode,
            "prompts": [prompt.text for prompt in self.prompts],
            "n_predict": self.n_predict,
            "sampling": self.sampling,
            "design": {"repetitions": self.repetitions, "pairs": self.pairs,
                       "max_pairs": self.max_pairs, "target_ci": self.target_ci},
        }
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def varying_text(self) -> str:
        """``spec-type=ngram-simple ctx-size=-`` : what this job changes, for humans."""
        return " ".join(f"{name}={'-' if value is None else value}"
                        for name, value in self.varying.items())
