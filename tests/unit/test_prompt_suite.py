"""The built-in prompt suite: coverage per category, unique ids, loader filtering."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import yaml

from farm.prompts import CATEGORIES, SUITE_PATH, load_suite

SOURCE_CATEGORIES = ("summarization", "translation", "extraction")


def test_suite_file_is_a_list_of_id_category_text() -> None:
    raw = yaml.safe_load(SUITE_PATH.read_text(encoding="utf-8"))
    assert isinstance(raw, list)
    for entry in raw:
        assert isinstance(entry, dict)
        assert set(entry) == {"id", "category", "text"}


def test_every_category_has_at_least_five_prompts() -> None:
    counts = Counter(prompt["category"] for prompt in load_suite())
    assert set(counts) == set(CATEGORIES)
    for category in CATEGORIES:
        if category != "tutorial":
            assert counts[category] >= 5, category


def test_tutorial_has_greetings_and_python_games() -> None:
    tutorial = load_suite(["tutorial"])
    greetings = [p for p in tutorial if p["id"].startswith("tutorial-greeting-")]
    games = [p for p in tutorial if p["id"].startswith("tutorial-game-")]
    assert len(greetings) >= 2
    assert len(games) >= 2
    assert len(greetings) + len(games) == len(tutorial)
    assert all("python" in p["text"].lower() and "game" in p["text"].lower() for p in games)


def test_ids_are_unique_kebab_case_and_prefixed_by_category() -> None:
    prompts = load_suite()
    ids = [prompt["id"] for prompt in prompts]
    assert len(ids) == len(set(ids))
    for prompt in prompts:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", prompt["id"]), prompt["id"]
        assert prompt["id"].startswith(prompt["category"] + "-"), prompt["id"]


def test_texts_are_non_trivial() -> None:
    for prompt in load_suite():
        text = prompt["text"]
        assert text == text.strip()
        if prompt["category"] == "tutorial":
            assert len(text.split()) >= 4, prompt["id"]
        else:
            assert len(text.split()) >= 25, prompt["id"]


def test_source_text_categories_carry_a_passage_inline() -> None:
    for prompt in load_suite(SOURCE_CATEGORIES):
        instruction, _, passage = prompt["text"].partition("\n\n")
        assert instruction and passage, prompt["id"]
        assert len(passage.split()) >= 60, prompt["id"]
        assert passage.count(".") >= 4, prompt["id"]


def test_loader_filters_by_category_in_file_order() -> None:
    everything = load_suite()
    assert load_suite(None) == everything
    chosen = load_suite(["math", "code"])
    assert {prompt["category"] for prompt in chosen} == {"math", "code"}
    assert chosen == [p for p in everything if p["category"] in ("math", "code")]
    assert load_suite([]) == []


def test_unknown_category_is_named_and_known_ones_listed() -> None:
    with pytest.raises(ValueError) as info:
        load_suite(["code", "poetry", "cooking"])
    message = str(info.value)
    assert "poetry" in message and "cooking" in message
    for category in CATEGORIES:
        assert category in message
