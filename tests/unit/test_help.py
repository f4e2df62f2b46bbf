"""Help that teaches: `-h` on every command, an example in every help page, help on every
option, the FARM_* settings in `farm -h`, one error prefix, counted nouns, a compare of a
campaign with itself warned about."""

from __future__ import annotations

import click
import pytest

from farm.settings import Settings
from farm.words import plural
from tests.helpers import run_cli
from tests.unit.test_cli import COMMANDS, _command


def test_the_tree_holds_the_first_hour_commands() -> None:
    assert {("ab",), ("init",), ("schema",), ("paths",), ("db", "upgrade")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "farm")
def test_dash_h_shows_an_example_of_the_command_itself(path: tuple[str, ...]) -> None:
    result = run_cli(*path, "-h", width=200)
    assert result.exit_code == 0 and result.stderr == "", result.output
    examples = result.stdout.split("Examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples, "give the command an example in farm/cli/helptext.py"
    words = " ".join(("farm", *path))
    assert all(line.strip() for line in examples)
    assert any(line.strip().startswith(words) or f" {words}" in line for line in examples)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "farm")
def test_every_option_says_what_it_is_for(path: tuple[str, ...]) -> None:
    bare = [option.opts for option in _command(path).params
            if isinstance(option, click.Option) and not option.help]
    assert bare == []


def test_farm_help_lists_every_farm_variable_with_its_meaning() -> None:
    page = run_cli("-h", width=200).stdout
    settings = page.split("Settings (environment):\n", 1)[1]
    for name, field in Settings.model_fields.items():
        assert field.description, f"describe the setting {name}"
        line = next(line for line in settings.splitlines()
                    if line.strip().startswith(f"FARM_{name.upper()}"))
        assert line.endswith(field.description)
    assert "FARM_HF_TOKEN (or HF_TOKEN): " in settings


@pytest.mark.parametrize("args", [["nope"], ["run", "--nope", "m.yaml"], ["report", "-x"],
                                  ["export", "-o", "/nonexistent-dir/runs.csv", "--format",
                                   "json"], ["run", "missing.yaml"]])
def test_every_error_has_the_one_prefix(args: list[str]) -> None:
    result = run_cli(*args)
    assert result.exit_code == 2
    assert "Error:" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: ")


def test_a_compare_of_a_campaign_with_itself_is_warned_about() -> None:
    assert run_cli("db", "upgrade").exit_code == 0
    result = run_cli("compare", "c", "c")
    assert result.stderr.startswith(
        "warning: both sides are campaign c: every job is compared with itself, so no change "
        "can show; give two campaigns, or two builds of one (--build-a, --build-b)\n")
    assert "warning" not in run_cli("compare", "c", "c", "--build-a", "b1").stderr


def test_counted_nouns_agree_with_their_count() -> None:
    assert [plural(count, "job") for count in (0, 1, 2)] == ["0 jobs", "1 job", "2 jobs"]
    assert plural(1, "new job") == "1 new job"
    assert plural(3, "entry", "entries") == "3 entries"
