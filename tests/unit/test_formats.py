"""The format registry (farm/report/formats.py): one entry per format, the formats each
kind of result has, and commands that hand their result over without branching on the
format (issue 36)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pandas as pd
import pytest

from farm.errors import ConfigError
from farm.report import kinds
from farm.report.formats import FORMATS, Target, check_target, formats_for, write
from farm.report.sheet import Column, Sheet

CLI = Path(__file__).resolve().parents[2] / "farm" / "cli"


def test_each_kind_has_the_formats_its_command_offers() -> None:
    assert formats_for(kinds.JobReport) == ("table", "md", "csv", "json", "html")
    assert formats_for(kinds.ReportTables) == formats_for(kinds.JobReport)
    assert formats_for(kinds.Tables) == ("table", "md", "csv", "json")
    assert formats_for(kinds.History) == ("table", "md", "json", "html")
    assert formats_for(kinds.BisectAnswer) == formats_for(kinds.BisectPlan) == (
        "table", "md", "json")
    for kind in (kinds.Peers, kinds.Curves, kinds.Recommendations):
        assert formats_for(kind) == ("table", "md", "csv", "json")
    assert formats_for(kinds.Runs) == ("csv", "json", "parquet")


def test_every_format_says_its_help_and_suffix() -> None:
    for name, fmt in FORMATS.items():
        assert fmt.name == name and fmt.help
        assert fmt.suffix.startswith("/" if fmt.folder else "."), name
        assert fmt.renderers, name


def test_no_command_branches_on_the_format() -> None:
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Name) and side.id == "fmt"
                    for side in (node.left, *node.comparators)):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"commands comparing the format: {found}"


def test_a_format_that_writes_a_file_asks_for_one_named_by_its_suffix() -> None:
    asked = re.escape("--format html writes a file: give -o history.html")
    with pytest.raises(ConfigError, match=asked):
        check_target(kinds.History, "html", None)
    with pytest.raises(ConfigError, match=re.escape("give -o runs.parquet")):
        check_target(kinds.Runs, "parquet", None)
    check_target(kinds.History, "json", None)


def test_one_result_in_each_of_its_formats(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    frame = pd.DataFrame({"a": [1, 2], "b": [[1], {"x": None}]})
    sheet = Sheet("t", [Column("a", lambda row: str(row["a"]))], frame.to_dict("records"))
    result = kinds.Tables(frame, [sheet])
    write(result, "csv", Target())
    assert capsys.readouterr().out == 'a,b\n1,[1]\n2,"{""x"": null}"\n'
    write(result, "json", Target())
    assert capsys.readouterr().out == '[\n{"a":1,"b":[1]},\n{"a":2,"b":{"x":null}}\n]\n'
    write(result, "md", Target(output=tmp_path / "t.md"))
    assert (tmp_path / "t.md").read_text(encoding="utf-8").startswith("### t\n")
    assert "wrote " in capsys.readouterr().err
