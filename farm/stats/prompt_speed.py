"""What long prompts change: the prompts' length as the server counted it and each arm's
prompt processing speed."""

from __future__ import annotations

import pandas as pd

from farm.stats.frame import ARMS, NAN


def prompt_figures(runs: pd.DataFrame) -> dict[str, object]:
    """The prompts' length as the server counted it (median tokens per run) and each arm's
    prompt processing speed (median tok/s): what long prompts change. Empty for a frame
    without them."""
    if "prompt_tokens" not in runs.columns:
        return {}
    # Older builds' runs may lack the speed: None, so the column may hold objects.
    speeds = pd.to_numeric(runs["prompt_tok_s"], errors="coerce").groupby(runs["arm"]).median()
    tokens = pd.to_numeric(runs["prompt_tokens"], errors="coerce")
    return {"prompt_tokens": float(tokens.median()) if tokens.notna().any() else NAN,
            **{f"prompt_tok_s_{arm}": float(speeds.get(arm, NAN)) for arm in ARMS}}
