"""Matrices the farm writes for a user: ``farm init``'s commented starters, and the matrix of
``farm ab`` (one model, the baseline's flags, the variant's, the default design)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.matrix.files import CONTROL_PROBLEM, file_problem, near_names, under
from farm.matrix.flags import FlagValue, parse_args
from farm.matrix.options import canonical, check_value, refusal, value_type
from farm.matrix.schema import FlagScalar

STARTER = """\
# A matrix: one model, a baseline and the variants to compare with it, the prompts, and how
# many times to run them. `farm run matrix.yaml` runs it here; `farm submit matrix.yaml`
# sends it to a fleet. Every key: docs/matrix.md; `farm schema` lets an editor check it.
campaign: my-first-campaign       # results are stored and reported under this name
build: cpu                        # a llama-server build: `farm builds` lists them
models:
  - name: smollm2-135m            # a name for reports
    file: SmolLM2-135M-Instruct.Q4_1.gguf   # in the models dir (`farm paths`), or path: FILE
prompt-mode: chat                 # chat (the model's template) or completion (raw text)
prompt-suite: [tutorial]          # built-in prompts by category; or prompts: [text, ...]
n-predict: 64                     # tokens generated per run
repetitions: 1                    # runs per prompt per block
pairs: 3                          # block pairs (AB, BA, ...) every job runs first; the farm
max-pairs: 12                     # adds pairs up to this until the speedup is known to ±3%
flags:                            # the baseline's llama-server flags (long names, no --)
  ctx-size: 4096
  threads: 2
variants:                         # each one is a job: the baseline vs these flags on top
  - name: ngram
    flags:
      spec-type: ngram-simple
  - name: ngram-short             # a list sweeps a flag: one job per value
    flags:
      spec-type: ngram-simple
      spec-ngram-simple-size-n: [3, 4]
"""

ENGINE_CURVE_STARTER = """\
# What the engine delivers at each acceptance, and the drafter's real acceptance: after
# `farm run curve.yaml`, `farm curve` shows the speedup per draft length and acceptance
# length, and `farm recommend` the draft length to use (docs/results.md). The model is the
# MTP oracle `farm provision` builds; put your own GGUF and spec type in its place.
campaign: my-engine-curve
build: cpu
models:
  - name: qwen35-mtp-oracle-cpu
    file: qwen35-mtp-oracle-cpu.gguf
prompt-mode: completion
prompts:                          # two at least: a prediction's interval has prompts as clusters
  - {id: greeting, text: "Hello! How are you today?"}
  - {id: game, text: "Build a simple game in Python."}
n-predict: 64
repetitions: 1
pairs: 3                          # a fixed number of block pairs per job
max-pairs: 3
flags:
  ctx-size: 1024
  threads: 2
variants:                         # the real drafter, whose acceptance `farm recommend` reads
  - name: drafter
    flags:
      spec-type: draft-mtp
      spec-draft-n-max: 3
engine-curve:                     # synthetic acceptance: one job per draft x acceptance length
  spec-type: draft-mtp
  draft-n-max: [2, 3]             # draft lengths, a curve each (three points at least)
  synth-len: [1, 2, 3, 4]         # mean accepted length, the target token included
"""


def _name(text: str) -> str:
    """``text`` as a matrix name: letters, digits, ``_.-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-._")[:120] or "model"


def model_entry(model: str, models_dir: Path) -> dict[str, str]:
    """A ``models:`` entry for a GGUF given by path or by its name in the models dir, its
    ``.gguf`` optional as a matrix's model ``name`` finds its file (``SmolLM2.Q4_1`` is
    ``SmolLM2.Q4_1.gguf``): a ``file`` of the models dir where it lies there (a fleet finds
    it the same way), else its absolute ``path``."""
    if file_problem(model) == CONTROL_PROBLEM:  # a name that would forge the error's lines
        raise ConfigError(f"farm ab: the model {model!r} {CONTROL_PROBLEM}; give the GGUF's "
                          "path or its name in the models dir")
    place = next((path for path in _model_places(model, models_dir) if path.is_file()), None)
    if place is None:
        given = Path(model).name
        near = " or ".join(repr(name) for name in near_names(
            models_dir, given if given.endswith(".gguf") else f"{given}.gguf"))
        raise ConfigError(f"{model}: no such GGUF file, here or in the models dir "
                          f"{models_dir} (FARM_MODELS_DIR); " + (
                              f"did you mean {near}? (`farm paths` lists the models)" if near
                              else "give its path"))
    place = place.resolve()
    name = _name(place.name.removesuffix(".gguf"))
    if place.parent == models_dir.resolve():
        return {"name": name, "file": place.name}
    return {"name": name, "path": str(place)}


def _model_places(model: str, models_dir: Path) -> Iterator[Path]:
    """Where ``model`` may be, in order: as a path, in the models dir; each as given, then
    with ``.gguf`` added where it has none."""
    for given in (model, *(() if model.endswith(".gguf") else (f"{model}.gguf",))):
        yield Path(given).expanduser()
        if file_problem(given) is None:
            yield under(models_dir, given, what="model")


def flag_map(text: str, where: str) -> dict[str, Any]:
    """Flags as typed on a command line (``--spec-type draft-mtp -ngl 99``, split like a
    shell), as a matrix's ``flags:``: names without dashes, numbers as numbers, a switch
    ``true``. Each is checked as a matrix's flags are (on the farm's list of options, its
    value of the shape the option takes, one spelling per option), the error naming it as
    typed after ``where`` (``farm ab``): the matrix it goes into is no file of the user's."""
    flags: dict[str, Any] = {}
    typed: dict[str, str] = {}
    for raw, value in parse_args(text, where) if text.strip() else []:
        name = _typed_flag(raw, value, where)
        if name in typed:
            raise ConfigError(f"{where}: {typed[name]} and {raw} set one option (--{name}); "
                              "give it once")
        typed[name] = raw
        flags[raw.lstrip("-")] = _number(value)
    return flags


def _typed_flag(raw: str, value: FlagValue, where: str) -> str:
    """The canonical name of the flag typed ``raw``; ConfigError naming it as typed and
    why a job may not pass it (``farm.matrix.options``)."""
    name = canonical(raw, where)
    reason = refusal(name)
    if reason is not None:
        # The reason names the option's long form: the spelling typed goes before it.
        raise ConfigError(f"{where}: {reason}" if raw == f"--{name}"
                          else f"{where}: {raw}: {reason}")
    check_value(value_type(name), value, f"{where}: {raw}")
    return name


def _number(value: FlagValue) -> FlagScalar:
    """``"3"`` as 3 and ``"0.5"`` as 0.5, as a matrix writes them; anything else as given."""
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d*\.\d+", value):
        return float(value)
    return value


def ab_matrix(model: dict[str, str], baseline: dict[str, Any], variant: dict[str, Any], *,
              design: dict[str, Any], build: str, gpu_class: str = "default") -> dict[str, Any]:
    """The matrix of one A/B: the model, the baseline's flags, one variant, ``design``
    (keys such as ``pairs``, ``n-predict``, ``prompt-suite``), on this machine's
    ``gpu_class``. Its campaign is named after the model and a hash of everything else, so
    the same A/B is the same campaign."""
    if not variant:
        raise ConfigError("farm ab: give the variant's flags after `--`, e.g. "
                          "`farm ab MODEL -- --spec-type draft-mtp --spec-draft-n-max 3`")
    base = _by_option(baseline)
    if all(base.get(name) == value for name, value in _by_option(variant).items()):
        raise ConfigError("farm ab: the variant's flags (after `--`) set what the baseline "
                          "sets already; give flags that change it, e.g. `-- --spec-type "
                          "ngram-simple`")
    body: dict[str, Any] = {
        "build": build, "models": [model], **design, "flags": baseline,
        **({"gpu-classes": [gpu_class]} if gpu_class != "default" else {}),
        "variants": [{"name": _name(str(variant.get("spec-type", "variant"))),
                      "flags": variant}]}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    return {"campaign": f"ab-{model['name']}-{digest}", **body}


def _by_option(flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` keyed by the option each sets (``c`` and ``ctx-size`` are one)."""
    return {canonical(raw, raw): value for raw, value in flags.items()}
