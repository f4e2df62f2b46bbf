"""Peers' figures in the store: the files of one ``farm import`` written in one transaction
(all or none), each file once per content."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, func, insert, select

from farm.peers.figures import PeerFile
from farm.store.models import PeerImport, PeerResult


@dataclass(frozen=True)
class PeerUpload:
    """A file read for import: its figures, the name it is shown by and its bytes (with
    what the user added at import, if anything: that is part of what was imported)."""

    peer: PeerFile
    file_name: str
    data: bytes


@dataclass(frozen=True)
class Imported:
    """What ``store_peer_files`` did with one file: the import's id, its figures, and
    whether the same bytes had been imported before (then nothing was written)."""

    file_name: str
    import_id: int
    figures: int
    already: bool


def _store(connection: Connection, upload: PeerUpload, note: str | None) -> Imported:
    digest = hashlib.sha256(upload.data).hexdigest()
    found = connection.scalar(select(PeerImport.id).where(PeerImport.file_sha256 == digest))
    if found is not None:
        count = connection.scalar(select(func.count()).where(PeerResult.import_id == found))
        return Imported(upload.file_name, found, int(count or 0), already=True)
    peer = upload.peer
    import_id = connection.execute(insert(PeerImport).values(
        tool=peer.tool, format=peer.format, file_name=upload.file_name, file_sha256=digest,
        note=note).returning(PeerImport.id)).scalar_one()
    connection.execute(insert(PeerResult), [{**figure.columns(), "import_id": import_id}
                                            for figure in peer.figures])
    return Imported(upload.file_name, import_id, len(peer.figures), already=False)


def store_peer_files(engine: Engine, uploads: Sequence[PeerUpload],
                     note: str | None = None) -> list[Imported]:
    """Store every upload not stored yet, all in one transaction."""
    with engine.begin() as connection:
        return [_store(connection, upload, note) for upload in uploads]
