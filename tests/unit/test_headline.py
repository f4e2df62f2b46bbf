"""A report opens with its answer: per campaign, model and GPU class the best variant with
the interval the best-of-m rule gives the pick, or "no clear gain"; and where it ran."""

from __future__ import annotations

import math

import pandas as pd

from farm.report.headline import headlines, provenance, with_headlines
from farm.results.rows import _best_of

NAN = math.nan


def _rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [
        {"campaign": "c", "model": "m", "gpu_class": "a", "kind": kind, "variant": name,
         "speedup": speedup, "ci_low": speedup * 0.97, "ci_high": speedup * 1.03,
         "log_se": 0.015, "df": 5}
        for kind, name, speedup in (("variant", "ngram", 1.10), ("variant", "mtp", 1.30),
                                    ("control", "aa", 1.40))]
    rows.append({"campaign": "c", "model": "m", "gpu_class": "b", "kind": "variant",
                 "variant": "ngram", "speedup": 1.02, "ci_low": 0.95, "ci_high": 1.09,
                 "log_se": 0.04, "df": 5})
    rows.append({"campaign": "c", "model": "n", "gpu_class": "a", "kind": "variant",
                 "variant": "mtp", "speedup": 1.2, "ci_low": NAN, "ci_high": NAN,
                 "log_se": None, "df": None})
    marks = _best_of(rows)
    return [{**row, "best_of": NAN, "best_low": NAN, "best_high": NAN, **marks.get(i, {})}
            for i, row in enumerate(rows)]


def test_each_group_gets_the_pick_with_both_its_intervals_or_no_clear_gain() -> None:
    rows = _rows()
    mtp = rows[1]
    # The table's interval as the table prints it, then the best-of one, labelled.
    assert headlines(pd.DataFrame(rows)) == [
        f"c · m · a: mtp 1.30\u00d7 [1.26, 1.34], best-of-2 interval "
        f"[{mtp['best_low']:.2f}, {mtp['best_high']:.2f}]",
        "c · m · b: no clear gain (ngram 1.02\u00d7 [0.95, 1.09])",
        "c · n · a: no clear gain (mtp 1.20\u00d7, no interval yet)"]
    # The A/A control is faster (1.40x) and still no setting to pick.
    assert all("aa" not in line for line in headlines(pd.DataFrame(rows)))


def _group(*jobs: tuple[str, float, float, float], gpu_class: str = "a"
           ) -> list[dict[str, object]]:
    """One campaign x model x GPU class of variant jobs (name, speedup, low, high), each of
    df 5, with the best-of marks the report rows carry."""
    rows: list[dict[str, object]] = [
        {"campaign": "c", "model": "m", "gpu_class": gpu_class, "kind": "variant",
         "variant": name, "speedup": speedup, "ci_low": low, "ci_high": high,
         "log_se": None if math.isnan(low) else (math.log(high) - math.log(low)) / 5.14,
         "df": None if math.isnan(low) else 5}
        for name, speedup, low, high in jobs]
    marks = _best_of(rows)
    return [{**row, "best_of": NAN, "best_low": NAN, "best_high": NAN, **marks.get(i, {})}
            for i, row in enumerate(rows)]


def test_a_clearly_slower_variant_is_named_after_the_pick() -> None:
    rows = _group(("ngram", 1.08, 0.63, 1.85), ("ngram-short", 0.81, 0.77, 0.85))
    [said] = headlines(pd.DataFrame(rows))
    assert said.startswith("c · m · a: no clear gain (ngram 1.08\u00d7 [0.63, 1.85], "
                           "best-of-2 interval [")
    assert said.endswith("]); ngram-short 0.81\u00d7 [0.77, 0.85], slower")


def test_the_slowest_of_several_slower_variants_is_named_with_how_many_more() -> None:
    jobs = (("mtp", 1.30, 1.26, 1.34), ("a", 0.90, 0.88, 0.92), ("b", 0.81, 0.77, 0.85),
            ("c", 0.95, 0.93, 0.97), ("d", 0.99, 0.95, 1.03))
    [said] = headlines(pd.DataFrame(_group(*jobs)))
    assert said.endswith("; b 0.81\u00d7 [0.77, 0.85], slower, as are 2 more")
    [said] = headlines(pd.DataFrame(_group(*jobs[:3])))
    assert said.endswith("; b 0.81\u00d7 [0.77, 0.85], slower, as is 1 more")


def test_a_lone_variant_clearly_slower_is_called_slower_not_no_clear_gain() -> None:
    assert headlines(pd.DataFrame(_group(("ngram-short", 0.87, 0.83, 0.91)))) == [
        "c · m · a: ngram-short 0.87\u00d7 [0.83, 0.91], slower"]


def test_a_faster_looking_job_without_an_interval_is_named_after_the_pick() -> None:
    rows = _group(("ngram", 1.24, 1.18, 1.31), ("ngram-8", 1.26, 1.23, 1.29),
                  ("mtp-quick", 1.47, NAN, NAN))
    [said] = headlines(pd.DataFrame(rows))
    # The pick is the job the table flags "best of 2", not the one pair of mtp-quick.
    assert said.startswith("c · m · a: ngram-8 1.26\u00d7 [1.23, 1.29], best-of-2 interval [")
    assert said.endswith("; mtp-quick 1.47\u00d7, no interval yet")


def test_a_report_all_on_the_unnamed_gpu_class_names_no_class() -> None:
    unnamed = _group(("ngram", 1.02, 0.95, 1.09), gpu_class="default")
    assert headlines(pd.DataFrame(unnamed)) == ["c · m: no clear gain (ngram 1.02\u00d7 "
                                                "[0.95, 1.09])"]
    assert with_headlines(unnamed)[0]["headline"] == headlines(pd.DataFrame(unnamed))[0]
    # Beside a named class, `default` tells the groups apart; a lone named class stays.
    both = unnamed + _group(("ngram", 1.02, 0.95, 1.09), gpu_class="h100")
    assert [line.split(":")[0] for line in headlines(pd.DataFrame(both))] == [
        "c · m · default", "c · m · h100"]
    assert headlines(pd.DataFrame(both[1:]))[0].startswith("c · m · h100: ")


def test_every_row_carries_its_groups_headline_for_csv_and_json() -> None:
    rows = _rows()
    said = [row["headline"] for row in with_headlines(rows)]
    lines = headlines(pd.DataFrame(rows))
    # Both jobs of c · m · a and its A/A control carry the one answer; each group its own.
    assert said == [lines[0], lines[0], lines[0], lines[1], lines[2]]
    assert with_headlines([]) == []
    assert with_headlines([{"campaign": "c", "kind": "variant"}]) == [
        {"campaign": "c", "kind": "variant", "headline": None}]


def test_provenance_names_versions_hosts_devices_and_the_utc_span() -> None:
    runs = pd.DataFrame({
        "server_version": ["version: 4890 (e2b9fd1c)\nbuilt with cc", "version: 4890 (e2b9fd1c)"],
        "host": ["cpu-box", "gpu-box"], "gpu_name": [None, "NVIDIA GeForce RTX 3090"],
        "started_at": ["2026-12-02 08:05:00", "2026-12-02 09:10:00"]})
    assert provenance(runs) == [
        "llama-server: version: 4890 (e2b9fd1c)", "hosts: cpu-box, gpu-box",
        "devices: CPU, NVIDIA GeForce RTX 3090",
        "measured: 2026-12-02 08:05 to 2026-12-02 09:10 UTC"]
    assert provenance(pd.DataFrame()) == []
