"""A job: one comparison, baseline arm vs one variant arm, identified by ``job_key``."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from farm.errors import ConfigError
from farm.matrix.cuda_arch import CudaArch
from farm.matrix.files import RelativeFile
from farm.matrix.flags import FlagValue, to_argv, varying_text
from farm.matrix.schema import (
    COMMIT_PATTERN,
    Assurance,
    BusyPolicy,
    BusyWait,
    ClassName,
    Concurrency,
    HubRepo,
    Name,
    NPredict,
    Pairs,
    PromptLength,
    Repetitions,
    Sampling,
    Sha256,
    StopMode,
    TargetCi,
)
from farm.matrix.sources import REF_PATTERN, check_cmake_option
from farm.stats.design import Design, StopRule
from farm.summary import JobKind

ArmRole = Literal["baseline", "variant"]


class Frozen(BaseModel):
    """Base of the spec models: immutable, and unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Prompt(Frozen):
    """One prompt of a job, from the matrix, a prompt file or the built-in suite."""

    id: Name
    text: str
    category: str


def _without_empty(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A stored spec without the optional ``keys`` it leaves unset (None or empty)."""
    return {key: value for key, value in data.items() if key not in keys or value}


class RemoteFile(Frozen):
    """One file a node downloads for a model (a split GGUF has several): its name in the
    repository (or the URL's), its size and its sha256 as the source states them."""

    name: RelativeFile
    sha256: Sha256
    size: Annotated[int, Field(ge=0)] | None = None


class ModelRef(Frozen):
    """A model by name; ``path`` is set once resolved on the machine that runs the job.

    A Hub model (``hf``) names its repository, the ``revision`` as written until `farm
    submit` / `farm run` pin it to a commit, and then the ``files`` to download with the
    Hub's sha256 of each; a URL model its ``url`` and the one file's sha256.
    """

    name: Name
    file: RelativeFile | None = None
    path: str | None = None  # as the matrix wrote it (`farm run`), or the file resolved
    hf: HubRepo | None = None
    revision: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    url: str | None = None
    files: tuple[RemoteFile, ...] = ()

    @model_serializer(mode="wrap")
    def _without_absent_source(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A local model is stored as it always was ({name, file, path}): specs, and the
        # frozen migrations that read them, stay as they were.
        return _without_empty(handler(self), ("hf", "revision", "url", "files"))

    @property
    def local_path(self) -> str:
        """The resolved file; a ConfigError if the job was not resolved on this machine."""
        if self.path is None:
            raise ConfigError(f"model {self.name!r} is not resolved to a file on this machine")
        return self.path

    @property
    def remote(self) -> bool:
        """Whether nodes download the model (from the Hub or a URL)."""
        return self.hf is not None or self.url is not None

    @property
    def pinned(self) -> bool:
        """Whether a remote model names exactly the bytes to download: a Hub model's
        revision is a commit and each file has its sha256 (local models are always)."""
        if self.hf is not None:
            return re.fullmatch(COMMIT_PATTERN, self.revision or "") is not None \
                and bool(self.files)
        return self.url is None or bool(self.files)

    @property
    def source(self) -> str:
        """Where the model comes from, for messages: ``repo@revision file``, the URL, or
        the file name."""
        if self.hf is not None:
            return f"{self.hf}@{self.revision or 'main'} {self.file}"
        return self.url or self.path or self.file or f"{self.name}.gguf"

    @property
    def provenance(self) -> str | None:
        """Where a downloaded model's bytes came from, for each run's row:
        ``OWNER/NAME@COMMIT`` (the file is the run's model_file) or the URL; None for a
        local model."""
        if self.hf is not None:
            return f"{self.hf}@{self.revision}"
        return self.url

    def identity(self) -> dict[str, Any]:
        """What makes a remote model these bytes, for the job key (empty for a local one)."""
        if self.hf is not None:
            return {"hf": self.hf, "revision": self.revision, "file": self.file}
        if self.url is not None:
            return {"url": self.url, "sha256": [item.sha256 for item in self.files]}
        return {}


# A node keeps the builds it made from a job's source under names with this prefix.
SOURCE_BUILD_PREFIX = "src-"


class BuildSource(Frozen):
    """A build every worker makes itself: the source, the ref as written, the commit it
    named when the matrix was loaded, the backend and the extra cmake options."""

    git: Annotated[str, Field(min_length=1, max_length=1000)]
    ref: Annotated[str, Field(pattern=REF_PATTERN, max_length=250)]
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
    backend: Literal["cpu", "cuda", "metal", "vulkan"] = "cpu"
    cuda_arch: CudaArch | None = None  # None: the worker's GPUs' compute capabilities
    cmake: tuple[str, ...] = ()

    @field_validator("cmake")
    @classmethod
    def _options(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_cmake_option(arg, "cmake") for arg in value)

    @property
    def identity(self) -> dict[str, Any]:
        """What makes it one build wherever it is made (the ref as written is not)."""
        return {"git": self.git, "commit": self.commit, "backend": self.backend,
                "cuda_arch": self.cuda_arch, "cmake": list(self.cmake)}

    @property
    def local_name(self) -> str:
        """The name a node keeps this build under (``farm builds``): one per identity."""
        return f"{SOURCE_BUILD_PREFIX}{self.commit[:12]}-{_sha256(self.identity)[:8]}"


class BuildRef(Frozen):
    """A llama-server build by name; ``path`` is set once resolved to a binary; ``source``
    for a build every worker makes from a commit."""

    name: Name
    path: str | None = None
    source: BuildSource | None = None

    @model_serializer(mode="wrap")
    def _without_absent_source(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A build by name is stored as it always was ({name, path}): specs, and the frozen
        # migrations that read them, stay as they were.
        return _without_empty(handler(self), ("source",))

    @property
    def key_part(self) -> str | dict[str, Any]:
        """The build as job keys name it: its name, and for a source build its identity
        too (named builds keep the keys they had)."""
        return self.name if self.source is None else {"name": self.name,
                                                      **self.source.identity}

    @property
    def local_path(self) -> str:
        """The resolved binary; a ConfigError if the job was not resolved on this machine."""
        if self.path is None:
            raise ConfigError(f"build {self.name!r} is not resolved to a binary on this machine")
        return self.path


# llama.cpp's benchmarking-only flags that force an acceptance pattern.
SYNTHETIC_PREFIX = "spec-synth-"


# The flags that make an arm speculate.
SPECULATIVE_FLAGS = frozenset({"spec-type", "spec-draft-model"})


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

    @property
    def speculates(self) -> bool:
        """Whether the arm's flags request speculative decoding of any kind."""
        return any(name in SPECULATIVE_FLAGS and value not in (False, "none")
                   for name, value in self.flags)


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
    # How the job decides it has enough pairs; a job stored before stop rules were written
    # ran the two-stage design (a matrix's jobs are given their matrix's rule).
    stop_rule: StopRule = "two-stage"
    control: bool = False  # an A/A job: the variant is the baseline again
    stop: StopMode = "fixed"  # natural: no ignore_eos, n_predict a cap
    concurrency: Concurrency = 1  # simultaneous streams per run, one server slot each
    prompt_length: PromptLength = 0  # tokens of the bundled document before each prompt, about
    # How a block meets other work on the node; not in the job's key: it changes when a
    # block runs, not what it measures.
    busy_node: BusyPolicy = "flag"
    busy_wait: BusyWait = 600.0
    # Draft models from the Hub or a URL that the arms' flags name (`spec-draft-model:
    # NAME`): downloaded like the model, the flag then given the file.
    draft_models: tuple[ModelRef, ...] = ()

    @model_serializer(mode="wrap")
    def _without_absent_drafts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A job without draft models is stored as before (the frozen migrations read it).
        return _without_empty(handler(self), ("draft_models",))

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
    def cross_build(self) -> bool:
        """Whether the job compares two commits of one build with the same flags in both
        arms (the newer build over the older: ``farm track --paired``, ``farm bisect``)."""
        return (not self.control and self.baseline.argv == self.variant.argv
                and self.baseline.build.name == self.variant.build.name
                and self.baseline.build.key_part != self.variant.build.key_part)

    @property
    def kind(self) -> JobKind:
        """What the job measures: "control" (A/A: the machine's noise floor), "builds" (one
        arm's flags on two commits: the newer build's speed over the older's), "synthetic"
        (the engine's cost at a forced acceptance, not a drafter's speedup) or "variant"."""
        if self.control:
            return "control"
        return "builds" if self.cross_build else "synthetic" if self.synthetic else "variant"

    @property
    def outputs_differ(self) -> str | None:
        """Why the arms' outputs need not match, if they need not: then agreement does
        not apply."""
        if self.synthetic:
            return "synthetic acceptance (engine cost): the variant's output is not valid"
        if float(self.sampling.get("temperature") or 0.0) > 0.0:
            return "temperature > 0: outputs are not expected to match"
        return None

    @model_validator(mode="after")
    def _pairs_a_design_runs(self) -> JobSpec:
        """Pairs that no design runs (a crafted bundle's spec) are refused here, by Design's
        own checks and this one, not when a report reads them."""
        if self.design.least_pairs > self.max_pairs:
            raise ValueError(f"max_pairs ({self.max_pairs}) is below the fewest pairs the "
                             f"design runs ({self.design.least_pairs})")
        return self

    @property
    def design(self) -> Design:
        """How many block pairs the job runs: its first stage, maximum, target, assurance and
        stop rule."""
        return Design(self.pairs, self.max_pairs, self.target_ci, self.target_assurance,
                      self.stop_rule)

    def arm(self, role: ArmRole) -> Arm:
        """The baseline or the variant arm."""
        return self.baseline if role == "baseline" else self.variant

    @property
    def build(self) -> BuildRef:
        """The job's build: the baseline's (a variant may run another, e.g. a fork)."""
        return self.baseline.build

    def _experiment(self, both: ArmRole | None = None) -> dict[str, Any]:
        """What the two arms measure, wherever, whenever and on whichever build they run;
        ``both``: as if that arm's flags ran in both arms."""
        baseline, variant = (self.baseline, self.variant) if both is None else (
            self.arm(both), self.arm(both))
        return {
            "gpu_class": self.gpu_class,
            "model": self.model.name,
            "baseline_argv": baseline.argv,
            "variant_argv": variant.argv,
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
            "build": self.build.key_part,
            "variant_build": self.variant.build.key_part,
            "design": {"repetitions": self.repetitions, "pairs": self.pairs,
                       "max_pairs": self.max_pairs, "target_ci": self.target_ci,
                       # Only when set, so that every other job keeps its key.
                       **({"target_assurance": self.target_assurance}
                          if self.target_assurance is not None else {}),
                       # Only a decision design: a fixed one is pairs == max_pairs, as before.
                       **({"stop_rule": self.stop_rule}
                          if self.stop_rule == "decision" else {})},
            # Only when set, so that the keys of every other job stay as they were.
            **({"control": True} if self.control else {}),
            # A downloaded model is the bytes of its source (a Hub model: repository,
            # commit and file); a local one keeps its key.
            **({"model_source": self.model.identity()} if self.model.remote else {}),
            **({"draft_models": {model.name: model.identity() for model in self.draft_models}}
               if self.draft_models else {}),
        })

    @cached_property
    def comparable_key(self) -> str:
        """sha256 over what makes two jobs' speedups comparable: ``job_key`` without the
        campaign, the build and the design, so that a rerun, another build of one campaign
        or a longer design lines up with the first. A variant on its own build (a fork)
        keeps that build's name: it is what the variant is. A job across builds has its
        arm's ``cross_key``, whichever two commits it compares."""
        if self.cross_build:
            return self.cross_key("baseline")
        fork = None if self.variant.build.name == self.build.name else self.variant.build.name
        return _sha256({**self._experiment(), "variant_build": fork})

    def cross_key(self, role: ArmRole) -> str:
        """The comparable key of the jobs that run this job's ``role`` arm on two commits
        of its build (``JobSpec.cross_build``): how a history finds them."""
        return _sha256({**self._experiment(role), "variant_build": None, "cross_build": True})

    @property
    def varying_text(self) -> str:
        """What this job changes, for humans (``farm.matrix.flags.varying_text``)."""
        return varying_text(self.varying)


def _sha256(identity: dict[str, Any]) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
