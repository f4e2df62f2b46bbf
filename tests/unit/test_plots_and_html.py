"""Report plots (PNG bytes) and the self-contained HTML page."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest

from farm.report import cells, plots
from farm.report.cells import TIMES
from farm.report.html import render_html
from farm.report.html_tables import categories_table, jobs_table

NAN = math.nan
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MALICIOUS = "<script>alert(1)</script>"


def _jobs() -> pd.DataFrame:
    rows = [
        ("job-aaaa", "qwen3-8b", "mtp-n2", "spec-draft-n-max=2", "mtp", 2.0, 1.42, 1.35, 1.50, 8,
         0.81, 2.6, 1.0, False, False, "ci-width", 50.1, 71.2),
        ("job-bbbb", "qwen3-8b", "mtp-n4", "spec-draft-n-max=4", "mtp", 4.0, 1.61, 1.50, 1.70, 8,
         0.66, 3.1, 0.98, False, True, "max-pairs", 49.8, 80.2),
        ("job-cccc", "qwen3-8b", MALICIOUS, "--spec-type ngram", "ngram", 8.0, 0.93, NAN, NAN,
         1, 0.21, 1.4, 0.60, True, False, "budget", 48.0, 44.6),
        ("job-dddd", "llama-3.1-8b", "draft-1b", "-md small.gguf", "", NAN, 1.18, 1.02, 1.33,
         4, NAN, NAN, 1.0, False, False, "ci-width", 40.0, 47.2),
    ]
    columns = ["job_key", "model", "variant", "varying_flags", "spec_type", "draft_n_max",
               "speedup", "ci_low", "ci_high", "pairs", "acceptance_rate",
               "mean_accepted_length", "agreement", "agreement_suspect", "drift_flag",
               "stop_reason", "baseline_tok_s", "variant_tok_s"]
    return pd.DataFrame(rows, columns=columns)


def _runs() -> pd.DataFrame:
    rows = []
    for number, key in enumerate(("job-aaaa", "job-bbbb", "job-cccc", "job-dddd")):
        for arm, factor in (("baseline", 1.0), ("variant", 1.4)):
            for block in range(4):
                for prompt in range(3):
                    speed = (45 + number) * factor * (1 - 0.01 * block) + 0.1 * prompt
                    rows.append((key, arm, block, speed))
    return pd.DataFrame(rows, columns=["job_key", "arm", "block", "decode_tok_s"])


def _categories() -> pd.DataFrame:
    return pd.DataFrame(
        [("job-aaaa", "qwen3-8b", "mtp-n2", "code", 1.55, 1.40, 1.71, 8),
         ("job-aaaa", "qwen3-8b", "mtp-n2", "translation", 1.37, NAN, NAN, 1)],
        columns=["job_key", "model", "variant", "category", "estimate", "low", "high", "pairs"])


def _check_png(data: bytes, width: int = plots.WIDTH_PX, height: int = plots.HEIGHT_PX) -> None:
    assert data.startswith(PNG_MAGIC)
    image = mpimg.imread(io.BytesIO(data), format="png")
    assert image.shape[:2] == (height, width)


JOB_PLOTS: list[Callable[[pd.DataFrame], bytes]] = [
    plots.speedup_intervals, plots.speedup_vs_draft_length, plots.acceptance_vs_speedup]


@pytest.mark.parametrize("plot", JOB_PLOTS, ids=lambda plot: plot.__name__)
def test_job_plots_give_pngs_for_data_and_for_empty_frames(plot: Callable[[pd.DataFrame], bytes],
                                                           ) -> None:
    jobs = _jobs()
    _check_png(plot(jobs))
    _check_png(plot(jobs.iloc[0:0]))
    _check_png(plot(pd.DataFrame()))


def test_job_plots_survive_all_nan_columns() -> None:
    jobs = _jobs().assign(draft_n_max=NAN, acceptance_rate=NAN, ci_low=NAN, ci_high=NAN)
    for plot in JOB_PLOTS:
        _check_png(plot(jobs))


def test_tok_s_over_blocks_facets_and_overlay() -> None:
    runs = _runs()
    _check_png(plots.tok_s_over_blocks(runs, labels={"job-aaaa": MALICIOUS}))
    _check_png(plots.tok_s_over_blocks(runs.iloc[0:0]))
    _check_png(plots.tok_s_over_blocks(pd.DataFrame()))
    many = pd.concat([runs.assign(job_key=runs["job_key"] + f"-{i}") for i in range(4)])
    assert many["job_key"].nunique() > plots.MAX_FACETS
    _check_png(plots.tok_s_over_blocks(many))


def test_many_configurations_make_a_taller_interval_plot() -> None:
    jobs = pd.concat([_jobs().assign(variant=f"v{i}") for i in range(10)], ignore_index=True)
    data = plots.speedup_intervals(jobs)
    assert data.startswith(PNG_MAGIC)
    height = mpimg.imread(io.BytesIO(data), format="png").shape[0]
    assert height > plots.HEIGHT_PX


def test_render_all_gives_every_plot_and_a_path_gets_the_same_bytes(tmp_path: Path) -> None:
    rendered = plots.render_all(_jobs(), _runs())
    assert list(rendered) == list(plots.PLOT_NAMES)
    for data in rendered.values():
        _check_png(data)
    single = tmp_path / "one.png"
    assert plots.acceptance_vs_speedup(_jobs(), single) == single.read_bytes()


def test_render_all_leaves_out_speedup_vs_draft_length_at_one_length() -> None:
    at_one = _jobs().assign(draft_n_max=[3.0, 3.0, 3.0, NAN])
    assert plots.draft_lengths(at_one) == 1
    assert list(plots.render_all(at_one, _runs())) == [
        name for name in plots.PLOT_NAMES if name != "speedup_vs_draft_length"]
    # A length whose job has no speedup is placed nowhere: it does not count.
    lone = at_one.assign(draft_n_max=[3.0, 3.0, 5.0, NAN], speedup=[1.4, 1.6, NAN, 1.2])
    assert plots.draft_lengths(lone) == 1
    assert plots.draft_lengths(_jobs()) == 3
    assert list(plots.render_all(_jobs(), _runs())) == list(plots.PLOT_NAMES)


def test_interval_formatting() -> None:
    assert cells.interval(1.4234, 1.351, 1.4999) == f"1.42{TIMES} [1.35, 1.50]"
    assert cells.interval(0.93, NAN, NAN) == f"0.93{TIMES}"
    assert cells.interval(None, 1.0, 2.0) == cells.MISSING
    assert cells.interval(pd.NA, pd.NA, pd.NA) == cells.MISSING


@cache
def _page() -> str:
    """Rendered once per session: the plots dominate the cost."""
    return render_html(f"Campaign {MALICIOUS}", _jobs(), _categories(), _runs(),
                       notes=["2 jobs failed", MALICIOUS],
                       generated_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC))


def test_html_has_the_tables_values_and_badges() -> None:
    page = _page()
    assert page.startswith("<!DOCTYPE html>")
    assert "2025-01-02 03:04:05 UTC" in page
    for text in ("qwen3-8b", "llama-3.1-8b", "mtp-n2", "spec-draft-n-max=4",
                 f"1.42{TIMES} [1.35, 1.50]", f"1.61{TIMES} [1.50, 1.70]", f"0.93{TIMES}",
                 "ci-width", "max-pairs", "81.0%", "66.0%", "60.0%", "98.0%", "2.60", "50.1",
                 "80.2", "2 jobs failed", "mean accepted length"):
        assert text in page, text
    # per-category table
    assert f"1.55{TIMES} [1.40, 1.71]" in page
    assert "translation" in page and f"1.37{TIMES}" in page
    assert page.count('class="badge suspect"') == 1
    assert page.count('class="badge drift"') == 1
    assert "How to read this" in page and "geometric mean" in page.lower()


def test_html_is_self_contained_with_four_embedded_plots() -> None:
    page = _page()
    uris = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(uris) == 4
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script" not in page


def test_html_escapes_user_text() -> None:
    page = _page()
    assert MALICIOUS not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_tables_handle_empty_frames_and_missing_optional_columns() -> None:
    assert "No jobs." in jobs_table(pd.DataFrame())
    assert "No per-category" in categories_table(pd.DataFrame())
    table = jobs_table(_jobs().drop(columns=["mean_accepted_length"]))
    assert "mean accepted length" not in table
    page = render_html("empty", pd.DataFrame(), pd.DataFrame(), pd.DataFrame())
    # Each plot says "no data", but speedup vs draft length, drawn from two lengths on.
    assert page.count("data:image/png;base64,") == 3
    assert 'alt="speedup_vs_draft_length"' not in page


def _traffic_jobs() -> pd.DataFrame:
    rows = []
    for streams, speedup, aggregate in ((1, 1.3, NAN), (2, 1.2, 1.15), (4, 1.05, 0.98)):
        rows.append({"job_key": f"c{streams}", "model": "smollm2", "variant": "ngram",
                     "varying": {"spec-type": "ngram-simple", "concurrency": str(streams)},
                     "varying_flags": f"spec-type=ngram-simple concurrency={streams}",
                     "kind": "variant", "concurrency": streams, "speedup": speedup,
                     "ci_low": speedup - 0.05, "ci_high": speedup + 0.05,
                     "aggregate_speedup": aggregate, "aggregate_ci_low": aggregate - 0.04,
                     "aggregate_ci_high": aggregate + 0.04, "overlap_min": 0.95,
                     "low_slots": [] if streams > 1 else None, "prompt_tokens": 40.0,
                     "prompt_tok_s_baseline": 900.0, "prompt_tok_s_variant": 880.0})
    for length, tokens, speedup in ((1000, 1010.0, 1.1), (4000, 3950.0, 0.9)):
        rows.append({"job_key": f"l{length}", "model": "smollm2", "variant": "ngram",
                     "varying": {"spec-type": "ngram-simple", "prompt-length": str(length)},
                     "varying_flags": f"spec-type=ngram-simple prompt-length={length}",
                     "kind": "variant", "concurrency": 1, "speedup": speedup,
                     "ci_low": speedup - 0.1, "ci_high": speedup + 0.1,
                     "aggregate_speedup": NAN, "aggregate_ci_low": NAN,
                     "aggregate_ci_high": NAN, "overlap_min": NAN, "low_slots": None,
                     "prompt_tokens": tokens, "prompt_tok_s_baseline": 700.0,
                     "prompt_tok_s_variant": 690.0})
    frame = pd.DataFrame(rows)
    frame["concurrency"] = frame["concurrency"].astype("Int64")
    others = [column for column in _jobs().columns if column not in frame.columns]
    return frame.reindex(columns=[*frame.columns, *others]).assign(
        agreement_suspect=False, drift_flag=False, pairs=4)


def test_speedup_against_concurrency_and_prompt_length_are_plotted() -> None:
    jobs = _traffic_jobs()
    for axis in ("concurrency", "prompt_tokens"):
        png = plots.speedup_vs_traffic(jobs, axis)
        assert png.startswith(PNG_MAGIC) and png != plots.speedup_vs_traffic(jobs.iloc[:0], axis)


def test_the_page_has_a_traffic_section_only_for_campaigns_that_sweep_it() -> None:
    page = render_html("t", _traffic_jobs(), _categories(), _runs())
    section = page.split("<h2>Traffic: concurrency and prompt length</h2>", 1)[1]
    section = section.split("</section>", 1)[0]
    assert section.count("<img ") == 2 and f"1.15{TIMES} [1.11, 1.19]" in section
    assert "3950" in section and "900 / 880" in section
    assert "Traffic" not in render_html("t", _jobs(), _categories(), _runs())
