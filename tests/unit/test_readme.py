"""The README a newcomer finishes: under 1,500 words, holding the two commands CI runs, every
link leading somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_under_1500_words() -> None:
    assert len(README.split()) < 1500


def test_the_readme_holds_the_two_commands_and_the_one_command_ab() -> None:
    assert "deploy/setup && .venv/bin/farm run examples/smollm2-ngram.yaml" in README
    assert "\ntests/run\n" in README
    assert ".venv/bin/farm ab " in README and "farm init" in README and "farm paths" in README


def test_every_relative_link_of_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)]+)\)", README)
    assert links
    for link in links:
        if "://" not in link:
            assert (ROOT / link.split("#")[0]).exists(), link
