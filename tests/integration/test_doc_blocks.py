"""Every fenced block of README.md and docs/*.md that is a matrix or a `farm` command is
run, so that a document cannot drift from the code.

- A YAML block whose top-level keys are all matrix keys is a matrix, or part of one (no
  `campaign:` or no `models:`: completed from ``FRAGMENT_BASE``). As written it must
  validate as a matrix; then, with the stand-ins below for what this machine cannot have
  (a Hub model, a CUDA build), it goes through `farm run --dry-run`: the loader, every flag
  against the build's own `--help`, the GGUF gates, the expansion into jobs.
- A YAML block with `gpu-class:` is a worker's config and validates as one.
- Every `farm ...` (or `.venv/bin/farm ...`) command of a bash block, and every `$ farm ...`
  line of an output block, is parsed against its command: the command exists, each option
  it uses is one of the command's and is in its `--help`, a value of a fixed choice is one
  of them. Those that are safe here run for real (exit 0) in the test's own data dir:
  ``RUN_HERE``, and every `--dry-run` whose positional arguments are files of the test's
  folder. A YAML block the text names (a line ending "with `mtp.yaml`:" just before it) is
  that file there, for its document's commands, with the stand-ins.
- Blocks that are output or layouts, not commands, are in ``ILLUSTRATIONS`` with a reason.

Stand-ins (a document is never edited to suit this test):
- Models: ``MODEL_STAND_INS``, by the entry's source; a `file:` the provisioned models dir
  holds stays as written. The Qwen3.6 MTP model stands in as the MTP oracle with a chat
  template added (the real one is an instruct model with MTP heads: chat prompts and
  `draft-mtp` both pass their gates).
- Builds: every build a matrix names (a name, `{name, path}`, or a source `{name, git,
  ref, ...}`) is that name, registered with `farm build NAME --binary` as the provisioned
  CPU llama-server in the test's own cache dir (a source's git, ref, backend and cmake are
  checked as written by the validation, not built). A variant on a fork in
  ``FORK_BUILDS`` is left out of the dry run: its options are in no CPU build.

No llama-server is started (a dry run only runs the build's `--help`), so the module has
no ``server`` marker and runs in tests/run's first phase, beside the others.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import Result
from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
from pydantic import ValidationError

from farm.cli import cli
from farm.matrix.schema import BuildEntry, Matrix
from farm.matrix.sources import check_cmake_option
from tests.helpers import run_cli
from workers.fleet.config import WorkerConfig
from workers.setup.provision import Provisioned

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Blocks that show output or a layout, not commands or a matrix, by their document and
# the start of their first line: why each is not run. A `$ farm ...` line in one is still
# checked as a command.
ILLUSTRATIONS = {
    ("docs/architecture.md", "farm/"): "the code's folders, not a command",
    ("docs/history.md", "da35556b9754 -> "): "a change line as `farm history` prints it",
    ("docs/history.md", "0 2 * * * "): "a crontab line; its `farm track` is the first block's",
    ("docs/matrix.md", "$ farm ab "): "`farm ab`'s output (its `$ farm ab` line is checked)",
    ("docs/models.md", "DOWNLOADS_DIR/"): "the downloads dir's layout",
    ("docs/models.md", "23:35:12.10 "): "two workers' log lines",
    ("docs/peers.md", "error: two.jsonl"): "an error as `farm import` prints it",
    ("docs/security.md", "error: m.yaml"): "errors as the matrix loader prints them",
}

# The models the documents name that are not on this machine, by source (`hf:REPO`,
# `path:PATH`, `url:URL`, `file:NAME`), and the fixture model that stands in for each.
CHAT_ORACLE = "qwen35-mtp-oracle+chat"
MODEL_STAND_INS = {
    # Qwen3.6-27B with MTP heads, an instruct model: the MTP oracle with a chat template.
    "hf:froggeric/Qwen3.6-27B-MTP-GGUF": CHAT_ORACLE,
    "path:/models/Qwen3.6-27B-Q4_K_M-mtp.gguf": CHAT_ORACLE,
    # Any other GGUF of the reader's own: SmolLM2, an instruct model.
    "path:../models/mine.gguf": "smollm2",
    "url:https://example.org/models/other.gguf": "smollm2",
}
# Builds whose own options (TurboQuant's turbo4 cache) no CPU build has, and why.
FORK_BUILDS = {"turboquant": "a TurboQuant fork: `cache-type-v: turbo4` is its own"}

# A matrix fragment (a block without `campaign:` or `models:`) is read as part of the
# README's matrix: what it does not give is this.
FRAGMENT_BASE: dict[str, Any] = {
    "campaign": "docs-fragment",
    "models": [{"name": "qwen36-27b", "hf": "froggeric/Qwen3.6-27B-MTP-GGUF",
                "file": "Qwen3.6-27B-Q4_K_M-mtp.gguf"}],
    "prompts": ["Hello! How are you today?"],
    "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}],
}

# Commands that are safe on any machine, offline, in an empty data dir: run for real.
RUN_HERE = {"paths", "schema", "init", "builds"}

MATRIX_KEYS = {field.alias or name for name, field in Matrix.model_fields.items()}
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<text>.*?)^```[ \t]*$", re.M | re.S)
NAMED = re.compile(r"`(?P<name>[\w.-]+\.ya?ml)`:\s*$")
FARM = re.compile(r"^(?:\S*/)?farm$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OPERATORS = {"&&", "||", ";", "|", "&"}
REDIRECTS = {">", ">>", "<", ">&", "&>"}
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language tag, its text, and the file the text
    names it (a line ending "with `mtp.yaml`:" just before it)."""

    doc: str
    line: int
    lang: str
    text: str
    name: str | None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def illustration(self) -> str | None:
        """Why the block is not run, where ``ILLUSTRATIONS`` lists it."""
        return next((why for (doc, start), why in ILLUSTRATIONS.items()
                     if doc == self.doc and self.text.startswith(start)), None)

    @property
    def data(self) -> Any:
        return yaml.safe_load(self.text)


def _blocks(path: Path) -> list[Block]:
    source = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(source):
        before = source[:match.start()].rstrip().rsplit("\n", 1)[-1]
        named = NAMED.search(before)
        found.append(Block(str(path.relative_to(ROOT)), source.count("\n", 0, match.start()) + 1,
                           match["lang"], match["text"], named["name"] if named else None))
    return found


BLOCKS = [block for doc in DOCS for block in _blocks(doc)]
YAML_BLOCKS = [block for block in BLOCKS if block.lang in ("yaml", "yml")]
MATRICES = [block for block in YAML_BLOCKS
            if isinstance(block.data, dict) and set(block.data) <= MATRIX_KEYS]
WORKER_CONFIGS = [block for block in YAML_BLOCKS
                  if isinstance(block.data, dict) and "gpu-class" in block.data]
COMMAND_BLOCKS = [block for block in BLOCKS if block.lang in ("bash", "sh", "console")]
OUTPUT_BLOCKS = [block for block in BLOCKS if block.illustration is not None]


# ------------------------------------------------------------------------ stand-ins

def _build_names(matrix: dict[str, Any]) -> set[str]:
    """Every build a matrix names, at the top and in its variants."""
    entries = matrix.get("build", [])
    entries = entries if isinstance(entries, list) else [entries]
    entries += [variant["build"] for variant in matrix.get("variants", []) if "build" in variant]
    return {entry["name"] if isinstance(entry, dict) else entry for entry in entries}


def _completed(matrix: dict[str, Any]) -> dict[str, Any]:
    """A fragment completed from ``FRAGMENT_BASE``; a whole matrix as it is."""
    if "campaign" in matrix and "models" in matrix:
        return matrix
    # A `tune:` fragment races its space instead of the base's variants.
    base = {key: value for key, value in FRAGMENT_BASE.items()
            if not ("tune" in matrix and key == "variants")}
    return {**base, **matrix}


@dataclass(frozen=True)
class StandIns:
    """The test's cache dir (the stand-in builds), the provisioned models dir, and the
    fixture models by the names ``MODEL_STAND_INS`` gives them."""

    cache_dir: Path
    models_dir: Path
    models: dict[str, Path]

    def model(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A matrix's model entry as this machine has it."""
        source = next(((key, entry[key]) for key in ("hf", "path", "url") if key in entry),
                      ("file", entry.get("file", f"{entry['name']}.gguf")))
        if source[0] == "file" and (self.models_dir / source[1]).is_file():
            return entry
        stand_in = MODEL_STAND_INS.get(f"{source[0]}:{source[1]}")
        assert stand_in is not None, (
            f"model {entry['name']!r} ({source[0]}: {source[1]}) has no stand-in: add it to "
            "MODEL_STAND_INS")
        return {"name": entry["name"], "path": str(self.models[stand_in])}

    def matrix(self, matrix: dict[str, Any]) -> dict[str, Any]:
        """A (completed) matrix with every model and build replaced by its stand-in, the
        variants on a fork left out."""
        def named(build: Any) -> Any:
            return build["name"] if isinstance(build, dict) else build

        build = matrix.get("build", "cpu")
        assert not _build_names({"build": build}) & set(FORK_BUILDS), "a fork as the baseline"
        variants = [{**variant, **({"build": named(variant["build"])} if "build" in variant
                                   else {})}
                    for variant in matrix.get("variants", [])
                    if named(variant.get("build")) not in FORK_BUILDS]
        return {**matrix, "build": [named(b) for b in build] if isinstance(build, list)
                else named(build),
                "models": [self.model(entry) for entry in matrix["models"]],
                "draft-models": [self.model(entry) for entry in matrix.get("draft-models", [])],
                "variants": variants}


def _with_chat_template(source: Path, target: Path) -> Path:
    """A copy of a GGUF with a ChatML chat template added."""
    reader = GGUFReader(source)
    arch = reader.fields[Keys.General.ARCHITECTURE].contents()
    writer = GGUFWriter(target, arch=arch, endianess=reader.endianess)
    new = {Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(GGUFValueType.STRING, CHAT_TEMPLATE)}
    copy_with_new_metadata(reader, writer, new, [])
    return target


@pytest.fixture(scope="module")
def stand_ins(provisioned: Provisioned, tmp_path_factory: pytest.TempPathFactory) -> StandIns:
    """Every build the documents' matrices name registered as the CPU llama-server in a
    cache dir of the module's own; the chat MTP oracle written beside it."""
    home = tmp_path_factory.mktemp("stand-ins")
    names = set().union(*(_build_names(_completed(block.data)) for block in MATRICES))
    env = {"FARM_CACHE_DIR": str(home / "cache"), "FARM_DATA_DIR": str(home / "data")}
    for name in sorted(names - set(FORK_BUILDS) | {"cpu"}):
        result = run_cli("build", name, "--binary", str(provisioned.server), env=env)
        assert result.exit_code == 0, result.output
    oracle = _with_chat_template(provisioned.models["qwen35-mtp-oracle"],
                                 home / "qwen35-mtp-oracle-chat.gguf")
    smollm2 = provisioned.models["smollm2"]
    return StandIns(home / "cache", smollm2.parent, {CHAT_ORACLE: oracle, "smollm2": smollm2})


@pytest.fixture
def work(stand_ins: StandIns, tmp_path: Path, isolated_data_dir: Path,
         monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder a reader runs the documents' commands in, this test's data dir, the
    stand-in builds and models, and a Hub nothing reaches."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("FARM_CACHE_DIR", str(stand_ins.cache_dir))
    monkeypatch.setenv("FARM_MODELS_DIR", str(stand_ins.models_dir))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    for name in ("FARM_DOWNLOADS_DIR", "FARM_GPU_CLASS", "FARM_BROKER_URL", "FARM_HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return folder


def _dry_run(matrix: dict[str, Any], path: Path, stand_ins: StandIns) -> Result:
    path.write_text(yaml.safe_dump(stand_ins.matrix(matrix), sort_keys=False))
    classes = matrix.get("gpu-classes", [])
    return run_cli("run", "--dry-run", *(["--as-class", classes[0]] if classes else []),
                   str(path))


# ------------------------------------------------------------------------ commands

@dataclass(frozen=True)
class Command:
    """One `farm` command of a block: its arguments after `farm`, and the file its
    standard output is redirected to."""

    line: str
    args: list[str]
    stdout: str | None = None


def _lines(block: Block) -> list[str]:
    """The block's command lines: continuations joined; of an output block, its `$ ` lines."""
    lines = block.text.replace("\\\n", " ").splitlines()
    if block.illustration is not None:
        return [line[2:] for line in lines if line.startswith("$ ")]
    return lines


def _simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, split at `&&`, `;`, `|`..."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    words: list[str] = []
    for token in lexer:
        if token in OPERATORS:
            yield words
            words = []
        else:
            words.append(token)
    yield words


def _farm_command(line: str, words: list[str]) -> Command | None:
    """``words`` as a `farm` command (environment assignments before it, redirections
    after it taken off), or None for another program."""
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words or not FARM.match(words[0]):
        return None
    args: list[str] = []
    stdout = None
    index = 1
    while index < len(words):
        word, following = words[index], words[index + 1] if index + 1 < len(words) else None
        if word.isdigit() and following in REDIRECTS:  # the 2 of 2>&1
            index += 1
        elif word in REDIRECTS:
            stdout = following if word in (">", ">>") else stdout
            index += 2
        else:
            args.append(word)
            index += 1
    return Command(line, args, stdout)


def farm_commands(block: Block) -> list[Command]:
    """Every `farm` command of a block, in order."""
    found = []
    for line in _lines(block):
        for words in _simple_commands(line):
            command = _farm_command(line, words)
            if command is not None:
                found.append(command)
    return found


def _resolve(args: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """The command path (`db upgrade`), its click command and the arguments after it."""
    command: click.Command = cli
    path: list[str] = []
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        found = command.commands.get(args[0])
        assert found is not None, f"`{' '.join(['farm', *path])}` has no command {args[0]!r}"
        command, path, args = found, [*path, args[0]], args[1:]
    return path, command, args


def _takes_value(option: click.Option, following: str | None) -> bool:
    """Whether the word after ``option`` is its value (an optional value is taken only
    where a word that is not an option follows)."""
    if option.is_flag or option.count:
        return False
    optional = getattr(option, "_flag_needs_value", False)
    return following is not None and not (optional and following.startswith("-"))


def _parse(command: click.Command, args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The option names ``args`` use, its positional arguments, and what is wrong: an
    option the command does not have, a value not among an option's choices."""
    options = {name: param for param in command.params if isinstance(param, click.Option)
               for name in (*param.opts, *param.secondary_opts)}
    used: list[str] = []
    positional: list[str] = []
    wrong: list[str] = []
    index = 0
    while index < len(args):
        word, index = args[index], index + 1
        name, _, value = word.partition("=")
        if word == "--":
            return used, positional + args[index:], wrong
        if not word.startswith("-") or re.fullmatch(r"-[\d.]+", word):
            positional.append(word)
            continue
        option = options.get(name)
        if option is None:
            wrong.append(f"{name}: no such option")
            continue
        used.append(name)
        if not value and _takes_value(option, args[index] if index < len(args) else None):
            value, index = args[index], index + 1
        if value and isinstance(option.type, click.Choice) and value not in option.type.choices:
            wrong.append(f"{name} {value}: not one of {', '.join(map(str, option.type.choices))}")
    return used, positional, wrong


def _arity(command: click.Command, positional: list[str]) -> list[str]:
    """What is wrong with the number of positional arguments."""
    arguments = [param for param in command.params if isinstance(param, click.Argument)]
    least = sum(param.nargs if param.nargs > 0 else 0 for param in arguments if param.required)
    most = None if any(param.nargs < 0 for param in arguments) else sum(
        param.nargs for param in arguments)
    if len(positional) < least or (most is not None and len(positional) > most):
        return [f"{len(positional)} arguments {positional}: the command takes "
                f"{least} to {'any' if most is None else most}"]
    return []


def _check_command(command: Command, folder: Path) -> None:
    """Parse one command against its command's options and help; run it when it is safe
    here."""
    path, found, rest = _resolve(command.args)
    where = f"`{command.line.strip()}`"
    used, positional, wrong = _parse(found, rest)
    wrong += _arity(found, positional)
    assert not wrong, f"{where}: {wrong}"
    helped = run_cli(*path, "--help")
    assert helped.exit_code == 0, f"{where}: farm {' '.join(path)} --help:\n{helped.output}"
    for name in used:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", helped.stdout), \
            f"{where}: {name} is not in `farm {' '.join(path)} --help`"
    safe = path[0] in RUN_HERE or (
        "--dry-run" in used and all((folder / arg).is_file() for arg in positional))
    if not safe:
        return
    result = run_cli(*command.args)
    assert result.exit_code == 0, f"{where} in an empty data dir:\n{result.output}"
    if command.stdout is not None:
        (folder / command.stdout).write_text(result.stdout)


# ------------------------------------------------------------------------ the tests

def test_every_block_is_a_matrix_a_worker_config_commands_or_an_illustration() -> None:
    checked = {*MATRICES, *WORKER_CONFIGS, *COMMAND_BLOCKS, *OUTPUT_BLOCKS}
    assert [str(block) for block in BLOCKS if block not in checked] == []
    assert not set(MATRICES) & set(WORKER_CONFIGS)
    for doc, start in ILLUSTRATIONS:
        assert any(block.doc == doc and block.text.startswith(start) for block in BLOCKS), \
            f"ILLUSTRATIONS: {doc} has no block starting {start!r}"


@pytest.mark.parametrize("block", MATRICES, ids=str)
def test_the_matrix_block_validates_as_written_and_passes_the_dry_run(
        block: Block, stand_ins: StandIns, work: Path) -> None:
    matrix = _completed(block.data)
    try:
        written = Matrix.model_validate(matrix)
    except ValidationError as exc:
        pytest.fail(f"{block} as written: {exc}")
    builds = [*written.build_entries(), *(variant.build for variant in written.variants)]
    for build in builds:
        if isinstance(build, BuildEntry):
            for arg in build.cmake:
                check_cmake_option(arg, f"{block}: build {build.name!r}: cmake")
    result = _dry_run(matrix, work / (block.name or "matrix.yaml"), stand_ins)
    assert result.exit_code == 0, f"{block}: farm run --dry-run:\n{result.output}"
    # A job's argv per arm; a `tune:` matrix's race shows its candidates instead.
    shown = (r"^docs-fragment: \d+ candidates, " if written.tune is not None
             else r"^  variant +\S+ --model ")
    assert re.search(shown, result.stdout, re.M), result.stdout
    assert "not on this machine" not in result.stdout, result.stdout  # every job checked


@pytest.mark.parametrize("block", WORKER_CONFIGS, ids=str)
def test_the_worker_config_block_validates_as_one(block: Block) -> None:
    try:
        WorkerConfig.model_validate(block.data)
    except ValidationError as exc:
        pytest.fail(f"{block}: {exc}")


@pytest.mark.parametrize("block", COMMAND_BLOCKS + OUTPUT_BLOCKS, ids=str)
def test_the_farm_commands_of_the_block_parse_and_the_safe_ones_run(
        block: Block, stand_ins: StandIns, work: Path) -> None:
    for named in (other for other in MATRICES if other.doc == block.doc and other.name):
        assert named.name is not None
        (work / named.name).write_text(yaml.safe_dump(stand_ins.matrix(_completed(named.data)),
                                                      sort_keys=False))
    for command in farm_commands(block):
        _check_command(command, work)
