"""The shape of the code: modules small enough to read, no import circles, each statistical
helper written once, a design that loads no statistics, contracts that cover every module,
an architecture page that names the summary's version the code writes."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "farm").rglob("*.py"), *(ROOT / "workers").rglob("*.py")])


def test_no_module_is_over_450_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for path in SOURCES
            if (n := len(path.read_text().splitlines())) > 450}
    assert not long, f"split these by what they do: {long}"


def module_name(path: Path, root: Path = ROOT) -> str:
    """A source file's module (``farm.report.board``; a package's ``__init__``: the package)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: Iterable[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Which of these modules each imports anywhere: at the top, inside a function (lazily)
    or for the type checker alone."""
    files = {module_name(path, root): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in files
                          else node.module for alias in node.names}
        graph[name] = (found & set(files)) - {name}
    return graph


def _chain(graph: Mapping[str, set[str]], start: str) -> list[str] | None:
    """The shortest chain of imports from ``start`` back to itself, if one."""
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for name in sorted(graph[module]):
            if name == start:
                chain = [module]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return [*reversed(chain), start]
            if name not in previous:
                previous[name] = module
                queue.append(name)
    return None


def circles(graph: Mapping[str, set[str]]) -> list[str]:
    """Each import circle of ``graph`` once, as ``a -> b -> a``."""
    found: dict[frozenset[str], str] = {}
    for module in sorted(graph):
        chain = _chain(graph, module)
        if chain is not None:
            found.setdefault(frozenset(chain), " -> ".join(chain))
    return list(found.values())


def test_no_module_imports_one_that_imports_it_back() -> None:
    found = circles(import_graph([*SOURCES, *(ROOT / "migrations").rglob("*.py")]))
    assert not found, ("move what both sides need into a module below both, or let the "
                       f"one above be the only one that knows the other: {found}")


def test_the_circle_check_finds_a_lazy_circle(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("from pkg.c import x\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    (tmp_path / "pkg" / "d.py").write_text("from pkg.a import f\n")
    graph = import_graph((tmp_path / "pkg").glob("*.py"), tmp_path)
    assert circles(graph) == ["pkg.a -> pkg.b -> pkg.c -> pkg.a"]


def _below(graph: Mapping[str, set[str]], module: str) -> set[str]:
    """Every module ``module`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in graph[todo.pop()] - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_the_settings_stand_below_the_matrix() -> None:
    # Every package reads settings passed down to it: a setting's type (the GPU class's
    # name) lives below both (farm.gpus), not in the matrix.
    below = _below(import_graph(SOURCES), "farm.settings")
    assert below <= {"farm", "farm.errors", "farm.gpus"}, below


def environment_reads(path: Path) -> set[str]:
    """What ``path`` reads of the environment: ``os.environ`` or ``os.getenv``, a
    ``FARM_*`` variable's name (or a prefix of names), a pydantic-settings class, the
    farm's settings."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
        if name in ("environ", "getenv"):
            found.add(f"os.{name}")
        elif isinstance(node, ast.Constant) and re.fullmatch(r"FARM_[A-Z0-9_]*",
                                                              str(node.value)):
            found.add(str(node.value))
        elif isinstance(node, ast.ClassDef) and "BaseSettings" in map(ast.unparse, node.bases):
            found.add("BaseSettings")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("load_settings",
                                                                        "Settings"):
            found.add(f"{ast.unparse(node.func)}()")
    return found


# Below the command line, what reads the environment, each for one thing; docs/architecture.md
# names the same.
ENVIRONMENT_READERS = {
    "farm/report/sheet.py": {"os.environ"},  # the terminal: COLUMNS, NO_COLOR, FORCE_COLOR
    # The sandbox's bounds, on the node that runs the sandbox.
    "workers/job/runtime/bounds.py": {"BaseSettings", "FARM_SANDBOX_"},
    "workers/job/runtime/server.py": {"os.environ"},  # what llama-server inherits
    "workers/setup/ccache.py": {"os.environ"},  # ccache's own CCACHE_DIR
    "workers/setup/gitfetch.py": {"os.environ"},  # what git inherits
}


def test_below_the_cli_settings_are_passed_in_not_read() -> None:
    below = [path for path in SOURCES if path.relative_to(ROOT).parts[:2] != ("farm", "cli")
             and path != ROOT / "farm" / "settings.py"]
    found = {str(path.relative_to(ROOT)): reads for path in below
             if (reads := environment_reads(path))}
    assert found == ENVIRONMENT_READERS, (
        "take settings from the command line's load_settings, passed in; read the "
        "environment below it only where docs/architecture.md says why")
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert [name for name in ENVIRONMENT_READERS if f"`{name}`" not in page] == []


def test_the_environment_check_finds_a_planted_read(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import os\nfrom farm.settings import load_settings\n"
                       "url = os.environ.get('FARM_BROKER_URL') or load_settings().broker_url\n")
    assert environment_reads(planted) == {"os.environ", "FARM_BROKER_URL", "load_settings()"}


# An entry of the architecture page's layout: a folder or module, two spaces a level deep,
# then what it owns.
LAYOUT_ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[a-z_]+(?:/|\.py))  +\S")


def layout_names(page: str) -> set[str]:
    """The folders and modules the layout block of ``page`` names, as paths."""
    block = page.split("## The layout", 1)[1].split("```")[1]
    names: set[str] = set()
    above: list[str] = []
    for line in block.splitlines():
        if entry := LAYOUT_ENTRY.match(line) or re.match(r"^(?P<indent>)(?P<name>\w+/)$",
                                                          line):
            above = [*above[:len(entry["indent"]) // 2], entry["name"].rstrip("/")]
            names.add("/".join(above))
    return names


def test_the_architecture_page_maps_every_package_and_top_module() -> None:
    named = layout_names((ROOT / "docs" / "architecture.md").read_text())
    packages = {str(path.parent.relative_to(ROOT)) for path in SOURCES
                if path.name == "__init__.py"} - {"farm", "workers"}
    tops = {str(path.relative_to(ROOT)) for top in ("farm", "workers")
            for path in (ROOT / top).glob("*.py") if path.name != "__init__.py"}
    assert not (packages | tops) - named, "name it in docs/architecture.md, with what it owns"
    code = {name for name in named if name.startswith(("farm/", "workers/"))}
    assert not code - packages - tops, "docs/architecture.md names what the code lacks"


def test_the_layout_check_reads_nested_entries_and_leaves_descriptions() -> None:
    page = ("## The layout\n\n```\nfarm/\n  cli/          the command: verbs/, see\n"
            "                reports/ and run.py\n  gpus.py       GPUs\nworkers/\n"
            "  job/          one job\n    runtime/    the server\n  paths.py  where\n```\n")
    assert layout_names(page) == {"farm", "farm/cli", "farm/gpus.py", "workers",
                                  "workers/job", "workers/job/runtime", "workers/paths.py"}


def test_every_module_says_what_it_owns() -> None:
    bare = [str(path.relative_to(ROOT)) for path in SOURCES
            if len((ast.get_docstring(ast.parse(path.read_text())) or "").split()) < 4]
    assert not bare, f"give these a module docstring saying what they own: {bare}"


def test_a_design_is_read_without_numpy_pandas_or_pydantic() -> None:
    script = ("import sys\nfrom farm.stats.design import Design, MIN_SECOND_STAGE\n"
              "Design(4, 12)\n"
              "print(sorted({'numpy', 'pandas', 'pydantic'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def _callers(function: str) -> set[str]:
    """The modules under farm/ and workers/ that call ``function``."""
    found = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == function:
                found.add(str(path.relative_to(ROOT)))
    return found


def test_every_t_interval_is_made_by_the_one_margin_helper() -> None:
    # A quantile times a standard error is an interval's margin: farm.stats.intervals makes
    # it; the slot test's one-sided quantile is a test, not a margin.
    assert _callers("student_t_quantile") <= {"farm/stats/distributions.py",
                                              "farm/stats/intervals.py",
                                              "farm/stats/traffic.py"}
    # The F distribution tests variances (the two-stage rule's, the drift test's misfit).
    assert _callers("f_cdf") == {"farm/stats/twostage.py", "farm/stats/drift.py"}
    assert _callers("shrunk_variances") == {"farm/stats/pooling.py", "farm/stats/curve.py",
                                            "farm/stats/race.py"}


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_the_renderer_contract_covers_every_module_but_the_cli_and_the_renderers() -> None:
    [renders] = [c for c in _contracts() if str(c["name"]).startswith("Only the CLI renders")]
    sources = set(renders["source_modules"])  # type: ignore[call-overload]
    tops = {f"farm.{path.stem if path.is_file() else path.name}"
            for path in (ROOT / "farm").iterdir()
            if (path.suffix == ".py" and path.stem != "__init__")
            or (path / "__init__.py").is_file()}
    assert tops - {"farm.cli", "farm.report"} <= sources, "add the new module to the contract"
    assert {"workers", "migrations"} <= sources


def test_the_architecture_page_names_no_summary_version_but_the_codes() -> None:
    from farm.summary import SUMMARY_VERSION

    named = re.findall(r"\bversion (\d+)", (ROOT / "docs" / "architecture.md").read_text())
    assert set(named) <= {str(SUMMARY_VERSION)}, (
        f"docs/architecture.md names summary version(s) {sorted(set(named))}; the code "
        f"writes {SUMMARY_VERSION} (farm.summary.SUMMARY_VERSION)")


def test_every_job_column_is_the_workers_or_the_submitters() -> None:
    """The worker role may update the job's state columns and nothing else: a column added
    to the job table must be given a side, or workers logged in as that role fail on it.
    The rows reports keep are the reports' (the submitter's side): a worker cannot write
    them (tests/security/test_crafted_job_rows.py)."""
    from farm.store.models import Job
    from farm.store.roles import JOB_STATE_COLUMNS

    identity = {"id", "campaign_id", "job_key", "comparable_key", "model_name", "build_name",
                "variant_name", "varying", "spec", "gpu_class", "max_attempts",
                "report_row", "report_head"}
    assert not set(JOB_STATE_COLUMNS) & identity
    assert set(JOB_STATE_COLUMNS) | identity == set(Job.__table__.columns.keys())


# A node's folders: a name joined onto one of them goes through farm.matrix.files.under.
NODE_DIRS = frozenset({"models_dir", "cache_dir", "builds_dir", "logs_dir", "data_dir"})
UNDER_MODULE = ROOT / "farm" / "matrix" / "files.py"


def _dir_name(node: ast.expr) -> str | None:
    """The node folder an expression is (``paths.models_dir``, ``models_dir``), if one."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name if name in NODE_DIRS else None


def _constant(node: ast.expr) -> bool:
    """A string literal or a module constant (UPPER_CASE): no job or user chose it."""
    if isinstance(node, ast.Constant):
        return True
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return bool(name) and name.isupper()


def _joins(node: ast.AST) -> tuple[ast.expr, list[ast.expr]] | None:
    """A path join, as its leftmost operand and the parts joined onto it: a chain of
    ``/``, or ``.joinpath(...)``, or ``os.path.join(...)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        parts = [node.right]
        left = node.left
        while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Div):
            parts.append(left.right)
            left = left.left
        return left, parts
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "joinpath":
            return node.func.value, list(node.args)
        if node.func.attr == "join" and ast.unparse(node.func.value) == "os.path" and node.args:
            return node.args[0], list(node.args[1:])
    return None


def node_dir_joins(path: Path) -> list[str]:
    """Each place in ``path`` that joins a non-constant onto a node folder, as
    ``LINE: SOURCE``."""
    tree = ast.parse(path.read_text())
    inner = {id(node.left) for node in ast.walk(tree) if isinstance(node, ast.BinOp)}
    found = []
    for node in ast.walk(tree):
        join = None if id(node) in inner else _joins(node)
        if isinstance(node, ast.expr) and join is not None and _dir_name(join[0]) \
                and not all(map(_constant, join[1])):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_one_function_joins_a_name_onto_a_node_folder() -> None:
    joins = {str(path.relative_to(ROOT)): found for path in SOURCES
             if path != UNDER_MODULE and (found := node_dir_joins(path))}
    assert not joins, ("join names onto a node folder with farm.matrix.files.under (it "
                       f"proves the path stays inside): {joins}")


def test_the_join_check_finds_a_planted_join(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("def place(paths, settings, spec, name):\n"
                       "    a = paths.models_dir / 'hub' / name\n"
                       "    b = settings.cache_dir.joinpath('git', spec.build.name)\n"
                       "    c = os.path.join(logs_dir, f'{name}.log')\n"
                       "    d = paths.models_dir / HUB_DIR / 'pins'\n"  # constants: fine
                       "    return a, b, c, d\n")
    assert [line.split(":")[0] for line in node_dir_joins(planted)] == ["2", "3", "4"]
