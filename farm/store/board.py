"""Tables of a board (``farm board``, docs/board.md): the bundles it took, the keys it
knows, the key each machine id belongs to, and for each job and run a bundle brought,
where it came from. The jobs and runs themselves are ordinary ``job`` and ``run`` rows of
the board's store, so that every figure the board shows is the farm's own statistics over
them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from farm.store.models import Base


class BoardKey(Base):
    """A contributor's ed25519 public key the board knows, by the name it shows."""

    __tablename__ = "board_key"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    fingerprint: Mapped[str] = mapped_column(String(16), unique=True)
    public_key: Mapped[str] = mapped_column(String(64))  # the raw key, hex
    added_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                               server_default=func.now())


class BoardBundle(Base):
    """One bundle file the board took, by the sha256 of its bytes: whose machine, signed by
    which key (its fingerprint; null: unsigned), what it said of itself."""

    __tablename__ = "board_bundle"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    machine_id: Mapped[str] = mapped_column(String(32), index=True)
    signer: Mapped[str | None] = mapped_column(String(16))
    farm_version: Mapped[str] = mapped_column(String(100))
    summary_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    campaigns: Mapped[list[Any]] = mapped_column()
    with_host: Mapped[bool] = mapped_column(Boolean)
    added_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                               server_default=func.now())


class BoardMachine(Base):
    """A machine id a key has signed for: the first key that signs a bundle of a machine
    owns it on this board; no other key and no unsigned bundle may extend it."""

    __tablename__ = "board_machine"

    machine_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    signer: Mapped[str] = mapped_column(String(16))
    bound_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                               server_default=func.now())


class BoardJob(Base):
    """A job a bundle brought: its machine and its key there (the identity a re-shared
    bundle is matched by), the summary the contributor stated, what the board's own
    recomputation found different, and why the board refuses it (null: on the board)."""

    __tablename__ = "board_job"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"),
                                        unique=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("board_bundle.id", ondelete="CASCADE"),
                                           index=True)
    machine_id: Mapped[str] = mapped_column(String(32), index=True)
    source_key: Mapped[str] = mapped_column(String(64))
    stated: Mapped[dict[str, Any]] = mapped_column()
    differences: Mapped[str | None] = mapped_column(Text)
    refused: Mapped[str | None] = mapped_column(Text)


class BoardRun(Base):
    """A run a bundle brought, by its identity (machine, job, arm, block, prompt,
    repetition): taken once, whichever bundle brings it again."""

    __tablename__ = "board_run"

    identity: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), unique=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("board_bundle.id", ondelete="CASCADE"),
                                           index=True)
