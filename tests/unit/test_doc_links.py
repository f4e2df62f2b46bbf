"""The operator's documents render as written: every relative link leads to a file and,
with a `#anchor`, to one of its headings; no table is split by a blank line (the rows after
it would render as a headless paragraph); and the fleet's docs say what Flower does not
know and name `farm status` as the source of truth."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _text(doc: Path) -> str:
    """The document without its fenced blocks (code is not markdown)."""
    return FENCE.sub("", doc.read_text(encoding="utf-8"))


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors of the document's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", _text(doc), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(doc: Path) -> None:
    for link in LINK.findall(_text(doc)):
        if "://" in link or link.startswith("mailto:"):
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        assert target.exists(), f"{doc.name}: ({link}) leads nowhere"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{doc.name}: ({link}) names no heading"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_no_table_is_split_by_a_blank_line(doc: Path) -> None:
    lines = _text(doc).splitlines()
    triples = zip(lines, lines[1:], lines[2:], strict=False)  # each line with the next two
    for number, (before, blank, after) in enumerate(triples, 2):
        assert not (before.startswith("|") and not blank.strip() and after.startswith("|")), \
            f"{doc.name}:{number}: a blank line splits a table"


def test_the_deployment_doc_says_what_flower_does_not_know() -> None:
    text = " ".join((ROOT / "docs" / "deployment.md").read_text(encoding="utf-8").split())
    assert "stays `STARTED` there forever" in text
    assert "(`/api/tasks`) knows only the tasks run while Flower was up" in text
    assert "`farm status` is the source of truth" in text
