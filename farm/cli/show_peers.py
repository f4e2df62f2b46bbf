"""What ``farm import`` and ``farm peers`` print: what each imported file became, and the
stored figures beside the farm's arms (``farm.workflows.peers`` reads, stores and matches
them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from farm.report import kinds
from farm.report.cells import clean
from farm.settings import Settings
from farm.workflows.peers import import_peer_files, peers_beside


def import_files(settings: Settings, files: Sequence[Path], fmt: str | None,
                 given: Mapping[str, Any], note: str | None) -> None:
    """Import the files (a bad one stops the import before anything is stored) and say
    what each became."""
    for upload, imported in import_peer_files(settings, files, fmt, given, note):
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

    found = peers_beside(settings, campaign, all_campaigns)
    title = "all campaigns" if found.campaign is None else f"campaign {found.campaign}"
    write(kinds.Peers(found.matched, found.unmatched, title), fmt, Target(wide, output))
