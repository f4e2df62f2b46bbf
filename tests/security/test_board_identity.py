"""Identity on a board (farm.board.add): a machine id belongs to the first key that signs a
bundle of it, and a bundle never adds runs to, or restates the summary of, a job another
lineage (machine id and signer) brought. Each crafted bundle is refused with one line naming
it, exit 2, and the board's store exactly as before; `board show` and `board site` still
work. Bundles are made from one small store's records (no server runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from farm.board.add import add_bundle
from farm.board.bundle import JobRecord, RunRecord, run_identity, write_bundle
from farm.board.keys import fingerprint, load_private, public_bytes
from farm.board.share import Places, collect
from farm.board.trust import make_key, trust
from farm.store.board import BoardBundle, BoardJob, BoardKey, BoardMachine, BoardRun
from farm.store.db import downgrade, make_engine, upgrade
from farm.store.models import Campaign, Job, Run
from tests.helpers import run_cli
from tests.integration.test_board_add import _store

ALICE = "a11ce" + "0" * 27
BOB = "b0b" + "0" * 29
TABLES = (Campaign, Job, Run, BoardBundle, BoardJob, BoardRun, BoardMachine, BoardKey)


@dataclass(frozen=True)
class Records:
    """One store's one finished job (4 pairs) and its runs, as a bundle carries them."""

    jobs: list[JobRecord]
    runs: list[RunRecord]


def contributor(folder: Path) -> Records:
    """The records of a store made in ``folder``."""
    engine, _ = _store(folder, {"fine": {"pairs": 4}})
    jobs, runs = collect(engine, ["mine"], machine_id=ALICE, places=Places(folder / "models"))
    engine.dispose()
    return Records(jobs, runs)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Records:
    return contributor(tmp_path_factory.mktemp("contributor"))


def bundle(path: Path, records: Records, machine: str, key: Ed25519PrivateKey | None = None,
           *, pairs: range = range(3), jobs: Callable[[list[JobRecord]], list[JobRecord]]
           | None = None, host: str | None = None, **changes: Any) -> Path:
    """``records`` as ``machine``'s bundle (runs of ``pairs`` only), signed with ``key``;
    ``jobs`` changes the job records, each of which gets the job's runs under its key;
    ``host``: made with hosts, every run on it; ``changes`` are written into every run as
    they are, unchecked (a forger's values)."""
    made = jobs(records.jobs) if jobs else records.jobs
    runs = [run.model_copy(update={**changes, "job_key": job.job_key, "host": host or machine,
                                   "identity": run_identity(machine, job.job_key, run.arm,
                                                            run.block, run.prompt_id,
                                                            run.repetition)})
            for job in made for run in records.runs if run.pair in pairs]
    write_bundle(path, machine_id=machine, campaigns=["mine"], with_host=host is not None,
                 jobs=made, runs=runs, signing_key=key)
    return path


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'board.db'}")
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def either_board(engine: Engine) -> Engine:
    """A board on SQLite, and one on PostgreSQL (a shared board's store): conftest's."""
    upgrade(engine)
    return engine


def keys(board: Engine, tmp_path: Path, *names: str) -> list[Ed25519PrivateKey]:
    """A key pair per name, each trusted by the board under its name."""
    made = []
    for name in names:
        make_key(tmp_path / f"{name}.pem")
        trust(board, tmp_path / f"{name}.pem.pub", name)
        made.append(load_private(tmp_path / f"{name}.pem"))
    return made


def state(board: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table a bundle can write."""
    with board.connect() as connection:
        return {table.__tablename__: sorted(map(tuple, connection.execute(select(table))),
                                            key=repr) for table in TABLES}


def refused(board: Engine, path: Path, *phrases: str, signed: bool = False) -> None:
    """``farm board add PATH`` refuses it: exit 2, one line naming it and saying each of
    ``phrases``, the board's store unchanged, `board show` and `board site` working."""
    before = state(board)
    env = {"FARM_BOARD_URL": str(board.url)}
    result = run_cli("board", "add", str(path), *(("--require-signed",) if signed else ()),
                     env=env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {path}: ") and result.stderr.count("\n") == 1
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert state(board) == before
    shown = run_cli("board", "show", "--format", "json", env=env)
    assert shown.exit_code == 0, shown.output
    site = path.with_name(f"{path.stem}-site")
    assert run_cli("board", "site", "-o", str(site), env=env).exit_code == 0
    assert (site / "index.html").is_file()


def rows(board: Engine) -> list[tuple[Any, ...]]:
    """Each board job: its machine, source key, runs, and summary's speedup."""
    with Session(board) as session:
        found = session.execute(
            select(BoardJob.machine_id, BoardJob.source_key, Job.id, Job.summary)
            .join(Job, Job.id == BoardJob.job_id).order_by(Job.id)).all()
        return [(machine, key, len(session.scalars(select(Run.id).where(Run.job_id == job_id))
                                   .all()), summary["speedup"])
                for machine, key, job_id, summary in found]


def test_a_second_contributor_cannot_touch_the_first_ones_rows(
        either_board: Engine, tmp_path: Path, records: Records) -> None:
    board = either_board
    alice, bob = keys(board, tmp_path, "alice", "bob")
    taken = add_bundle(board, bundle(tmp_path / "alice.zip", records, ALICE, alice),
                       require_signed=True)
    assert (taken.jobs, taken.runs) == (1, 12)
    [(_, key, _, speedup)] = rows(board)
    # Bob, trusted, names Alice's machine and job with a fourth pair and a lower stated
    # speedup: the machine is Alice's key's.
    forged = bundle(tmp_path / "bob-as-alice.zip", records, ALICE, bob, pairs=range(3, 4),
                    jobs=lambda jobs: [jobs[0].model_copy(update={"summary": {
                        **jobs[0].summary, "speedup": 0.38}})])
    refused(board, forged, f"machine {ALICE} belongs to key "
            f"{fingerprint(public_bytes(alice))}", f"signed by key "
            f"{fingerprint(public_bytes(bob))}", signed=True)
    # His own machine with the same job key is his own job: Alice's row is as it was.
    own = add_bundle(board, bundle(tmp_path / "bob.zip", records, BOB, bob,
                                   pairs=range(3, 4)), require_signed=True)
    assert (own.jobs, own.runs) == (1, 4)
    assert rows(board)[0] == (ALICE, key, 12, speedup)
    assert rows(board)[1][:3] == (BOB, key, 4)
    # Alice, with her key, still extends her own job.
    more = add_bundle(board, bundle(tmp_path / "alice-more.zip", records, ALICE, alice,
                                    pairs=range(4)), require_signed=True)
    assert (more.jobs, more.runs) == (0, 4) and rows(board)[0][2] == 16


def test_an_unsigned_bundle_cannot_extend_a_machine_first_seen_signed(
        board: Engine, tmp_path: Path, records: Records) -> None:
    [alice] = keys(board, tmp_path, "alice")
    add_bundle(board, bundle(tmp_path / "alice.zip", records, ALICE, alice), False)
    refused(board, bundle(tmp_path / "unsigned.zip", records, ALICE, pairs=range(4)),
            f"machine {ALICE} belongs to key {fingerprint(public_bytes(alice))}",
            "this bundle is unsigned")


def test_an_unknown_key_claims_a_machine_as_a_known_one_does(
        board: Engine, tmp_path: Path, records: Records) -> None:
    stranger = Ed25519PrivateKey.generate()
    add_bundle(board, bundle(tmp_path / "first.zip", records, ALICE, stranger), False)
    [alice] = keys(board, tmp_path, "alice")
    refused(board, bundle(tmp_path / "alice.zip", records, ALICE, alice, pairs=range(4)),
            f"belongs to key {fingerprint(public_bytes(stranger))}")


def test_a_key_cannot_take_over_jobs_an_unsigned_bundle_brought(
        board: Engine, tmp_path: Path, records: Records) -> None:
    add_bundle(board, bundle(tmp_path / "unsigned.zip", records, ALICE), False)
    [alice] = keys(board, tmp_path, "alice")
    refused(board, bundle(tmp_path / "signed.zip", records, ALICE, alice, pairs=range(4)),
            "came in a bundle unsigned and this one is signed by key "
            f"{fingerprint(public_bytes(alice))}: a bundle never adds to another lineage's job")
    # The refusal bound nothing: the unsigned lineage goes on.
    assert add_bundle(board, bundle(tmp_path / "more.zip", records, ALICE, pairs=range(4)),
                      False).runs == 4


def test_machine_ids_sharing_their_first_12_digits_are_two_machines(
        board: Engine, tmp_path: Path, records: Records) -> None:
    first, second = "abcdef012345" + "0" * 20, "abcdef012345" + "f" * 20
    for machine in (second, first):  # the look-alike first: the other is still taken
        added = add_bundle(board, bundle(tmp_path / f"{machine}.zip", records, machine),
                           False)
        assert (added.jobs, added.runs) == (1, 12)
    with Session(board) as session:
        names = sorted(session.scalars(select(Campaign.name)))
    assert names == [f"board.{first}.mine", f"board.{second}.mine"]
    assert [row[0] for row in rows(board)] == [second, first]


def test_a_bundle_made_with_hosts_cannot_pass_its_runs_for_another_machines(
        board: Engine, tmp_path: Path, records: Records) -> None:
    # A job's drift test reads its host's earlier jobs: Bob's runs named by Alice's machine
    # id as their host stay Bob's machine's.
    add_bundle(board, bundle(tmp_path / "alice.zip", records, ALICE), False)
    add_bundle(board, bundle(tmp_path / "bob.zip", records, BOB, host=ALICE), False)
    with Session(board) as session:
        hosts = session.execute(select(BoardJob.machine_id, Run.host).distinct()
                                .join(Run, Run.job_id == BoardJob.job_id)).all()
    assert sorted(hosts) == [(ALICE, ALICE), (BOB, f"{BOB}/{ALICE}")]


def test_one_spec_under_two_job_keys_is_refused(
        board: Engine, tmp_path: Path, records: Records) -> None:
    twice = bundle(tmp_path / "twice.zip", records, ALICE, jobs=lambda jobs: [
        jobs[0], jobs[0].model_copy(update={"job_key": "e" * 64})])
    refused(board, twice, f"job eeeeeeeeeeee has the spec of job {records.jobs[0].job_key[:12]}",
            "one spec under two job keys")
    add_bundle(board, bundle(tmp_path / "once.zip", records, ALICE), False)
    again = bundle(tmp_path / "again.zip", records, ALICE, pairs=range(4), jobs=lambda jobs: [
        jobs[0].model_copy(update={"job_key": "e" * 64})])
    refused(board, again, "one spec under two job keys")


def test_a_board_before_bindings_binds_each_machine_to_its_first_signer(
        either_board: Engine, tmp_path: Path, records: Records) -> None:
    # Migration 0026 on a board that took signed bundles before machines were bound.
    engine = either_board
    alice, bob = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    add_bundle(engine, bundle(tmp_path / "a.zip", records, ALICE, alice), False)
    add_bundle(engine, bundle(tmp_path / "b.zip", records, BOB), False)
    downgrade(engine, "0025")
    with engine.begin() as connection:  # bob's key signed for alice's machine, later
        connection.execute(insert(BoardBundle).values(
            sha256="f" * 64, machine_id=ALICE, signer=fingerprint(public_bytes(bob)),
            farm_version="0", summary_version=1, created_at=datetime(2025, 1, 1, tzinfo=UTC),
            campaigns=[], with_host=False))
    upgrade(engine)
    with Session(engine) as session:
        assert session.execute(select(BoardMachine.machine_id, BoardMachine.signer)).all() \
            == [(ALICE, fingerprint(public_bytes(alice)))]
