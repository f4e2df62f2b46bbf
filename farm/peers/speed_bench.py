"""llama.cpp's ``tools/server/bench/speed-bench/speed_bench.py --output FILE``: one JSON
object with the run's ``config`` (url, model, bench, category, osl, concurrency,
extra_inputs), sample counts, a ``summary`` row per category and ``overall``
(avg_prompt_t_s, avg_pred_t_s: means of the server's timings; draft_n, accepted,
accept_rate) and the per-request ``results`` (predicted_per_second, draft_n, ...).

It records no build and no model file (``config.model`` is the request's optional name):
the user gives them at import. Errors name the key, e.g. ``summary[2].avg_pred_t_s``.
"""

from __future__ import annotations

from typing import Any

from farm.peers.figures import PeerFigure, PeerFile, PeerFileError

TOOL = "speed-bench"
_FIX = "give the JSON file speed_bench.py --output wrote, unedited"


def _number(file: str, where: str, value: Any, *, required: bool) -> float | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise PeerFileError(file, where, f"{value!r} is not a number", _FIX)
    return float(value)


def _samples(results: list[Any], category: str, key: str) -> list[float]:
    return [float(result[key]) for result in results
            if isinstance(result, dict) and result.get("ok")
            and (category == "overall" or result.get("category") == category)
            and isinstance(result.get(key), int | float)]


def _figures(file: str, index: int, row: dict[str, Any], results: list[Any],
             config: dict[str, Any], speculative: bool) -> list[PeerFigure]:
    where = f"summary[{index}]"
    category = row.get("category")
    if not isinstance(category, str) or not category:
        raise PeerFileError(file, f"{where}.category", f"{category!r} is no category name", _FIX)
    requests = _number(file, f"{where}.requests", row.get("requests"), required=True)
    figures = []
    for key, measure, sample_key in (("avg_pred_t_s", "decode", "predicted_per_second"),
                                     ("avg_prompt_t_s", "prompt", "prompt_per_second")):
        tok_s = _number(file, f"{where}.{key}", row.get(key), required=False)
        if tok_s is None or tok_s <= 0:
            continue
        drafted = _number(file, f"{where}.draft_n", row.get("draft_n"), required=False)
        accepted = _number(file, f"{where}.accepted", row.get("accepted"), required=False)
        figures.append(PeerFigure(
            source=where, test=category, measure=measure, tok_s=tok_s,
            raw={**row, "config": config}, speculative=speculative,
            n_gen=config.get("osl") if isinstance(config.get("osl"), int) else None,
            repetitions=int(requests or 0),
            samples=_samples(results, category, sample_key),
            drafted=int(drafted) if drafted is not None and measure == "decode" else None,
            accepted=int(accepted) if accepted is not None and measure == "decode" else None))
    return figures


def read(data: Any, file: str) -> PeerFile:
    """The per-category figures of a speed-bench output (already parsed JSON)."""
    if not isinstance(data, dict):
        raise PeerFileError(file, "the top level", "not a JSON object", _FIX)
    for key, kind in (("config", dict), ("summary", list), ("results", list)):
        if not isinstance(data.get(key), kind):
            raise PeerFileError(file, key, f"missing or not a {kind.__name__}", _FIX)
    summary: list[Any] = data["summary"]
    overall = next((row for row in summary if isinstance(row, dict)
                    and row.get("category") == "overall"), {})
    # The server reports draft counts only when it drafted: a file that drafted nothing
    # is plain decoding.
    speculative = bool(overall.get("draft_n"))
    figures: list[PeerFigure] = []
    for index, row in enumerate(summary):
        if not isinstance(row, dict):
            raise PeerFileError(file, f"summary[{index}]", "not an object", _FIX)
        figures += _figures(file, index, row, data["results"], data["config"], speculative)
    if not figures:
        raise PeerFileError(file, "summary", "no category with a decode or prompt tok/s",
                            "did any request succeed? Run speed_bench.py again")
    return PeerFile(tool=TOOL, format="json", figures=figures)
