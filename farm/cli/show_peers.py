"""What ``farm import`` and ``farm peers`` do: files read whole before anything is written,
then stored in one transaction; stored figures matched to the farm's arms and rendered."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from farm.peers.figures import with_given
from farm.peers.read import read_peer_file
from farm.report import kinds
from farm.report.cells import clean
from farm.settings import Settings
from farm.store.campaigns import latest_campaign
from farm.store.db import connected, open_store, require_current_schema, upgrade
from farm.store.peers import PeerUpload, store_peer_files


def import_files(settings: Settings, files: Sequence[Path], fmt: str | None,
                 given: Mapping[str, Any], note: str | None) -> None:
    """Read every file (a bad one stops the import before anything is stored), then store
    them all in one transaction and say what each became."""
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
    for upload, imported in zip(uploads, done, strict=True):
        peer, name = upload.peer, clean(upload.file_name)  # a file from anyone
        if imported.already:
            click.echo(f"{name}: already imported (import {imported.import_id}, "
                       f"{imported.figures} figures); nothing new stored")
            continue
        click.echo(f"{name}: {imported.figures} figures from {peer.tool} "
                   f"({peer.format}) stored as import {imported.import_id}, kind imported")
        for key, option in (("build_commit", "--build-commit or --build-number"),
                            ("model_file", "--model-file")):
            if all(getattr(f, key) is None for f in peer.figures) and \
                    (key != "build_commit" or all(f.build_number is None for f in peer.figures)):
                click.echo(f"  note: it records no {key.replace('_', ' ')}; import it again "
                           f"with {option} to put it beside farm jobs", err=True)


def show_peers(settings: Settings, campaign: str | None, fmt: str, *,
               all_campaigns: bool = False, output: Path | None = None,
               wide: bool = False) -> None:
    """Imported figures beside the farm's matching arms, then those no arm matches."""
    from farm.report.formats import Target, write
    from farm.results.peers import beside, farm_arms, peer_figures

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        matched, unmatched = beside(farm_arms(engine, name), peer_figures(engine))
    title = "all campaigns" if name is None else f"campaign {name}"
    write(kinds.Peers(matched, unmatched, title), fmt, Target(wide, output))
