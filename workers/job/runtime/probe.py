"""What a llama-server binary is and accepts, read from ``--version`` and ``--help``.

The help text is the truth about a build: which flags exist, which take a value, and
the enumerated values (speculative types, KV cache types, on/off switches). Results are
cached per (path, size, mtime), so a rebuilt binary is probed again.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from farm.errors import ConfigError
from farm.versions import parse_version
from workers.job.runtime.sandbox import Sandbox
from workers.job.runtime.server import child_env

_HELP_COLUMN = 40
_ALLOWED = re.compile(r"allowed values:\s*([\w.,\s-]+?)(?:\n\s*\(|\n\S|$)")
# One value a hint may enumerate (on, draft-mtp, q8_0). A hint that shows the shape of a
# value instead uses upper case, <...> or an ellipsis: --tensor-split N0,N1,N2,...,
# --spec-synth-rates P0,P1,..., --device <dev1,dev2,..>, --lora-scaled FNAME:SCALE,...
_LITERAL = re.compile(r"[a-z0-9][a-z0-9_.-]*")


@dataclass(frozen=True)
class Option:
    """One option of ``--help``: its names, value hint, enumerated values and help text."""

    names: tuple[str, ...]  # without dashes: ("c", "ctx-size")
    hint: str | None  # None for a bare switch
    choices: tuple[str, ...] = ()
    help: str = ""
    # The one spelling the farm keeps (farm.matrix.options): the first long name, its
    # ``n-`` form when the build also spells it so; a switch's negated names have theirs.
    canonical: str = ""
    negated: tuple[str, ...] = ()
    canonical_negated: str | None = None

    def canonical_of(self, name: str) -> str:
        """The canonical spelling of ``name``, one of this option's names."""
        if name in self.negated and self.canonical_negated:
            return self.canonical_negated
        return self.canonical

    @property
    def takes_value(self) -> bool:
        """Whether the option takes a value (it is no bare switch)."""
        return self.hint is not None

    @property
    def removed(self) -> bool:
        """Old spellings a build still parses only to fail (e.g. --draft-max)."""
        return self.help.startswith("the argument has been removed")


@dataclass(frozen=True)
class BinaryProbe:
    """What one llama-server binary is (version, build, commit) and which options it has."""

    path: str
    version: str  # the whole --version text, for provenance
    build_number: int | None
    commit: str | None
    options: dict[str, Option] = field(repr=False)

    def option(self, name: str) -> Option | None:
        """The option called ``name`` (without dashes), None if this build has none."""
        return self.options.get(name)

    def canonical(self, name: str) -> str | None:
        """The canonical spelling of any name of an option (``-ngl`` -> ``n-gpu-layers``),
        None if this build has no such option."""
        option = self.options.get(name)
        return option.canonical_of(name) if option else None

    def choices(self, name: str) -> tuple[str, ...]:
        """The enumerated values a flag accepts in this build (empty if none or unknown)."""
        option = self.options.get(name)
        return option.choices if option else ()


# What a probe keeps of each stream: b11434's --help is about 40 kB, its --version a few
# lines. A commit's binary that prints more is not a llama-server (and must not fill the
# worker's memory within the timeout).
PROBE_BYTES = 1 << 20
_PROBE_SECONDS = 60


@dataclass(frozen=True)
class _Probed:
    returncode: int
    stdout: str
    stderr: str


def _run(path: str, flag: str, sandbox: Sandbox, trusted: bool) -> _Probed:
    """``path flag`` in the node's sandbox (a probe runs the build's code too), each stream
    read to ``PROBE_BYTES`` within ``_PROBE_SECONDS``."""
    env = child_env(None)
    argv = sandbox.command([path, flag], env, trusted=trusted, read=[Path(path)])
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot execute llama-server: {exc.strerror}") from exc
    try:
        streams = _read_bounded(process, path, flag)
    finally:
        _stop(process)
    return _Probed(process.returncode, *(kept.decode(errors="replace") for kept in streams))


def _read_bounded(process: subprocess.Popen[bytes], path: str,
                  flag: str) -> tuple[bytes, bytes]:
    """Both streams until they close, each to ``PROBE_BYTES`` and ``_PROBE_SECONDS``."""
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.fileno(), process.stderr.fileno()
    kept = {out: bytearray(), err: bytearray()}
    deadline = time.monotonic() + _PROBE_SECONDS
    with selectors.DefaultSelector() as selector:
        for descriptor in kept:
            selector.register(descriptor, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConfigError(f"{path} {flag} did not finish within {_PROBE_SECONDS} s")
            for key, _ in selector.select(left):
                piece = os.read(key.fd, 64 << 10)
                if not piece:
                    selector.unregister(key.fd)
                    continue
                kept[key.fd] += piece
                if len(kept[key.fd]) > PROBE_BYTES:
                    raise ConfigError(f"{path} {flag} printed over {PROBE_BYTES} bytes, the "
                                      "farm's bound for a probe: is this a llama-server "
                                      "binary?")
    try:  # both streams closed: it exits now, unless it closed them and went on
        process.wait(max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{path} {flag} did not finish within {_PROBE_SECONDS} s") from None
    return bytes(kept[out]), bytes(kept[err])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The probe's process group killed, whatever is left of it (a child holding the pipes
    after the probe itself exited too), and its pipes closed. The group's id is not
    reused while a process of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _hint_choices(hint: str) -> tuple[str, ...]:
    """The values a hint enumerates ({a,b}, [a|b] or a,b); none for a value pattern."""
    if hint[:1] in "[{" and hint[-1:] in "]}":
        items = re.split(r"[|,]", hint[1:-1])
    elif "," in hint and " " not in hint:
        items = hint.split(",")
    else:
        return ()
    return tuple(items) if all(_LITERAL.fullmatch(item) for item in items) else ()


def _choices(hint: str | None, help_text: str) -> tuple[str, ...]:
    listed = _hint_choices(hint) if hint else ()
    if listed:
        return listed
    allowed = _ALLOWED.search(help_text)
    if allowed:
        return tuple(v.strip() for v in allowed.group(1).replace("\n", " ").split(",")
                     if v.strip())
    return ()


def _header(line: str) -> tuple[list[str], str | None, str]:
    """Names as written (with their dashes), the value hint and the first help line."""
    # llama.cpp pads names and hint to column 40 and starts the help there; a longer
    # header gets a line of its own (common/arg.cpp, common_arg::to_string).
    if len(line) > _HELP_COLUMN and not line[_HELP_COLUMN - 3:_HELP_COLUMN].strip():
        head, rest = line[:_HELP_COLUMN], line[_HELP_COLUMN:]
    else:
        head, rest = line, ""
    tokens = head.split()
    is_name = [t.startswith("-") and len(t) > 1 and not t[1].isdigit() for t in tokens]
    names = [t.strip(",") for t, name in zip(tokens, is_name, strict=True) if name]
    hint = " ".join(t for t, name in zip(tokens, is_name, strict=True) if not name)
    return names, (hint or None), rest.strip()


def _negated_from(names: list[str]) -> int:
    """Where a switch's negated spellings start (common_arg prints ``args`` then
    ``args_neg``): at its first ``--no-...`` name, or the short one just before it
    (``-kvo, --kv-offload, -nkvo, --no-kv-offload``); len(names) when it has none."""
    first = next((i for i, name in enumerate(names) if i and name.startswith("--no-")),
                 len(names))
    before = names[first - 1] if 1 < first < len(names) else ""
    return first - 1 if before.startswith("-n") and not before.startswith("--") else first


def _canonical(names: list[str]) -> str:
    """The first long name (``--n-X`` over ``--X`` when both are spelt), else the first."""
    longs = [name[2:] for name in names if name.startswith("--")]
    if not longs:
        return names[0].lstrip("-")
    return f"n-{longs[0]}" if f"n-{longs[0]}" in longs else longs[0]


def _option(written: list[str], hint: str | None, help_text: str) -> Option:
    split = _negated_from(written) if hint is None else len(written)
    positive, negated = written[:split], written[split:]
    return Option(names=tuple(name.lstrip("-") for name in written), hint=hint,
                  choices=_choices(hint, help_text), help=help_text,
                  canonical=_canonical(positive),
                  negated=tuple(name.lstrip("-") for name in negated),
                  canonical_negated=_canonical(negated) if negated else None)


def parse_help(text: str) -> dict[str, Option]:
    """Every option of a ``--help`` text, indexed by each of its names (without dashes)."""
    entries: list[tuple[list[str], str | None, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("---"):
            names, hint, first_help = _header(line)
            entries.append((names, hint, [first_help]))
        elif line.startswith(" ") and entries:
            entries[-1][2].append(line.strip())
    options: dict[str, Option] = {}
    for names, hint, help_lines in entries:
        option = _option(names, hint, "\n".join(help_lines))
        for name in option.names:
            options.setdefault(name, option)
    return options


@lru_cache(maxsize=32)
def _probe_cached(path: str, _size: int, _mtime_ns: int, sandbox: Sandbox,
                  trusted: bool) -> BinaryProbe:
    version = _run(path, "--version", sandbox, trusted)
    version_text = (version.stderr + version.stdout).strip()
    help_run = _run(path, "--help", sandbox, trusted)
    if help_run.returncode != 0 or "--spec-type" not in help_run.stdout:
        raise ConfigError(f"{path}: `--help` did not list llama-server options; is this "
                          "a llama-server binary?")
    build, commit = parse_version(version_text)
    return BinaryProbe(path=path, version=version_text, build_number=build, commit=commit,
                       options=parse_help(help_run.stdout))


def probe_binary(path: str | Path, sandbox: Sandbox, *, trusted: bool = False) -> BinaryProbe:
    """Probe a llama-server binary in ``sandbox`` (``Sandbox.wraps``: ``trusted`` for the
    operator's own builds), once per (path, size, mtime)."""
    binary = str(Path(path).resolve())
    try:
        stat = os.stat(binary)
    except OSError as exc:
        raise ConfigError(f"{binary}: llama-server binary not found: {exc.strerror}") from exc
    return _probe_cached(binary, stat.st_size, stat.st_mtime_ns, sandbox, trusted)
