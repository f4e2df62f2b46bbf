"""Peers' imported figures beside the farm's own (``farm peers``): each farm job's arms with
what they ran (model file, build, threads, offload, speculation) and their tok/s over
blocks, matched to the imported figures of the same model file, build and settings.

A farm arm's tok/s is the geometric mean of its blocks' mean tok/s with the t interval over
blocks (``farm.stats.speedup.speedup_interval``: blocks, one server session each, are its
independent units). An imported figure keeps only the spread its peer gave.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, select

from farm.store.campaigns import campaign_id
from farm.versions import parse_version

if TYPE_CHECKING:
    import pandas as pd

_THREADS = ("-t", "--threads")
_GPU_LAYERS = ("-ngl", "--gpu-layers", "--n-gpu-layers")
_SPEC_TYPE = ("--spec-type",)
# A farm arm's measure that an imported figure's measure stands beside.
_MEASURES = {"decode": "decode_tok_s", "prompt": "prompt_tok_s"}
ARM_COLUMNS = ("campaign", "job_id", "model", "variant", "build", "arm", "model_file",
               "build_number", "build_commit", "n_threads", "n_gpu_layers", "spec_type",
               "blocks", "decode_tok_s", "decode_low", "decode_high", "prompt_tok_s",
               "prompt_low", "prompt_high")
PEER_COLUMNS = ("import_id", "tool", "file_name", "source", "test", "measure", "tok_s",
                "tok_s_sd", "repetitions", "model_file", "build_commit", "build_number",
                "n_threads", "n_gpu_layers", "backends", "speculative", "spec_type",
                "drafted", "accepted")


def _flag(argv: Sequence[Any], names: Sequence[str]) -> str | None:
    """The value of the last of ``names`` in ``argv`` (the one llama-server keeps)."""
    value = None
    for index, arg in enumerate(argv[:-1]):
        if arg in names:
            value = str(argv[index + 1])
    return value


def _integer(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _block_interval(values: pd.Series) -> tuple[float, float, float]:
    """Geometric mean of block means and its 95% t interval (NaN below two blocks)."""
    import numpy as np

    from farm.stats.speedup import speedup_interval

    positive = values[values > 0].to_numpy(dtype=float)
    interval = speedup_interval(np.log(positive))
    return interval.estimate, interval.low, interval.high


def farm_arms(engine: Engine, campaign: str | None) -> pd.DataFrame:
    """One row per arm of every job (of ``campaign``, or all) that has runs: what it ran
    and its tok/s over blocks (``ARM_COLUMNS``)."""
    import pandas as pd

    from farm.store.models import Campaign, Job, Run

    query = (select(Campaign.name.label("campaign"), Job.id.label("job_id"),
                    Job.model_name.label("model"), Job.variant_name.label("variant"),
                    Job.build_name.label("build"), Run.arm, Run.block, Run.model_file,
                    Run.server_version, Run.argv, Run.__table__.c.decode_tok_s,
                    Run.__table__.c.prompt_tok_s)
             .join(Job, Run.job_id == Job.id).join(Campaign, Job.campaign_id == Campaign.id)
             .order_by(Run.job_id, Run.arm, Run.block))
    if campaign is not None:
        query = query.where(Job.campaign_id == campaign_id(engine, campaign))
    with engine.connect() as connection:
        runs = pd.DataFrame(connection.execute(query).mappings().all())
    rows = []
    if not runs.empty:
        for _, arm in runs.groupby(["job_id", "arm"], sort=True):
            rows.append(_arm_row(arm))
    return pd.DataFrame(rows, columns=list(ARM_COLUMNS))


def _arm_row(runs: pd.DataFrame) -> dict[str, Any]:
    first = runs.iloc[0]
    argv = list(first["argv"])
    build_number, commit = parse_version(str(first["server_version"]))
    commit = None if commit == "unknown" else commit
    blocks = runs.groupby("block")
    decode = _block_interval(blocks["decode_tok_s"].mean())
    prompt = _block_interval(blocks["prompt_tok_s"].mean().dropna())
    return {**{key: first[key] for key in ("campaign", "job_id", "model", "variant", "build",
                                          "arm")},
            "model_file": PurePath(str(first["model_file"])).name,
            "build_number": build_number, "build_commit": commit,
            "n_threads": _integer(_flag(argv, _THREADS)),
            "n_gpu_layers": _integer(_flag(argv, _GPU_LAYERS)),
            "spec_type": _flag(argv, _SPEC_TYPE), "blocks": int(blocks.ngroups),
            "decode_tok_s": decode[0], "decode_low": decode[1], "decode_high": decode[2],
            "prompt_tok_s": prompt[0], "prompt_low": prompt[1], "prompt_high": prompt[2]}


def peer_figures(engine: Engine) -> pd.DataFrame:
    """Every imported figure with the file it came from (``PEER_COLUMNS``)."""
    import pandas as pd

    from farm.store.models import PeerImport, PeerResult

    columns = [PeerResult.import_id, PeerImport.tool, PeerImport.file_name,
               *(getattr(PeerResult, name) for name in PEER_COLUMNS[3:])]
    query = (select(*columns).join(PeerImport, PeerResult.import_id == PeerImport.id)
             .order_by(PeerResult.import_id, PeerResult.id))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    return pd.DataFrame(rows, columns=list(PEER_COLUMNS))


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def same_build(arm: Mapping[str, Any], peer: Mapping[str, Any]) -> bool:
    """Commits agree (one a prefix of the other: tools print short hashes), or, where
    either lacks one, build numbers do."""
    ours, theirs = arm["build_commit"], peer["build_commit"]
    if _known(ours) and _known(theirs):
        ours, theirs = str(ours).lower(), str(theirs).lower()
        return ours.startswith(theirs) or theirs.startswith(ours)
    return (_known(arm["build_number"]) and _known(peer["build_number"])
            and int(arm["build_number"]) == int(peer["build_number"]))


def matches(arm: Mapping[str, Any], peer: Mapping[str, Any]) -> bool:
    """Does an imported figure measure what this farm arm ran: the same model file and build,
    the same threads (and GPU layers, off a CPU-only peer) where both say, plain decoding
    beside a baseline and speculation (of the same type, where both say) beside a variant."""
    if peer["model_file"] != arm["model_file"] or not same_build(arm, peer):
        return False
    if _known(arm["n_threads"]) and _known(peer["n_threads"]) \
            and int(arm["n_threads"]) != int(peer["n_threads"]):
        return False
    offloads = _known(peer["backends"]) and str(peer["backends"]).upper() != "CPU"
    if offloads and _known(arm["n_gpu_layers"]) and _known(peer["n_gpu_layers"]) \
            and int(arm["n_gpu_layers"]) != int(peer["n_gpu_layers"]):
        return False
    if arm["arm"] == "baseline":
        return peer["speculative"] is False or peer["speculative"] == 0
    if not (peer["speculative"] is True or peer["speculative"] == 1):
        return False
    return not (_known(arm["spec_type"]) and _known(peer["spec_type"])) \
        or str(arm["spec_type"]) in str(peer["spec_type"]).split(",")


def beside(arms: pd.DataFrame, peers: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(each farm arm's measure with a matching imported figure beside it, the imported
    figures no farm arm matches)."""
    import pandas as pd

    rows, used = [], set()
    figures = cast(list[dict[str, Any]], peers.to_dict(orient="records"))
    for arm in cast(list[dict[str, Any]], arms.to_dict(orient="records")):
        for index, peer in enumerate(figures):
            if peer["measure"] not in _MEASURES or not matches(arm, peer):
                continue
            used.add(index)
            measure = _MEASURES[str(peer["measure"])]
            prefix = measure.removesuffix("_tok_s")
            farm = arm[measure]
            rows.append({**{key: arm[key] for key in ("campaign", "job_id", "model", "variant",
                                                      "build", "arm", "blocks")},
                         "measure": peer["measure"], "farm_tok_s": farm,
                         "farm_low": arm[f"{prefix}_low"], "farm_high": arm[f"{prefix}_high"],
                         "kind": "imported", "tool": peer["tool"], "test": peer["test"],
                         "peer_tok_s": peer["tok_s"], "peer_sd": peer["tok_s_sd"],
                         "peer_repetitions": peer["repetitions"],
                         "peer_over_farm": peer["tok_s"] / farm if farm else math.nan,
                         "source": f"{peer['file_name']}: {peer['source']}"})
    unmatched = peers.iloc[[i for i in range(len(peers)) if i not in used]]
    return pd.DataFrame(rows), unmatched.assign(kind="imported")
