"""Which llama-server options a job may pass: an allow-list by purpose, each option typed.

A matrix is configuration and a job row is data: neither may make a node run a program,
reach the network or write files. So a job passes only the options a benchmark varies
(``ALLOWED``: sampling, speculation, KV cache, context and slots, placement, loading,
chat template, model names), each with a type its values must have. Every other option
of llama-server b11434's ``--help`` is in ``REFUSED`` with the reason: the farm owns it,
it runs programs, reaches the network, writes files, reads files outside the models
dir, prints and exits, or is not a benchmark option. Only the last kind (harmless, but
no benchmark needs it) can be allowed by an operator on a node (``allow-options`` in a
worker's config, ``--allow-option`` on ``farm run``); the others never. An option this
table does not know (a fork's) is refused unless an operator allows it, and then typed
from the build's own help on the node (``workers/job/checks.py``).

Names are canonical before any list is read: every alias of b11434 maps to its long
name (``farm.matrix.option_names``: ``-ngl`` -> ``n-gpu-layers``, ``-mm`` -> ``mmproj``,
``-nkvo`` -> ``no-kv-offload``), the rule ``workers.job.runtime.probe`` applies to any
build's help, so a short or old spelling can neither slip past a list nor reach the command
line.
``tests/security/test_options.py`` classifies every option of the provisioned build.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from farm.errors import ConfigError
from farm.matrix.flags import FlagValue
from farm.matrix.option_names import ALIASES, NEGATIONS, option_of


class ValueType(Enum):
    """What a value of an option must look like (checked at load and on the node)."""

    SWITCH = "a switch (true passes it, false leaves it out)"
    NUMBER = "a number"
    ENUM = "one of the values the build's help lists"
    ENUMS = "comma-separated values the build's help lists"
    WORD = "one word (letters, digits, . _ + -)"
    WORDS = "comma-separated words"
    NUMBERS = "comma-separated numbers"
    CPU_MASK = "a hexadecimal CPU mask"
    CPU_RANGE = "a CPU range lo-hi"
    TENSOR_PATTERN = "tensor-pattern=buffer-type pairs, comma-separated"
    MODEL_FILE = "a file inside the models dir"
    MODEL_FILES = "comma-separated files inside the models dir"
    MODEL_FILES_SCALED = "FILE:SCALE pairs of files inside the models dir"
    TEXT = "text without control characters or shell syntax"
    JSON = "a JSON object"


# Types whose values name files: resolved inside the models dir by the node that runs the job.
FILE_TYPES = frozenset({ValueType.MODEL_FILE, ValueType.MODEL_FILES,
                        ValueType.MODEL_FILES_SCALED})

_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_WORD = r"[A-Za-z0-9][A-Za-z0-9_.+-]*"
# The shape each type's value must have; TEXT, JSON and the file types are checked apart.
_SHAPES: dict[ValueType, re.Pattern[str]] = {
    # A word as well: --n-gpu-layers takes 'auto' or 'all' (the node checks which words).
    ValueType.NUMBER: re.compile(rf"{_NUMBER}|[a-z]+"),
    ValueType.ENUM: re.compile(_WORD),
    ValueType.ENUMS: re.compile(rf"{_WORD}(?:,{_WORD})*"),
    ValueType.WORD: re.compile(_WORD),
    ValueType.WORDS: re.compile(rf"{_WORD}(?:,{_WORD})*"),
    ValueType.NUMBERS: re.compile(rf"{_NUMBER}(?:[,/]{_NUMBER})*"),
    ValueType.CPU_MASK: re.compile(r"(?:0[xX])?[0-9a-fA-F]+"),
    ValueType.CPU_RANGE: re.compile(r"\d+-\d+"),
    ValueType.TENSOR_PATTERN: re.compile(r"[^\s=,]+=[A-Za-z0-9_]+(?:,[^\s=,]+=[A-Za-z0-9_]+)*"),
}

SAMPLING = "sampling"
SPECULATION = "speculation"
KV_CACHE = "KV cache and attention"
CONTEXT = "context, batching and slots"
PLACEMENT = "threads, offload and placement"
LOADING = "loading and adapters"
CHAT = "chat template and reasoning"
NAMES = "model names"
# Why each allow-list group is there: what a benchmark varies with it.
GROUP_REASONS = {
    SAMPLING: "decoding's own settings (server defaults; requests send their own sampling)",
    SPECULATION: "what the farm measures: spec types, draft lengths, draft models and their "
                 "placement, synthetic acceptance",
    KV_CACHE: "KV cache types (TurboQuant builds), flash attention, offload and RoPE: what "
              "costs or saves memory and time",
    CONTEXT: "context size, batch sizes and slot behaviour the farm does not own",
    PLACEMENT: "threads, CPU affinity, GPU layers, split and tensor overrides: how a model "
               "sits on a machine",
    LOADING: "how weights are loaded (mmap, mlock, NUMA, repacking) and adapters read from "
             "the models dir",
    CHAT: "chat template choice and reasoning: what the model is asked to generate",
    NAMES: "names the server reports; nothing else",
}


@dataclass(frozen=True)
class Allowed:
    """An option a job may pass: its group and the type of its values."""

    group: str
    type: ValueType


def _group(group: str, kind: ValueType, *names: str) -> dict[str, Allowed]:
    return dict.fromkeys(names, Allowed(group, kind))


S, N, E, W = ValueType.SWITCH, ValueType.NUMBER, ValueType.ENUM, ValueType.WORD
ALLOWED: dict[str, Allowed] = {
    **_group(SAMPLING, N, "temp", "top-k", "top-p", "min-p", "top-nsigma", "xtc-probability",
             "xtc-threshold", "typical", "repeat-last-n", "repeat-penalty", "presence-penalty",
             "frequency-penalty", "dry-multiplier", "dry-base", "dry-allowed-length",
             "dry-penalty-last-n", "adaptive-target", "adaptive-decay", "dynatemp-range",
             "dynatemp-exp", "mirostat", "mirostat-lr", "mirostat-ent", "seed"),
    **_group(SAMPLING, W, "sampler-seq"),
    **_group(SAMPLING, ValueType.TEXT, "samplers", "dry-sequence-breaker", "logit-bias"),
    **_group(SAMPLING, S, "backend-sampling"),
    **_group(SPECULATION, ValueType.ENUMS, "spec-type"),
    **_group(SPECULATION, E, "spec-draft-sampling", "spec-draft-type-k", "spec-draft-type-v"),
    **_group(SPECULATION, N, "spec-draft-n-max", "spec-draft-n-min", "spec-draft-p-min",
             "spec-draft-p-split", "spec-synth-len", "spec-draft-ngl", "spec-draft-threads",
             "spec-draft-threads-batch", "spec-draft-cpu-strict", "spec-draft-prio",
             "spec-draft-poll", "spec-draft-cpu-strict-batch", "spec-draft-prio-batch",
             "spec-draft-poll-batch", "spec-draft-n-cpu-moe", "spec-ngram-mod-n-min",
             "spec-ngram-mod-n-max", "spec-ngram-mod-n-match", "spec-ngram-simple-size-n",
             "spec-ngram-simple-size-m", "spec-ngram-simple-min-hits", "spec-ngram-map-k-size-n",
             "spec-ngram-map-k-size-m", "spec-ngram-map-k-min-hits", "spec-ngram-map-k4v-size-n",
             "spec-ngram-map-k4v-size-m", "spec-ngram-map-k4v-min-hits",
             # Removed spellings: translated to their successors, or refused by the node's
             # check with the build's own words (workers/job/checks.py).
             "draft", "draft-min", "spec-ngram-size-n", "spec-ngram-size-m",
             "spec-ngram-min-hits"),
    **_group(SPECULATION, ValueType.NUMBERS, "spec-synth-rates"),
    **_group(SPECULATION, ValueType.MODEL_FILE, "spec-draft-model"),
    **_group(SPECULATION, ValueType.WORDS, "spec-draft-device"),
    **_group(SPECULATION, ValueType.CPU_MASK, "spec-draft-cpu-mask", "spec-draft-cpu-mask-batch"),
    **_group(SPECULATION, ValueType.CPU_RANGE, "spec-draft-cpu-range"),
    **_group(SPECULATION, ValueType.TENSOR_PATTERN, "spec-draft-override-tensor"),
    **_group(SPECULATION, S, "spec-draft-cpu-moe", "spec-draft-backend-sampling",
             "spec-default"),
    **_group(KV_CACHE, E, "cache-type-k", "cache-type-v", "flash-attn", "rope-scaling"),
    **_group(KV_CACHE, N, "defrag-thold", "ctx-checkpoints", "checkpoint-min-step", "cache-ram",
             "rope-scale", "rope-freq-base", "rope-freq-scale", "yarn-orig-ctx",
             "yarn-ext-factor", "yarn-attn-factor", "yarn-beta-slow", "yarn-beta-fast"),
    **_group(KV_CACHE, S, "kv-offload", "swa-full", "kv-unified", "cache-idle-slots"),
    **_group(CONTEXT, N, "ctx-size", "batch-size", "ubatch-size", "keep", "kv-unified-per-slot",
             "cache-reuse", "slot-prompt-similarity", "fit-ctx"),
    **_group(CONTEXT, E, "fit"),
    **_group(CONTEXT, ValueType.NUMBERS, "fit-target"),
    **_group(CONTEXT, S, "cont-batching", "context-shift", "cache-prompt", "warmup"),
    **_group(PLACEMENT, N, "threads", "threads-batch", "cpu-strict", "prio", "poll",
             "cpu-strict-batch", "prio-batch", "poll-batch", "n-gpu-layers", "main-gpu",
             "n-cpu-moe", "n-cpu-ffn", "threads-http"),
    **_group(PLACEMENT, E, "split-mode"),
    **_group(PLACEMENT, ValueType.NUMBERS, "tensor-split"),
    **_group(PLACEMENT, ValueType.WORDS, "device", "mmproj-device"),
    **_group(PLACEMENT, ValueType.CPU_MASK, "cpu-mask", "cpu-mask-batch"),
    **_group(PLACEMENT, ValueType.CPU_RANGE, "cpu-range", "cpu-range-batch"),
    **_group(PLACEMENT, ValueType.TENSOR_PATTERN, "override-tensor"),
    **_group(PLACEMENT, S, "cpu-moe", "op-offload", "no-host", "mmproj-offload"),
    **_group(LOADING, W, "load-mode", "lazy-mode", "numa"),
    **_group(LOADING, S, "repack", "check-tensors", "mmproj-auto"),
    **_group(LOADING, ValueType.TEXT, "override-kv"),
    **_group(LOADING, ValueType.MODEL_FILE, "mmproj", "control-vector"),
    **_group(LOADING, ValueType.MODEL_FILES, "lora"),
    **_group(LOADING, ValueType.MODEL_FILES_SCALED, "lora-scaled", "control-vector-scaled"),
    **_group(CHAT, E, "reasoning"),
    **_group(CHAT, W, "reasoning-format", "reasoning-effort", "chat-template"),
    **_group(CHAT, N, "reasoning-budget"),
    **_group(CHAT, ValueType.JSON, "chat-template-kwargs"),
    **_group(CHAT, S, "jinja"),
    **_group(NAMES, ValueType.WORDS, "alias", "tags"),
}


class Reason(Enum):
    """Why an option is refused; only NOT_BENCHMARK can be allowed by an operator."""

    FARM = "belongs to the farm"
    RUNS_PROGRAMS = "runs programs"
    NETWORK = "reaches the network"
    WRITES_FILES = "writes files"
    READS_FILES = "reads files outside the models dir"
    EXITS = "prints and exits: no server"
    NOT_BENCHMARK = "is not a benchmark option"


@dataclass(frozen=True)
class Refused:
    """An option a job may not pass, why, and (for an operator who allows a harmless one)
    the type of its values."""

    reason: Reason
    detail: str
    type: ValueType = ValueType.TEXT


def _refused(reason: Reason, detail: str, *names: str,
             kind: ValueType = ValueType.TEXT) -> dict[str, Refused]:
    return dict.fromkeys(names, Refused(reason, detail, kind))


_READS_LOG = ("the farm logs at --log-verbosity 4 and reads the log: why a start failed, "
              "each request's speculative statistics")
_SLOTS = ("the farm runs one slot per stream, the same in both arms; set the matrix's "
          "`concurrency:` for N simultaneous streams")
_DOWNLOADS = "loads a preset model, downloading its weights from the internet"
REFUSED: dict[str, Refused] = {
    **_refused(Reason.FARM, "the farm binds every server to 127.0.0.1", "host"),
    **_refused(Reason.FARM, "the farm picks a free port for every server", "port"),
    **_refused(Reason.FARM, "models come from the matrix's `models:` list", "model"),
    **_refused(Reason.FARM, _SLOTS, "parallel"),
    **_refused(Reason.FARM, "the farm always enables /metrics", "metrics"),
    **_refused(Reason.FARM, "the farm reads each slot's context from /slots", "slots"),
    **_refused(Reason.FARM, "the farm starts every server offline: jobs reach no network",
               "offline"),
    **_refused(Reason.FARM, _READS_LOG, "verbosity", "verbose", "log-disable", "log-jsonl",
               "log-prefix", "log-timestamps", "log-colors"),
    **_refused(Reason.FARM, "the farm reads llama.cpp's own timings", "perf"),
    **_refused(Reason.FARM, "the farm sets each request's n_predict from the matrix's "
               "`n-predict`", "n-predict"),
    **_refused(Reason.FARM, "the farm sets ignore_eos per request from the matrix's `stop:`",
               "ignore-eos"),
    **_refused(Reason.FARM, "the farm's requests reach its servers at their root, without "
               "a key", "api-key", "api-prefix"),
    **_refused(Reason.RUNS_PROGRAMS, "built-in tools for agents, a shell among them, served "
               "on the server's port without authentication", "tools", "tools-runtime",
               "agent"),
    **_refused(Reason.RUNS_PROGRAMS, "MCP server definitions: commands started with the server",
               "mcp-servers-config", "mcp-servers-json", "ui-mcp-proxy"),
    **_refused(Reason.RUNS_PROGRAMS, "runs ffmpeg and ffprobe from a directory",
               "video-ffmpeg-dir"),
    **_refused(Reason.NETWORK, "downloads a model over HTTP (and may overwrite the model file)",
               "model-url", "mmproj-url"),
    **_refused(Reason.NETWORK, "downloads from the Hugging Face Hub or a registry", "hf-repo",
               "hf-file", "hf-token", "spec-draft-hf", "docker-repo"),
    **_refused(Reason.NETWORK, "offloads to RPC servers on the network", "rpc"),
    **_refused(Reason.NETWORK, _DOWNLOADS, "embd-gemma-default", "fim-qwen-1.5b-default",
               "fim-qwen-3b-default", "fim-qwen-7b-default", "fim-qwen-7b-spec",
               "fim-qwen-14b-spec", "fim-qwen-30b-default", "gpt-oss-20b-default",
               "gpt-oss-120b-default", "vision-gemma-4b-default", "vision-gemma-12b-default"),
    **_refused(Reason.WRITES_FILES, "writes the server's log to a file", "log-file"),
    **_refused(Reason.WRITES_FILES, "saves slots' KV caches to a directory", "slot-save-path"),
    **_refused(Reason.WRITES_FILES, "creates a directory and writes every prompt into it",
               "log-prompts-dir"),
    **_refused(Reason.WRITES_FILES, "updates a lookup cache file", "lookup-cache-dynamic"),
    **_refused(Reason.READS_FILES, "serves or reads files from any path", "path", "media-path",
               "models-dir", "models-preset", "chat-template-file", "grammar-file",
               "json-schema-file", "api-key-file", "ssl-key-file", "ssl-cert-file",
               "ui-config-file", "lookup-cache-static"),
    **_refused(Reason.EXITS, "prints something and exits", "help", "version", "cache-list",
               "completion-bash", "list-devices", kind=ValueType.SWITCH),
    **_refused(Reason.NOT_BENCHMARK, "a server feature no benchmark run uses", "embedding",
               "rerank", "reuse-port", "cors-credentials", "ui", "props", "models-autoload",
               "lora-init-without-apply", "special", "escape", "spm-infill",
               "skip-chat-parsing", "prefill-assistant", "reasoning-preserve",
               kind=ValueType.SWITCH),
    **_refused(Reason.NOT_BENCHMARK, "a server feature no benchmark run uses", "pooling",
               kind=ValueType.ENUM),
    **_refused(Reason.NOT_BENCHMARK, "a server feature no benchmark run uses",
               "embd-normalize", "timeout", "sse-ping-interval", "models-max",
               "sleep-idle-seconds", "image-min-tokens", "image-max-tokens",
               "mtmd-batch-max-tokens", "video-fps", "video-timestamp-interval",
               kind=ValueType.NUMBER),
    **_refused(Reason.NOT_BENCHMARK, "a server feature no benchmark run uses", "cors-origins",
               "cors-methods", "cors-headers", "ui-config", "grammar", "json-schema",
               "reverse-prompt", "reasoning-budget-message", "control-vector-layer-range"),
}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
# C0 controls and DEL: NUL would make Popen raise, CR/LF would forge log lines.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Shell syntax in free text: command separators, pipes, redirections, substitutions,
# variables, quotes, home expansion. Argv never passes through a shell, so it is a mistake.
_SHELL_META = re.compile(r"[;&`<>\"']|\$[\w({]\w*|\s\|\s|^~")


def canonical(raw: str, where: str) -> str:
    """``-c`` / ``--ctx-size`` / ``ctx-size`` -> ``ctx-size`` (``ALIASES``)."""
    name = raw.lstrip("-")
    if not _NAME.match(name) or _CONTROL.search(raw):
        raise ConfigError(f"{where}: {raw!r} is not a llama-server option name (use its long "
                          "name, e.g. ctx-size, or a short one such as -c)")
    return ALIASES.get(name, name)


def _operator_fix(name: str) -> str:
    return (f"an operator who needs it can allow it on a node (`allow-options: [{name}]` in "
            f"the worker's config, `farm run --allow-option {name}` on one machine)")


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, [*ALLOWED, *NEGATIONS], n=1, cutoff=0.75)
    return f" (did you mean --{close[0]}?)" if close else ""


def refusal(name: str, allow: Iterable[str] = ()) -> str | None:
    """Why a job may not pass the canonical option ``name``, None if it may."""
    key = option_of(name)
    if key in ALLOWED:
        return None
    refused = REFUSED.get(key)
    allowed_here = key in set(allow)
    if refused is None:
        return None if allowed_here else (
            f"--{name} is not on the farm's list of benchmark options{_did_you_mean(key)}; "
            f"if it is a fork's and harmless, {_operator_fix(key)}")
    if refused.reason is Reason.FARM:
        return f"--{name} belongs to the farm ({refused.detail}); remove it from the matrix"
    if refused.reason is Reason.NOT_BENCHMARK:
        return None if allowed_here else (
            f"--{name} is not a benchmark option ({refused.detail}); {_operator_fix(key)}")
    return (f"--{name} {refused.reason.value} ({refused.detail}); a job can never pass it, "
            "and no node can allow it")


def value_type(name: str) -> ValueType | None:
    """The type of the canonical option's values; None for one the table does not know
    (the node types it from its build's help)."""
    key = option_of(name)
    entry = ALLOWED.get(key) or REFUSED.get(key)
    if entry is None:
        return None
    return ValueType.SWITCH if key != name else entry.type


def check_text(value: str, where: str) -> str:
    """Refuse control characters (everywhere) in a value, and an empty one."""
    if _CONTROL.search(value):
        raise ConfigError(f"{where}: value {value!r} contains a control character; values "
                          "are single-line text")
    if not value.strip():
        raise ConfigError(f"{where}: empty value; give a value or remove the flag")
    return value


def _shell_free(value: str, where: str) -> None:
    bad = _SHELL_META.search(value)
    if bad:
        raise ConfigError(
            f"{where}: value {value!r} contains {bad.group().strip()!r}. Flags are passed to "
            "llama-server as an argument list, never through a shell, so shell syntax "
            "has no meaning here: write the literal value (a full path, not ~ or $HOME)")


def check_value(kind: ValueType | None, value: FlagValue, where: str) -> FlagValue:
    """``value`` if it has the shape ``kind`` asks for (an unknown option's: a switch, a
    number or a word), else a ConfigError saying what it takes."""
    if isinstance(value, bool):
        return value  # the node's build says whether the option is a switch
    check_text(value, where)
    if kind is ValueType.JSON:
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {value!r} is not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise ConfigError(f"{where}: {value!r} must be a JSON object ({{...}})")
        return value
    _shell_free(value, where)
    if kind in (ValueType.TEXT, *FILE_TYPES):
        return value
    shape = _SHAPES[kind] if kind is not None else re.compile(rf"{_NUMBER}|{_WORD}")
    if kind is not ValueType.SWITCH and not shape.fullmatch(value):
        takes = kind.value if kind is not None else "a number or one word"
        raise ConfigError(f"{where}: {value!r} is not {takes}")
    return value


def admit_name(raw: str, where: str, allow: Iterable[str] = ()) -> str:
    """The canonical name of an option a job may pass; ConfigError naming the option and
    why when it may not."""
    name = canonical(raw, where)
    reason = refusal(name, allow)
    if reason is not None:
        raise ConfigError(f"{where}: {reason}")
    return name


def check_flag(raw: str, value: FlagValue, where: str,
               allow: Iterable[str] = ()) -> tuple[str, FlagValue]:
    """One option as a job may pass it: its canonical name and its checked value, or a
    ConfigError naming the option and why (``admit_name``, ``check_value``)."""
    name = admit_name(raw, where, allow)
    return name, check_value(value_type(name), value, f"{where} (--{name})")


def check_allowances(names: Iterable[str], where: str) -> frozenset[str]:
    """Options an operator allows on a node: only those not on any list, or harmless ones;
    an option that runs programs, reaches the network, writes or reads files, or belongs
    to the farm is refused here too, so that no config can open it."""
    allowed = set()
    for raw in names:
        name = option_of(canonical(raw, where))
        refused = REFUSED.get(name)
        if refused is not None and refused.reason is not Reason.NOT_BENCHMARK:
            raise ConfigError(f"{where}: --{name} {refused.reason.value} ({refused.detail}); "
                              "it cannot be allowed")
        allowed.add(name)
    return frozenset(allowed)
