"""The shape of the code: modules small enough to read, each statistical helper written
once, a design that loads no statistics, contracts that cover every module."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "farm").rglob("*.py"), *(ROOT / "workers").rglob("*.py")])


def test_no_module_is_over_500_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for path in SOURCES
            if (n := len(path.read_text().splitlines())) > 500}
    assert not long, f"split these by what they do: {long}"


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
    assert _callers("f_cdf") == {"farm/stats/twostage.py"}
    assert _callers("shrunk_variances") == {"farm/stats/pooling.py", "farm/stats/curve.py"}


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


def test_every_job_column_is_the_workers_or_the_submitters() -> None:
    """The worker role may update the job's state columns and nothing else: a column added
    to the job table must be given a side, or workers logged in as that role fail on it."""
    from farm.store.models import Job
    from farm.store.roles import JOB_STATE_COLUMNS

    identity = {"id", "campaign_id", "job_key", "comparable_key", "model_name", "build_name",
                "variant_name", "varying", "spec", "gpu_class", "max_attempts"}
    assert not set(JOB_STATE_COLUMNS) & identity
    assert set(JOB_STATE_COLUMNS) | identity == set(Job.__table__.columns.keys())
