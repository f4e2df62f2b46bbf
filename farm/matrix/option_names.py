"""Every spelling of a llama-server option, mapped to the one name the farm's lists use.

Names are canonical before any list is read: every alias of b11434 maps to its long
name (``ALIASES``: ``-ngl`` -> ``n-gpu-layers``, ``-mm`` -> ``mmproj``, ``-nkvo`` ->
``no-kv-offload``), a negated switch to the option it negates (``NEGATIONS``), and a
removed name to its successor (``FLAG_RENAMES``): the rules ``farm.matrix.options``
checks a job's options by and ``workers.job.runtime.probe`` applies to any build's help.
"""

from __future__ import annotations

# Every other spelling of b11434's options -> its canonical name: the first long name
# (``--n-...`` when the build also spells it so: -ngl's --gpu-layers, --n-gpu-layers), and
# for a negated switch the first long negative (-nkvo -> no-kv-offload). The old spellings
# of a draft model's options follow a rule (``_draft_spellings``), the rest are listed.
_LISTED: dict[str, str] = {
    "h": "help", "usage": "help", "cl": "cache-list", "t": "threads", "tb": "threads-batch",
    "C": "cpu-mask", "Cr": "cpu-range", "Cb": "cpu-mask-batch", "Crb": "cpu-range-batch",
    "c": "ctx-size", "n": "n-predict", "predict": "n-predict", "b": "batch-size",
    "ub": "ubatch-size", "fa": "flash-attn", "e": "escape", "kvo": "kv-offload",
    "nkvo": "no-kv-offload", "nr": "no-repack", "ctk": "cache-type-k", "ctv": "cache-type-v",
    "dt": "defrag-thold", "lm": "load-mode", "lzm": "lazy-mode", "dev": "device",
    "ot": "override-tensor", "cmoe": "cpu-moe", "ncmoe": "n-cpu-moe", "ncffn": "n-cpu-ffn",
    "ngl": "n-gpu-layers", "gpu-layers": "n-gpu-layers", "sm": "split-mode", "ts": "tensor-split",
    "mg": "main-gpu", "fitt": "fit-target", "fitc": "fit-ctx", "m": "model", "mu": "model-url",
    "dr": "docker-repo", "hf": "hf-repo", "hfr": "hf-repo", "hff": "hf-file", "hft": "hf-token",
    "v": "verbose", "log-verbose": "verbose", "lv": "verbosity", "log-verbosity": "verbosity",
    "s": "seed", "sampling-seq": "sampler-seq", "temperature": "temp", "top-n-sigma": "top-nsigma",
    "typical-p": "typical", "l": "logit-bias", "j": "json-schema", "jf": "json-schema-file",
    "bs": "backend-sampling", "spec-draft-ncmoe": "spec-draft-n-cpu-moe",
    "draft-p-split": "spec-draft-p-split", "draft-p-min": "spec-draft-p-min", "draft-n": "draft",
    "draft-max": "draft", "draft-n-min": "draft-min", "lcs": "lookup-cache-static",
    "lcd": "lookup-cache-dynamic", "ctxcp": "ctx-checkpoints", "swa-checkpoints": "ctx-checkpoints",
    "cms": "checkpoint-min-step", "cram": "cache-ram", "kvu": "kv-unified",
    "no-kvu": "no-kv-unified", "r": "reverse-prompt", "sp": "special", "np": "parallel",
    "cb": "cont-batching", "nocb": "no-cont-batching", "mm": "mmproj", "mmu": "mmproj-url",
    "no-mmproj-auto": "no-mmproj", "mmdev": "mmproj-device", "a": "alias",
    "webui-config": "ui-config", "webui-config-file": "ui-config-file",
    "webui-mcp-proxy": "ui-mcp-proxy", "no-webui-mcp-proxy": "no-ui-mcp-proxy", "ag": "agent",
    "no-ag": "no-agent", "webui": "ui", "no-webui": "no-ui", "embeddings": "embedding",
    "reranking": "rerank", "to": "timeout", "rea": "reasoning", "sps": "slot-prompt-similarity",
}
# b11434 renamed the options of a separate draft model spec-draft-*: each mirrors an option of
# the target model (most are named after it) and keeps that option's spellings as its old
# ones, a short one with "d" appended and a long one with "-draft" (-td and --threads-draft
# are spec-draft-threads; -ngld, --gpu-layers-draft and --n-gpu-layers-draft spec-draft-ngl).
_MIRRORED = ("threads", "threads-batch", "cpu-mask", "cpu-range", "cpu-mask-batch", "cpu-strict",
             "prio", "poll", "cpu-strict-batch", "prio-batch", "poll-batch", "override-tensor",
             "cpu-moe", "n-cpu-moe", "device", "model")
_DRAFT_OF = {"spec-draft-type-k": "cache-type-k", "spec-draft-type-v": "cache-type-v",
             "spec-draft-hf": "hf-repo", "spec-draft-ngl": "n-gpu-layers",
             **{f"spec-draft-{name}": name for name in _MIRRORED}}


def _draft_spellings(listed: dict[str, str]) -> dict[str, str]:
    """The old spellings of each draft option, made from those of the option it mirrors (a
    long one is the option's own name or has a hyphen)."""
    found: dict[str, str] = {}
    for draft, target in _DRAFT_OF.items():
        for name in (target, *(alias for alias, of in listed.items() if of == target)):
            found[f"{name}-draft" if name == target or "-" in name else f"{name}d"] = draft
    return found


ALIASES: dict[str, str] = {**_LISTED, **_draft_spellings(_LISTED)}

# The negated spellings of b11434's switches -> the option they negate.
NEGATIONS: dict[str, str] = {
    "no-perf": "perf", "no-escape": "escape", "no-kv-offload": "kv-offload",
    "no-repack": "repack", "no-op-offload": "op-offload", "no-log-jsonl": "log-jsonl",
    "no-log-prefix": "log-prefix", "no-log-timestamps": "log-timestamps",
    "no-spec-draft-backend-sampling": "spec-draft-backend-sampling",
    "no-kv-unified": "kv-unified", "no-cache-idle-slots": "cache-idle-slots",
    "no-context-shift": "context-shift", "no-warmup": "warmup",
    "no-cont-batching": "cont-batching", "no-mmproj": "mmproj-auto",
    "no-mmproj-offload": "mmproj-offload", "no-cors-credentials": "cors-credentials",
    "no-ui-mcp-proxy": "ui-mcp-proxy", "no-agent": "agent", "no-ui": "ui",
    "no-cache-prompt": "cache-prompt", "no-slots": "slots",
    "no-models-autoload": "models-autoload", "no-jinja": "jinja",
    "no-reasoning-preserve": "reasoning-preserve", "no-skip-chat-parsing": "skip-chat-parsing",
    "no-prefill-assistant": "prefill-assistant",
}


# Old flag name -> new name, applied by a node when the build has removed the old one
# (workers/job/checks.py) and by a board reading what another farm's job ran.
FLAG_RENAMES = {"draft": "spec-draft-n-max", "draft-n": "spec-draft-n-max",
                "draft-max": "spec-draft-n-max", "draft-min": "spec-draft-n-min",
                "draft-n-min": "spec-draft-n-min"}


def long_name(raw: str) -> str:
    """What a stored flag's name means today, never refused: its canonical long name
    (``ALIASES``), renamed where b11434 removed it (``FLAG_RENAMES``). For names another
    farm wrote (a bundle's jobs); a matrix's own names go through
    ``farm.matrix.options.canonical``."""
    name = ALIASES.get(raw.lstrip("-"), raw.lstrip("-"))
    return FLAG_RENAMES.get(name, name)


def option_of(name: str) -> str:
    """The option a canonical spelling belongs to: a negated switch's positive name."""
    return NEGATIONS.get(name, name)
