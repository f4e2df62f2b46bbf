"""`farm report --format json` names its schema and version, and `farm schema --report`
prints the JSON Schema every report validates against: on every job summary shape ever
stored (tests/fixtures/summaries), on SQLite and PostgreSQL, printed from the rows and from
what a store kept. The columns of each version stay as frozen here: a version only adds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from farm.columns import REPORT_VERSION
from tests.helpers import run_cli
from tests.integration.test_golden_reports import CLI_ENV, load_fixture

# Each version's schema as it was released: a later farm's report keeps every column of
# each with its type (a column renamed, removed or retyped makes a new version).
FROZEN = Path(__file__).resolve().parents[1] / "fixtures" / "report-schema"


def _printed_schema() -> dict[str, Any]:
    result = run_cli("schema", "--report")
    assert result.exit_code == 0, result.output
    schema: dict[str, Any] = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _columns(schema: dict[str, Any]) -> dict[str, Any]:
    """Each column's type as the schema gives it (its meaning left out: words may change)."""
    return {name: {key: value for key, value in column.items() if key != "description"}
            for name, column in schema["properties"]["jobs"]["items"]["properties"].items()}


@pytest.mark.parametrize("scope", [(), ("history",), ("--all",)], ids=" ".join)
def test_every_report_validates_against_the_printed_schema(
        url: str, scope: tuple[str, ...]) -> None:
    load_fixture(url)
    validator = jsonschema.Draft202012Validator(_printed_schema())
    env = {**CLI_ENV, "FARM_DATABASE_URL": url}
    # The second report prints kept rows (and on PostgreSQL the kept report) as they are.
    for _ in range(2):
        result = run_cli("report", *scope, "--format", "json", env=env)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        errors = [f"{list(error.absolute_path)}: {error.message}"
                  for error in validator.iter_errors(report)]
        assert not errors, errors[:5]
        assert (report["schema"], report["version"]) == ("specfarm.report", REPORT_VERSION)
        assert report["jobs"]


def test_a_report_of_another_version_or_with_an_unknown_column_does_not_validate() -> None:
    validator = jsonschema.Draft202012Validator(_printed_schema())
    assert not validator.is_valid({"schema": "specfarm.report", "version": REPORT_VERSION + 1,
                                   "jobs": []})
    assert not validator.is_valid([])  # the bare list of the reports before issue 40
    row = {name: None for name in _columns(_printed_schema())}
    assert not validator.is_valid({"schema": "specfarm.report", "version": REPORT_VERSION,
                                   "jobs": [row | {"new_column": 1}]})


def test_each_released_versions_columns_keep_their_types() -> None:
    now = _columns(_printed_schema())
    versions = sorted(FROZEN.glob("v*.json"), key=lambda path: int(path.stem[1:]))
    assert [path.stem for path in versions] == [f"v{n}" for n in range(1, REPORT_VERSION + 1)], \
        "a new REPORT_VERSION: freeze its schema (farm schema --report) in " + str(FROZEN)
    for path in versions:
        frozen = _columns(json.loads(path.read_text(encoding="utf-8")))
        changed = sorted(name for name, column in frozen.items() if now.get(name) != column)
        assert not changed, (f"{path.stem}'s columns {changed} are gone or retyped: that "
                             "makes a new REPORT_VERSION (farm/columns.py)")
