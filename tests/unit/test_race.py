"""`farm tune`'s race (farm.stats.race): its guarantee in seeded cells of the simulation
(tests/bench/bench_race.py prints every cell at 2,000 races), its stop reasons on evidence
that leaves no doubt, its plan's refusals, and the matrix's `tune:` section."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from farm.matrix.schema import Matrix, Tune
from farm.stats.race import Evidence, RacePlan, race
from tests.unit.simulate import binomial_sd
from tests.unit.simulate_race import race_cell

RACES = 80


@pytest.mark.parametrize(("kind", "candidates", "gap"), [
    ("normal", 6, 0.0), ("louder_after", 12, 0.02), ("ar0.8", 12, 0.05),
    ("walk", 6, 0.10)])
def test_named_setting_is_within_epsilon_of_the_best(kind: str, candidates: int,
                                                     gap: float) -> None:
    cell = race_cell(kind, candidates, gap, RACES, 9100 + candidates)
    assert cell.within >= 0.95 - 2 * binomial_sd(0.95, RACES), cell


def _exact(speedups: list[float], spread: float) -> Mapping[int, Evidence]:
    """Pairs of known speedups with a small alternating spread (both orders)."""
    pairs = np.arange(24)
    orders = np.where(pairs % 2 == 0, 1, -1).astype(np.int64)
    noise = spread * np.where((pairs // 2) % 2 == 0, 1.0, -1.0)
    return {i: Evidence(np.log(s) + noise, orders) for i, s in enumerate(speedups)}


def _measure(evidence: Mapping[int, Evidence]):  # type: ignore[no-untyped-def]
    return lambda wanted: {k: Evidence(evidence[k].values[:n], evidence[k].orders[:n])
                           for k, n in wanted.items()}


def test_a_clear_winner_is_the_one_left_and_the_others_drop_at_the_first_look() -> None:
    result = race(RacePlan(4), _measure(_exact([1.0, 1.5, 1.2, 0.9], 0.01)))
    assert result.named == 1 and result.final.stop == "one-left"
    assert {drop.standing.candidate for drop in result.drops} == {0, 2, 3}
    assert all(drop.look == 1 and drop.spent == 16 for drop in result.drops)
    assert result.spent == 16 and result.looks == 1
    [leader] = result.final.standings
    assert leader.speedup.low < 1.5 < leader.speedup.high


def test_equal_settings_are_a_fair_choice_once_their_intervals_are_within_epsilon() -> None:
    result = race(RacePlan(3), _measure(_exact([1.2, 1.2, 1.2], 0.002)))
    assert result.final.stop == "fair-choice" and not result.drops


def test_the_budget_stops_a_race_that_cannot_decide() -> None:
    result = race(RacePlan(3, budget=16), _measure(_exact([1.2, 1.21, 1.19], 0.05)))
    assert result.final.stop == "budget" and result.spent <= 16


@pytest.mark.parametrize(("change", "said"), [
    ({"epsilon": 0.0}, "epsilon must be in (0, 1)"),
    ({"epsilon": -0.02}, "epsilon must be in (0, 1)"),
    ({"budget": 11}, "smaller than one round (12 pairs: 3 candidates x 4)"),
    ({"max_pairs": 2}, "max pairs (2) below the first round (4)"),
])
def test_a_plan_it_cannot_run_is_refused(change: dict[str, float], said: str) -> None:
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        RacePlan(3, **change)  # type: ignore[arg-type]


def _matrix(tune: dict[str, object], **more: object) -> Matrix:
    return Matrix.model_validate({"campaign": "t", "models": [{"name": "m"}],
                                  "tune": tune, **more})


def test_a_tune_section_sweeps_its_space_as_one_variant() -> None:
    matrix = _matrix({"space": {"spec-type": "ngram-simple",
                                "spec-ngram-simple-size-n": [2, 3]}})
    assert [arm.name for arm in matrix.all_variants()] == ["tune"]
    assert matrix.tune == Tune(space={"spec-type": "ngram-simple",
                                      "spec-ngram-simple-size-n": [2, 3]})


@pytest.mark.parametrize(("tune", "more", "said"), [
    ({"space": {}}, {}, "space"),
    ({"space": {"spec-draft-n-max": []}}, {}, "sweeps no value"),
    ({"space": {"spec-draft-n-max": [1, 2]}, "epsilon": 0}, {}, "epsilon"),
    ({"space": {"spec-draft-n-max": [1, 2]}, "budget-pairs": 9, "budget-minutes": 3}, {},
     "not both"),
    ({"space": {"spec-draft-n-max": [1, 2]}, "max-pairs": 7}, {}, "multiple of 2"),
    ({"space": {"spec-draft-n-max": [1, 2]}},
     {"variants": [{"name": "v", "flags": {"spec-type": "ngram-simple"}}]}, "remove `variants`"),
])
def test_a_bad_tune_section_is_refused(tune: dict[str, object], more: dict[str, object],
                                       said: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=said):
        _matrix(tune, **more)


def test_each_round_is_its_own_campaign_whose_jobs_line_up_by_candidate(
        tmp_path: Path) -> None:
    from farm.workflows.tune import label, round_pick, tune_matrix

    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = tmp_path / "tune.yaml"
    path.write_text("campaign: t\nmodels: [{name: m, path: m.gguf}]\nprompts: [hi]\n"
                    "tune: {space: {spec-type: ngram-simple, spec-ngram-simple-size-n: "
                    "[2, 3, 4]}}\n")
    matrix, specs = tune_matrix(path)
    assert [label(spec) for spec in specs] == [f"spec-ngram-simple-size-n={n}"
                                               for n in (2, 3, 4)]
    first_matrix, first = round_pick(1, 4, frozenset({0, 1, 2}))(matrix, specs)
    _, second = round_pick(2, 2, frozenset({0, 2}))(matrix, specs)
    assert first_matrix.campaign == "t-r1" and {job.campaign for job in second} == {"t-r2"}
    assert [(job.pairs, job.max_pairs, job.stop_rule) for job in second] == [(2, 2, "fixed")] * 2
    assert not {job.job_key for job in first} & {job.job_key for job in second}
    assert [job.comparable_key for job in second] == [first[0].comparable_key,
                                                      first[2].comparable_key]
