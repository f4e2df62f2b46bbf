"""``farm import`` and ``farm peers``: peers' files read whole before anything is written,
then stored in one transaction; stored figures matched to the farm's arms."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from farm.settings import Settings

if TYPE_CHECKING:
    import pandas as pd

    from farm.store.peers import Imported, PeerUpload


def import_peer_files(settings: Settings, files: Sequence[Path], fmt: str | None,
                      given: Mapping[str, Any],
                      note: str | None) -> list[tuple[PeerUpload, Imported]]:
    """Every file read (a bad one stops the import before anything is stored), then all
    stored in one transaction: each file's upload with what became of it."""
    from farm.peers.figures import with_given
    from farm.peers.read import read_peer_file
    from farm.store.db import connected, require_current_schema, upgrade
    from farm.store.peers import PeerUpload, store_peer_files

    uploads = []
    # What the user added is part of what was imported: the same file given a build it
    # lacked the first time is a new import, not "already imported".
    added = json.dumps({k: v for k, v in given.items() if v is not None}, sort_keys=True)
    for path in files:
        peer, data = read_peer_file(path, fmt)
        identity = data if added == "{}" else data + b"\0" + added.encode()
        uploads.append(PeerUpload(with_given(peer, given, str(path)), path.name, identity))
    with connected(settings.database_url) as engine:
        if settings.embedded:
            upgrade(engine)
        else:
            require_current_schema(engine)
        done = store_peer_files(engine, uploads, note)
    return list(zip(uploads, done, strict=True))


@dataclass(frozen=True)
class PeersBeside:
    """The farm's arms of a campaign (None: of all) with the imported figures that match
    them, and the imported figures no arm matches."""

    campaign: str | None
    matched: pd.DataFrame
    unmatched: pd.DataFrame


def peers_beside(settings: Settings, campaign: str | None,
                 all_campaigns: bool) -> PeersBeside:
    """Imported figures beside the farm's matching arms of ``campaign`` (default: the
    latest; every campaign's where ``all_campaigns``), then those no arm matches."""
    from farm.results.peers import beside, farm_arms, peer_figures
    from farm.store.campaigns import latest_campaign
    from farm.store.db import open_store

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        matched, unmatched = beside(farm_arms(engine, name), peer_figures(engine))
    return PeersBeside(name, matched, unmatched)
