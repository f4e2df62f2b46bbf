"""Series of a history (``farm.stats.history``), the changes found between builds
(``farm.stats.changes``), their words, the gate, and their simulated error rates."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from farm.stats.changes import beyond, describe, find_changes, gate
from farm.stats.history import (
    block_values,
    cross_series,
    job_series,
    mean_estimate,
    ratio_estimate,
)
from farm.stats.online import PRIOR_DF, PRIOR_TAU, between_build_variance
from tests.unit import simulate_history


def _points(values: dict[str, list[float]], se: float = 0.01, df: float = 7.0
            ) -> pd.DataFrame:
    return pd.DataFrame([{"key": "k", "series": series, "order": order, "build": f"b{order}",
                          "value": value, "log_se": se, "df": df}
                         for series, levels in values.items()
                         for order, value in enumerate(levels)])


def test_a_planted_verify_cost_is_called_on_its_series_and_the_others_read_unchanged() -> None:
    changes = find_changes(_points({
        "speedup": [1.30, 1.30, 1.30], "baseline_tok_s": [50.0, 50.2, 49.9],
        "acceptance_1": [0.8, 0.8, 0.8], "acceptance_2": [0.6, 0.6, 0.6],
        "verify_ms_per_token": [10.0, 10.1, 11.8]}))
    called = changes[changes["verdict"] != "unchanged"]
    assert called[["series", "build_b", "verdict"]].to_dict(orient="records") == [
        {"series": "verify_ms_per_token", "build_b": "b2", "verdict": "regression"}]
    assert called["change"].iloc[0] == pytest.approx(11.8 / 10.1)
    [text] = describe(changes)[lambda d: d["build_b"] == "b2"]["text"]
    assert text.startswith("engine: verify ms/token +17% [")
    assert text.endswith("; speedup, baseline tok/s, acceptance unchanged")
    [quiet] = describe(changes)[lambda d: d["build_b"] == "b1"]["text"]
    assert quiet == ("no change: speedup, baseline tok/s, acceptance, verify ms/token "
                     "unchanged")


def test_a_paired_job_across_two_builds_replaces_the_difference_of_their_two_jobs() -> None:
    # Between jobs the baseline fell 9% (the machine's drift); the job that ran the
    # baseline's flags on both builds in alternating blocks says 1.00 [0.98, 1.02].
    points = _points({"baseline_tok_s": [138.0, 125.0], "variant_tok_s": [170.0, 140.0]})
    paired = pd.DataFrame([{"key": "k", "series": "baseline_tok_s", "build_a": "b0",
                            "build_b": "b1", "change": 1.003, "change_low": 0.98,
                            "change_high": 1.02, "p_value": 0.7}])
    # One transition, the newest: the gate's calls.
    unpaired = find_changes(points).set_index("series")
    assert unpaired.loc["baseline_tok_s", "gate_verdict"] == "regression"
    changes = find_changes(points, paired=paired).set_index("series")
    assert changes.loc["baseline_tok_s", "paired"]
    assert changes.loc["baseline_tok_s", "gate_verdict"] == "unchanged"
    assert changes.loc["baseline_tok_s", "change"] == 1.003
    assert not changes.loc["variant_tok_s", "paired"]
    assert changes.loc["variant_tok_s", "gate_verdict"] == "regression"
    [text] = describe(changes.reset_index())["text"]
    assert "variant tok/s -18%" in text and "(paired)" not in text
    moved = find_changes(points, paired=paired.assign(change=0.9, change_low=0.85,
                                                      change_high=0.95, p_value=0.001))
    assert "baseline tok/s -10% [-15%, -5%] (paired)" in describe(moved)["text"].iloc[0]


def test_a_fall_in_acceptance_is_the_drafter_s_and_names_the_position() -> None:
    changes = find_changes(_points({"acceptance_1": [0.80, 0.80], "acceptance_2": [0.66, 0.52],
                                    "variant_tok_s": [30.0, 30.0]}))
    [text] = describe(changes)["text"]
    assert text.startswith("drafter: acceptance @2 -21% [")
    assert text.endswith("; variant tok/s, acceptance @1 unchanged")


def test_values_without_spread_are_unchanged_when_equal_and_untested_when_not() -> None:
    changes = find_changes(_points({"acceptance_1": [1.0, 1.0, 0.9]}, se=0.0))
    assert changes["verdict"].tolist() == ["unchanged", "no test"]
    assert math.isnan(changes["q_value"].iloc[1])


def test_the_gate_holds_its_false_discovery_rate_across_the_newest_build_s_series() -> None:
    # Twenty newest transitions at p about 0.01 each: one alone would be called, BH over
    # all of them not; the running calls (LORD++) this early ask for far less.
    points = _points({f"s{index}": [1.0, 1.0 + 0.036] for index in range(20)}, se=0.01,
                     df=30)
    changes = find_changes(points)
    assert (changes["p_value"] < 0.02).all() and (changes["family"] == "tracked").all()
    assert (changes["gate_verdict"] == "improvement").all()  # all real: BH calls all
    assert (changes["verdict"] == "unchanged").all() and (changes["level"] < 0.01).all()
    mixed = _points({"s0": [1.0, 1.036], **{f"n{i}": [1.0, 1.0] for i in range(40)}},
                    se=0.01, df=30)
    assert (find_changes(mixed)["gate_verdict"] == "unchanged").all()


def test_a_running_call_is_final_and_the_gate_tests_only_the_newest_build() -> None:
    values = {"speedup": [1.30, 1.30, 1.10, 1.10], "acceptance_1": [0.8, 0.8, 0.8, 0.8]}
    three = find_changes(_points({name: levels[:3] for name, levels in values.items()}))
    four = find_changes(_points(values))
    shared = ["build_b", "series", "p_value", "level", "verdict"]
    assert four[four["order_b"] <= 2][shared].reset_index(drop=True).equals(
        three[shared].reset_index(drop=True))
    assert set(four.loc[four["order_b"] == 2, "verdict"]) == {"regression", "unchanged"}
    assert set(four.loc[four["order_b"] == 3, "gate_verdict"]) == {"unchanged"}
    assert (four.loc[four["order_b"] < 3, "gate_verdict"] == "").all()
    gate_columns = ["build_a", "build_b", "series", "change", "p_value", "q_value",
                    "gate_verdict"]
    assert gate(_points(values))[gate_columns].reset_index(drop=True).equals(
        four[four["gate_verdict"] != ""][gate_columns].reset_index(drop=True))


def test_a_build_tracked_after_a_newer_one_is_its_own_family() -> None:
    # b6 (a bisect step between b5 and b7) ran last: b5 -> b7 stays the tracked transition,
    # b5 -> b6 and b6 -> b7 are out of order, with their own BH; the gate reads b5 -> b7.
    levels = [1.30, 1.31, 1.29, 1.30, 1.31, 1.30, 1.10, 1.10]
    points = _points({"speedup": levels}).assign(
        tracked=lambda frame: frame["order"].map(lambda order: {6: 7, 7: 6}.get(order, order)))
    changes = find_changes(points)
    families = {(row["build_a"], row["build_b"]): row["family"]
                for row in changes.to_dict(orient="records")}
    assert families == {**{(f"b{i}", f"b{i + 1}"): "tracked" for i in range(5)},
                        ("b5", "b7"): "tracked", ("b5", "b6"): "out of order",
                        ("b6", "b7"): "out of order"}
    late = changes[changes["family"] == "out of order"].set_index("build_b")
    assert late.loc["b6", "verdict"] == "regression" and late["q_value"].notna().all()
    [gated] = changes[changes["gate_verdict"] != ""].to_dict(orient="records")
    assert (gated["build_a"], gated["build_b"], gated["gate_verdict"]) == (
        "b5", "b7", "regression")


def test_the_between_build_variance_is_learnt_from_quiet_transitions_only() -> None:
    rng = np.random.default_rng(5)
    within = np.full(60, 2 * 0.01**2)
    quiet = rng.normal(0.0, math.sqrt(within[0] + 2 * 0.03**2), 60)
    tau2, df = between_build_variance(quiet, within, prior=False)
    assert math.sqrt(tau2) == pytest.approx(0.03, rel=0.25) and df >= 55
    # Five real changes among them are left out, not read as spread.
    changed = quiet + np.where(np.arange(60) % 12 == 0, 0.5, 0.0)
    assert between_build_variance(changed, within, prior=False)[0] == pytest.approx(
        tau2, rel=0.3)
    assert between_build_variance([], [], prior=False) == (0.0, 0.0)
    assert between_build_variance([], [], prior=True) == (PRIOR_TAU**2, PRIOR_DF)


def test_the_gate_fails_regressions_beyond_their_threshold_only() -> None:
    changes = gate(_points({"speedup": [1.30, 1.17], "verify_ms_per_token": [10.0, 11.8],
                            "draft_ms_per_token": [2.0, 1.5]}))
    assert set(beyond(changes, {"all": 0.0}, "gate_verdict")["series"]) == {
        "speedup", "verify_ms_per_token"}
    assert beyond(changes, {"speedup": 0.15}, "gate_verdict").empty  # -10% is within 15%
    assert list(beyond(changes, {"verify_ms_per_token": 0.15}, "gate_verdict")["series"]) == [
        "verify_ms_per_token"]
    # a faster draft is no regression
    assert beyond(changes, {"draft_ms_per_token": 0.0}, "gate_verdict").empty


def test_a_mean_of_blocks_has_its_interval_on_the_log_scale() -> None:
    estimate = mean_estimate([10.0, 11.0, 9.0, 10.0])
    assert estimate.value == 10.0 and estimate.df == 3 and estimate.blocks == 4
    assert estimate.log_se == pytest.approx(math.sqrt(2 / 3) / (10.0 * 2))
    assert estimate.low < 10.0 < estimate.high
    assert estimate.low * estimate.high == pytest.approx(100.0)
    assert math.isnan(mean_estimate([5.0]).low)
    still = mean_estimate([1.0, 1.0, 1.0])
    assert still.log_se == 0.0 and math.isnan(still.low) and math.isnan(still.high)


def _run(arm: str, block: int, tok_s: float, drafts: int = 0, per_pos: list[int] | None = None,
         draft_ms: float | None = None) -> dict[str, object]:
    return {"arm": arm, "block": block, "decode_tok_s": tok_s, "generated_tokens": 41,
            "spec_drafts": drafts, "spec_accepted": sum(per_pos or []),
            "spec_accepted_per_pos": per_pos or [], "spec_draft_ms": draft_ms,
            "spec_accept_ms": 0.0 if draft_ms is not None else None}


def test_block_values_read_each_arm_per_block_and_the_variant_s_acceptance_and_costs() -> None:
    runs = pd.DataFrame([
        _run("baseline", 0, 20.0), _run("baseline", 0, 22.0), _run("baseline", 1, 18.0),
        _run("variant", 0, 40.0, 10, [8, 6, 0], 100.0),
        _run("variant", 1, 40.0, 10, [10, 4, 0], 60.0),
    ])
    values = block_values(runs)
    assert values["baseline_tok_s"] == [21.0, 18.0]
    assert values["acceptance_1"] == [0.8, 1.0] and values["acceptance_2"] == [0.6, 0.4]
    assert "acceptance_3" not in values  # a position that never accepted is no series
    assert values["mean_accepted_length"] == [2.4, 2.4]
    # 40 timed tokens at 40 tok/s: 1000 ms of decode, of which the draft timer's part.
    assert values["draft_ms_per_token"] == [2.5, 1.5]
    assert values["verify_ms_per_token"] == [22.5, 23.5]
    series = job_series(runs, 1.9, 0.02, 6.0)
    assert series["speedup"].value == 1.9 and series["speedup"].low < 1.9
    assert series["acceptance_1"].value == pytest.approx(0.9)


def test_a_job_across_builds_reads_each_drafting_series_block_against_block() -> None:
    # Both arms the variant's flags, the newer build (variant arm) 3 ms a draft slower:
    # each pair's draft timer newer over older. The third pair ran on a machine twice as
    # slow: both arms' timers doubled, the ratio the same, so the interval stays narrow.
    runs = pd.DataFrame([
        {**_run(arm, 2 * pair + (arm == "variant"), 40.0 / slow, 10, [8, 6],
                (draft + (30.0 if arm == "variant" else 0.0)) * slow), "pair": pair}
        for pair, (draft, slow) in enumerate(((10.0, 1.0), (11.0, 1.0), (10.5, 2.0)))
        for arm in ("baseline", "variant")])
    across = cross_series(runs)
    draft = across["draft_ms_per_token"]
    older = [10.0 / 40, 11.0 / 40, 21.0 / 40]
    newer = [40.0 / 40, 41.0 / 40, 81.0 / 40]
    assert draft.value == pytest.approx(sum(newer) / sum(older)) and draft.df == 2
    assert 3.5 < draft.low < draft.value < draft.high < 4.5
    # The same acceptance on both builds: exactly 1, no spread, no interval.
    assert across["acceptance_1"].value == 1.0 and across["acceptance_1"].log_se == 0.0
    # Pairs where an arm did not draft are left out; fewer than two give no estimate.
    assert math.isnan(ratio_estimate([1.0, math.nan], [2.0, 2.0]).value)


def test_simulated_null_histories_raise_few_false_alarms() -> None:
    cell = simulate_history.history_cell(150, 26001)
    # BH at 5% over 24 tests of one history: when nothing changed, at most 5% of
    # histories have a call (the FDR is the family-wise rate under the full null).
    assert cell.false_alarm_histories <= 0.08, cell
    assert cell.false_alarm_tests <= 0.01, cell


def test_simulated_planted_change_is_found_on_its_series() -> None:
    # The e2e's planted cost: variant tok/s -17%, speedup -10%, at 8 blocks a build, on the
    # second of three transitions: the running calls (LORD++, strict this early: 0.82 at
    # 300 histories) find it; the gate's power on a newest build is tests/unit/test_stats_gate.
    cell = simulate_history.history_cell(150, 26003, {"variant_tok_s": 0.83, "speedup": 0.90},
                                         blocks=8)
    assert cell.power >= 0.7, cell
    assert cell.false_discoveries <= 0.1, cell
