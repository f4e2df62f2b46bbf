"""The matrix a user writes, as pydantic models (v1). Keys are kebab-case, like the flags."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_snake

from farm.gpus import ClassName as ClassName  # farm.matrix.spec's too
from farm.matrix.cuda_arch import CudaArch
from farm.matrix.files import RelativeFile
from farm.matrix.flags import NGRAM_SIMPLE_SIZE_N, draft_length_flag
from farm.matrix.sources import REF_PATTERN
from farm.stats.design import MIN_DECISION_PAIRS, MIN_SECOND_STAGE, StopRule

# Most simultaneous streams one run sends (one server slot each).
MAX_CONCURRENCY = 64


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class Strict(BaseModel):
    """Unknown keys are errors; keys are spelled as in YAML (kebab-case)."""

    model_config = ConfigDict(extra="forbid", alias_generator=_kebab, frozen=True)


# The bounds a matrix and a stored job share: a node validates the job it reads from the
# database with these (farm.matrix.spec.JobSpec), as a matrix load does. A Name is one
# file name component (a build's folder is named by it): no '/', no leading '.' or '-'.
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
NPredict = Annotated[int, Field(ge=2, le=32768)]
Repetitions = Annotated[int, Field(ge=1, le=1000)]
Pairs = Annotated[int, Field(ge=1, le=100)]
TargetCi = Annotated[float, Field(gt=0.0, lt=1.0)]
Assurance = Annotated[float, Field(ge=0.5, lt=1.0)]
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]
PromptLength = Annotated[int, Field(ge=0, le=1_000_000)]
# What a block does about other work on its node (docs/busy-node.md), and the longest it
# waits for quiet, in seconds.
BusyPolicy = Literal["flag", "wait", "refuse"]
BusyWait = Annotated[float, Field(gt=0, le=86_400)]

FlagScalar = str | int | float | bool | None
FlagSpec = dict[str, FlagScalar | list[FlagScalar]]
# How a run ends: after exactly n-predict tokens (EOS ignored), or where the model stops.
StopMode = Literal["fixed", "natural"]


# A Hub repository (owner/name), a 40-hex commit, a split GGUF's first shard.
HubRepo = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$",
                               max_length=200)]
COMMIT_PATTERN = r"^[0-9a-f]{40}$"
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
SPLIT_SHARD = re.compile(r"-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_shards(file: str) -> list[str]:
    """The files of a split GGUF given by its first shard (``-00001-of-0000N.gguf``, the
    name llama.cpp's gguf-split writes; llama-server opens the first and finds the rest
    beside it); ``[file]`` for a single file."""
    match = SPLIT_SHARD.search(file)
    if match is None:
        return [file]
    stem, count = file[:match.start()], int(match["count"])
    return [f"{stem}-{index:05d}-of-{count:05d}.gguf" for index in range(1, count + 1)]


def _first_shard(file: str) -> None:
    if not file.endswith(".gguf"):
        raise ValueError(f"`file` {file!r} of an `hf` model must be a .gguf file")
    match = SPLIT_SHARD.search(file)
    if match is not None and int(match["index"]) != 1:
        raise ValueError(f"`file` {file!r} is shard {int(match['index'])} of a split GGUF: "
                         f"name its first shard, {split_shards(file)[0]!r} (llama-server "
                         "opens it and finds the others beside it)")
    if match is not None and int(match["count"]) < 1:
        raise ValueError(f"`file` {file!r}: a split GGUF has at least one shard")


class ModelEntry(Strict):
    """A model of the matrix: its name, and where its GGUF file is: a file of the models
    dir, a path (`farm run`), a file of a Hugging Face Hub repository at a revision, or a
    URL with its sha256."""

    name: Annotated[Name, Field(description="Name used in job keys and reports.")]
    path: str | None = Field(None, description="GGUF file; relative to the matrix file "
                                               "(`farm run` only).")
    file: RelativeFile | None = Field(None, description="GGUF file name inside the models dir "
                                               "(default NAME.gguf), or inside the `hf` "
                                               "repository (a split GGUF: its first shard).")
    hf: HubRepo | None = Field(None, description="Hugging Face Hub repository (owner/name) "
                               "the `file` comes from; every node downloads it itself.")
    revision: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, description="Branch, tag or commit of the `hf` repository (default main); "
                          "resolved to a commit once, at `farm submit` / `farm run`.")
    url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None = Field(
        None, description="Plain https URL of a GGUF file (give its `sha256`).")
    sha256: Sha256 | None = Field(None, description="The `url` file's sha256 (lowercase hex): "
                                                    "checked before the file is used.")

    @model_validator(mode="after")
    def _one_location(self) -> ModelEntry:
        given = [key for key, value in (("path", self.path), ("hf", self.hf),
                                        ("url", self.url)) if value is not None]
        if len(given) > 1:
            raise ValueError(f"give one of `path`, `hf` and `url`, not {' and '.join(given)}")
        if self.path is not None and self.file is not None:
            raise ValueError("give `path` (a GGUF file) or `file` (a file name inside the "
                             "models dir), not both")
        if self.hf is not None and self.file is None:
            raise ValueError("`hf` needs `file`: the GGUF file of the repository to download "
                             "(a split GGUF: its -00001-of-0000N.gguf shard)")
        if self.revision is not None and self.hf is None:
            raise ValueError("`revision` is the revision of an `hf` repository: add `hf`, "
                             "or remove `revision`")
        if (self.url is None) != (self.sha256 is None):
            raise ValueError("a `url` model needs its `sha256` (and `sha256` a `url`): the "
                             "file is checked against it before use")
        if self.hf is not None and self.file is not None:
            _first_shard(self.file)
        return self

    @property
    def file_name(self) -> str:
        """The GGUF file's name inside the models dir: ``file``, or ``NAME.gguf``."""
        return self.file or f"{self.name}.gguf"


class BuildEntry(Strict):
    """A llama-server build by name; ``path`` only for a binary the farm did not build;
    ``git`` and ``ref`` for one every worker builds itself, at the commit the ref names
    when the matrix is submitted."""

    name: Name
    path: str | None = Field(None, description="llama-server binary; default: the named "
                                               "build made by `farm provision`.")
    git: str | None = Field(None, min_length=1, max_length=1000, description=(
        "Git URL or repository to build from (workers build only sources their operator "
        "allows: `sources:` in their config)."))
    ref: Annotated[str, Field(pattern=REF_PATTERN, max_length=250)] | None = Field(
        None, description="Branch, tag, pull/N/head or commit of `git`; resolved to a commit "
                          "once, when the matrix is run or submitted.")
    backend: Literal["cpu", "cuda", "metal", "vulkan"] = Field(
        "cpu", description="ggml backend to build (with `git`).")
    cuda_arch: CudaArch | None = Field(
        None, description="CMAKE_CUDA_ARCHITECTURES, e.g. 86 or 86;89; default: the "
                          "worker's GPU (its compute capability).")
    cmake: list[str] = Field(default_factory=list, description="Extra -DNAME=VALUE options.")

    @model_validator(mode="after")
    def _source_or_binary(self) -> BuildEntry:
        if self.git is not None and self.path is not None:
            raise ValueError("give `git` (a source every worker builds) or `path` (a binary), "
                             "not both")
        if (self.git is None) != (self.ref is None):
            raise ValueError("`git` and `ref` go together: the source and the branch, tag, "
                             "pull/N/head or commit to build")
        if self.git is None and (self.cmake or self.cuda_arch or self.backend != "cpu"):
            raise ValueError("`backend`, `cuda-arch` and `cmake` describe a build from "
                             "source: give `git` and `ref` too, or remove them")
        if self.cuda_arch is not None and self.backend != "cuda":
            raise ValueError("`cuda-arch` applies to `backend: cuda` only")
        return self


class PromptEntry(Strict):
    """A prompt with the id its runs are stored under, and a category for reports."""

    id: Name
    text: Annotated[str, Field(min_length=1)]
    category: str = "general"


class Sampling(Strict):
    """Sampling sent with every request; ``None`` fields are left out: llama-server's default."""

    temperature: float = Field(0.0, ge=0.0)
    seed: int = 42
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(None, gt=0.0)

    def request_fields(self) -> dict[str, Any]:
        """The fields a llama-server request takes, snake_case as its API spells them."""
        return {to_snake(key): value
                for key, value in self.model_dump(by_alias=False).items() if value is not None}

    @classmethod
    def check_request_fields(cls, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` if they are what ``request_fields`` makes (a stored job's sampling);
        ValueError naming what is not."""
        known = set(cls.model_fields)
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(f"sampling: unknown fields {unknown}; a job's sampling has only "
                             f"{sorted(known)}")
        cls.model_validate({_kebab(key): value for key, value in fields.items()})
        return fields


class Variant(Strict):
    """One arm against the baseline: flags on top of the baseline's; a list value sweeps a flag."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")]
    flags: FlagSpec = Field(default_factory=dict,
                            description="Added to or overriding the baseline; null removes.")
    args: str | None = Field(None, description="Extra flags as one string, split like a shell.")
    build: str | BuildEntry | None = Field(
        None, description="Run this arm on another build (e.g. a fork); default the baseline's.")
    control: bool = Field(False, description="An A/A arm: the baseline's own flags again, to "
                          "measure this machine's noise floor; changes no flag.")


class EngineCurve(Strict):
    """Synthetic-acceptance arms that measure what the engine delivers at each acceptance:
    one arm per draft length x acceptance length (``--spec-synth-len``), against the
    baseline. Lengths above draft length + 1 cannot happen and are left out."""

    spec_type: Annotated[str, Field(min_length=1, description="The speculation whose cost is "
                                    "measured, e.g. draft-mtp or ngram-simple.")]
    draft_n_max: Annotated[list[Annotated[int, Field(ge=1, le=64)]], Field(
        min_length=1, description="Draft lengths, one curve each: --spec-draft-n-max, or "
                                  "the n-gram type's own size (farm.matrix.flags).")]
    synth_len: Annotated[list[Annotated[float, Field(ge=1.0, le=65.0)]], Field(
        min_length=1, description="Mean acceptance lengths, the target token included "
                                  "(--spec-synth-len): 1 accepts nothing.")]
    flags: FlagSpec = Field(default_factory=dict, description="More flags for every arm of "
                            "the curve (e.g. the drafter's model).")

    @model_validator(mode="after")
    def _lengths_drafted(self) -> EngineCurve:
        name, default = NGRAM_SIMPLE_SIZE_N
        size_n = self.flags.get(name, default)
        if self.spec_type == "ngram-simple" and isinstance(size_n, int | str) \
                and min(self.draft_n_max) < int(size_n):
            raise ValueError(
                f"ngram-simple drafts only m-grams at least as long as its lookup n-gram "
                f"(--{name}, {size_n}), so draft-n-max {min(self.draft_n_max)} would never "
                f"draft: give draft lengths of {size_n} or more, or set {name} in the "
                "curve's flags")
        return self

    def arms(self) -> list[Variant]:
        """One variant per draft length, sweeping the acceptance lengths it can reach."""
        arms = []
        for n_max in dict.fromkeys(self.draft_n_max):
            # 2, not 2.0: the flag's value and the arm's name as the user wrote them.
            lengths: list[FlagScalar] = [int(length) if length.is_integer() else length
                                         for length in dict.fromkeys(self.synth_len)
                                         if length <= n_max + 1]
            if lengths:
                arms.append(Variant(name=f"engine-curve-n{n_max}", flags={
                    **self.flags, "spec-type": self.spec_type,
                    draft_length_flag(self.spec_type): n_max, "spec-synth-len": lengths}))
        return arms


class Tune(Strict):
    """A race over settings (`farm tune`, docs/tune.md): every combination of the `space`
    flags' values is a candidate against the baseline; candidates run a few pairs each,
    the ones shown slower than the leader by more than `epsilon` drop out, the rest run on
    until one setting is named within `epsilon` of the fastest."""

    space: Annotated[FlagSpec, Field(min_length=1, description=(
        "The candidates' flags on top of the baseline's; a list sweeps a flag, every "
        "combination being a candidate."))]
    epsilon: float = Field(0.02, gt=0.0, lt=0.5, description=(
        "The margin within which any setting is a fair choice (0.02 = 2%)."))
    budget_pairs: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Most block pairs in all (default: every candidate at max-pairs).")
    budget_minutes: Annotated[float, Field(gt=0, le=100_000)] | None = Field(
        None, description="Most minutes in all, made pairs at the first round's pace.")
    max_pairs: Annotated[int, Field(ge=4, le=100, multiple_of=2)] = Field(
        24, description="Most block pairs one candidate runs (an even number: a round adds "
                        "one pair of each order).")

    @model_validator(mode="after")
    def _no_empty_sweep(self) -> Tune:
        for name, value in self.space.items():
            if isinstance(value, list) and not value:
                raise ValueError(f"space: {name} sweeps no value; give one or more")
        if self.budget_pairs is not None and self.budget_minutes is not None:
            raise ValueError("give budget-pairs or budget-minutes, not both")
        return self

    def arms(self) -> list[Variant]:
        """The space as one variant whose lists sweep (one job per candidate)."""
        return [Variant(name="tune", flags=self.space)]


class Matrix(Strict):
    """A campaign as the user writes it: models, builds, prompts, the baseline, variants, design."""

    campaign: Name
    build: str | BuildEntry | list[str | BuildEntry] = Field(
        "cpu", description="llama-server build name, {name, path}, or a source every worker "
                           "builds ({name, git, ref, backend, cuda-arch, cmake}); a list "
                           "sweeps builds.")
    gpu_classes: list[ClassName] = Field(
        default_factory=lambda: ["default"], min_length=1,
        description="GPU classes to run every job on (one queue each, gpu.CLASS).")
    models: Annotated[list[ModelEntry], Field(min_length=1)]
    draft_models: list[ModelEntry] = Field(
        default_factory=list, description="Draft models from the Hub or a URL, downloaded "
        "like `models`; a flag names one by its name (`spec-draft-model: NAME`).")
    prompt_mode: Literal["chat", "completion"] = "chat"
    prompts: list[str | PromptEntry] = Field(default_factory=list)
    prompt_file: str | None = Field(None, description="YAML list of prompts, like `prompts`.")
    prompt_suite: list[str] | Literal["all"] | None = Field(
        None, description="Categories of the built-in suite (farm/prompts/suite.yaml), or all.")
    n_predict: NPredict = Field(128, description="Tokens generated per run.")
    stop: StopMode = Field("fixed", description="fixed: exactly n-predict tokens per run (EOS "
                           "ignored); natural: the model stops at EOS, n-predict is a cap.")
    repetitions: Repetitions = Field(3, description="Runs per prompt per block.")
    busy_node: BusyPolicy = Field("flag", description="Other work on the node (CPU of other "
                                  "processes, another process on the GPU): flag only marks "
                                  "its blocks; wait holds each block until the node is "
                                  "quiet, at most busy-wait s; refuse fails the block, to be "
                                  "retried.")
    busy_wait: BusyWait = Field(600, description="Longest a block waits for quiet, seconds "
                                "(busy-node: wait).")
    prompt_length: PromptLength | Annotated[list[PromptLength], Field(min_length=1)] = Field(
        0, description="About this many tokens of a bundled document (farm/prompts/documents) "
                       "before every prompt, 0 for none; a list sweeps it, one job per value.")
    concurrency: Concurrency | Annotated[list[Concurrency], Field(min_length=1)] = Field(
        1, description="Simultaneous streams per run, against a server with as many slots "
                       "(--parallel); a list sweeps it, one job per value.")
    # How many pairs (docs/statistics.md "How many pairs"): the decision and precision
    # designs look after each pair (farm.stats.sequential); the two-stage rule's first stage
    # fixes the number of pairs, its second stage measures the interval (farm.stats.twostage).
    stop_rule: StopRule = Field(
        "precision", description="decision: after `pairs` (4 or more), stop once \"is it "
        "faster?\" is answered (faster, slower, or within ±target-ci), at most max-pairs; "
        "precision: after `pairs` (4 at least), stop once the interval is within "
        "±target-ci, at most max-pairs (two-stage with target-assurance); two-stage: the "
        "first stage plans the pairs that meet target-ci (the design before precision); "
        "fixed: `pairs` pairs.")
    pairs: Pairs = Field(4, description="First stage: block pairs (AB, BA, ...) every job "
                                        "runs before it looks (or plans the rest).")
    max_pairs: Pairs = Field(12, description="Most block pairs per job; equal to `pairs` for "
                             "a fixed number; a two-stage design's at least `pairs` + 4.")
    target_ci: TargetCi = Field(0.03, description="The speedup interval's half-width a "
                                "precision design runs to (0.03 = ±3%); a decision design's "
                                "equivalence margin.")
    target_assurance: Assurance | None = Field(
        None, description="Two-stage: plan the fewest pairs whose interval meets "
        "`target-ci` with this probability (0.9: nine jobs in ten), then run on until it "
        "does; unset, a two-stage design plans as if the first stage's spread were exact, "
        "which meets it about six times in ten.")
    sampling: Sampling = Field(default_factory=Sampling)
    flags: FlagSpec = Field(default_factory=dict, description="The baseline's flags.")
    args: str | None = None
    variants: list[Variant] = Field(default_factory=list)
    engine_curve: EngineCurve | None = Field(
        None, description="Shorthand for synthetic-acceptance variants: the engine's speedup "
                          "per draft length and acceptance length.")
    tune: Tune | None = Field(None, description="A race for the fastest of many settings "
                              "instead of variants (`farm tune`, docs/tune.md).")

    @model_validator(mode="after")
    def _draft_models_remote(self) -> Matrix:
        for entry in self.draft_models:
            if entry.hf is None and entry.url is None:
                raise ValueError(f"draft-models: {entry.name!r} has no `hf` or `url`; a draft "
                                 "model of the models dir is named by its file in the flag "
                                 "(`spec-draft-model: FILE`), not listed here")
        return self

    @model_validator(mode="after")
    def _pairs_in_order(self) -> Matrix:
        if self.tune is not None and (self.variants or self.engine_curve is not None):
            raise ValueError("a `tune` matrix races its `space`: remove `variants` and "
                             "`engine-curve`")
        if not self.variants and self.engine_curve is None and self.tune is None:
            raise ValueError("give `variants` (at least one), an `engine-curve` or `tune`")
        if self.engine_curve is not None and not self.engine_curve.arms():
            raise ValueError("engine-curve: every synth-len is above draft-n-max + 1, which no "
                             "draft reaches; give lengths from 1 to the largest draft-n-max + 1")
        return self

    @model_validator(mode="after")
    def _design_fits_its_rule(self) -> Matrix:
        if self.stop_rule == "fixed":
            if "max_pairs" in self.model_fields_set and self.max_pairs != self.pairs:
                raise ValueError(f"stop-rule fixed runs `pairs` ({self.pairs}) pairs: remove "
                                 f"max-pairs ({self.max_pairs}) or set it to {self.pairs}")
            return self
        if self.max_pairs < self.pairs:
            raise ValueError(f"max-pairs ({self.max_pairs}) must be >= pairs ({self.pairs})")
        if self.stop_rule == "decision":
            if self.pairs < MIN_DECISION_PAIRS:
                raise ValueError(f"stop-rule decision looks from pairs ({self.pairs}) on, "
                                 f"which must be {MIN_DECISION_PAIRS} or more (the crossover "
                                 "fit's first interval)")
            return self
        if self.stop_rule == "precision" and self.target_assurance is None:
            return self  # it looks from max(pairs, 4) on
        if self.pairs < self.max_pairs < self.pairs + MIN_SECOND_STAGE:
            raise ValueError(f"max-pairs ({self.max_pairs}) leaves a second stage of fewer than "
                             f"{MIN_SECOND_STAGE} pairs: set it to {self.pairs} (a fixed number "
                             f"of pairs) or to {self.pairs + MIN_SECOND_STAGE} or more")
        if self.pairs < 3 < self.max_pairs:
            raise ValueError(f"pairs ({self.pairs}) is too small a first stage to plan a "
                             "second: set pairs to 3 or more, or max-pairs equal to pairs")
        return self

    @property
    def most_pairs(self) -> int:
        """The most pairs a job runs: `pairs` with stop-rule fixed, else max-pairs."""
        return self.pairs if self.stop_rule == "fixed" else self.max_pairs

    def concurrencies(self) -> list[int]:
        """``concurrency`` as a list of distinct values, in the order written."""
        return _distinct(self.concurrency)

    def prompt_lengths(self) -> list[int]:
        """``prompt-length`` as a list of distinct values, in the order written."""
        return _distinct(self.prompt_length)

    def all_variants(self) -> list[Variant]:
        """``variants``, then the arms ``engine-curve`` expands to, or ``tune``'s space."""
        return [*self.variants, *(self.engine_curve.arms() if self.engine_curve else []),
                *(self.tune.arms() if self.tune else [])]

    def build_entries(self) -> list[BuildEntry]:
        """``build`` as a list of entries, a bare name becoming ``{name}``."""
        builds = self.build if isinstance(self.build, list) else [self.build]
        return [entry if isinstance(entry, BuildEntry) else BuildEntry(name=entry)
                for entry in builds]


def _distinct(value: int | list[int]) -> list[int]:
    return list(dict.fromkeys(value if isinstance(value, list) else [value]))


def json_schema() -> dict[str, Any]:
    """The matrix's JSON Schema (draft 2020-12), made from ``Matrix``: every key with its
    type and description, unknown keys refused. Checks across keys (and the flags' names
    and values) stay the loader's."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **Matrix.model_json_schema(by_alias=True), "title": "specfarm matrix"}
