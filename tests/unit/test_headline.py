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


def test_each_group_gets_the_pick_with_its_best_of_interval_or_no_clear_gain() -> None:
    rows = _rows()
    mtp = rows[1]
    assert headlines(pd.DataFrame(rows)) == [
        f"c · m · a: mtp 1.30\u00d7 [{mtp['best_low']:.2f}, {mtp['best_high']:.2f}], best of 2",
        "c · m · b: no clear gain (ngram 1.02\u00d7 [0.95, 1.09])",
        "c · n · a: no clear gain (mtp 1.20\u00d7, no interval yet)"]
    # The A/A control is faster (1.40x) and still no setting to pick.
    assert all("aa" not in line for line in headlines(pd.DataFrame(rows)))


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
