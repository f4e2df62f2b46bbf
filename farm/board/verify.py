"""Open a bundle someone else made, as the untrusted file it is, and return its records.

Every check comes before any record is used, and nothing is written: a bundle that fails
one is refused whole with a ``BundleError`` naming the file, what is wrong and what to do.
The checks, in order:

- the file: a regular file of at most ``MAX_BUNDLE_BYTES``, a zip that opens;
- its members' names: only the bundle's own (``farm.board.bundle.MEMBERS``), each once; a
  name with a folder, a ``..`` or a drive is a path, refused before anything is read;
- their sizes, as the zip declares them: at most ``MAX_MEMBER_BYTES`` for the runs,
  ``MAX_JOBS_BYTES`` for the jobs, ``MAX_SMALL_BYTES`` for the manifest and signature,
  and none that inflates more than ``MAX_RATIO`` times (a zip bomb); reading stops at the
  declared size whatever the stream yields;
- the manifest: JSON of the bundle format, a version this farm reads (a newer one asks for
  an upgrade), job summaries of a version it knows;
- each data member's sha256 and size against the manifest;
- the signature, if any, over the manifest's exact bytes;
- every line a valid record (its line number named; its types bound every string and
  number, ``farm.board.bounds``), at most ``MAX_JOBS`` jobs and ``MAX_RUNS`` runs of at
  most ``MAX_LINE_BYTES`` each, every run of a job of the bundle, every run's identity its
  own and held once.

The runs are never held together: ``read_bundle`` checks them as a stream, and a taken
bundle's ``runs`` read them again the same way, every check made again and the member's
digest held against the manifest at the end (a file changed in between is refused then).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

from farm.board.bounds import first_error
from farm.board.bundle import (
    DATA_MEMBERS,
    FORMAT,
    JOBS,
    MANIFEST,
    MEMBERS,
    RUNS,
    SIGNATURE,
    VERSION,
    JobRecord,
    Manifest,
    MemberDigest,
    RunRecord,
    Signature,
    run_identity,
)
from farm.board.keys import fingerprint, verify
from farm.errors import ConfigError
from farm.summary import SUMMARY_VERSION

# The largest bundle read at all, the largest runs and jobs members, the largest manifest
# or signature (a few hundred bytes when honest), and how many times a member may inflate.
MAX_BUNDLE_BYTES = 1 << 30
MAX_MEMBER_BYTES = 512 << 20
MAX_JOBS_BYTES = 64 << 20
MAX_SMALL_BYTES = 1 << 20
MAX_RATIO = 100
# Below this size a member cannot be a bomb, whatever its ratio: an honest small member may
# compress better than MAX_RATIO (a run file of one repeated line), and is read at no risk.
RATIO_FLOOR = 1 << 20
# Records: jobs and runs a bundle may hold (a campaign of 100 jobs of 10 pairs and 20 runs
# per block is 40,000 runs), and the longest line (a run's text is at most 1,000,000
# characters, its token ids 65,536).
MAX_JOBS = 10_000
MAX_RUNS = 100_000
MAX_LINE_BYTES = 8 << 20
# The zip's directory: entries and bytes (a bundle has four members; room for a few more so
# that duplicates and strangers are named as such), and its end record.
MAX_ENTRIES = 16
MAX_DIRECTORY_BYTES = 1 << 16
_END_RECORD = struct.Struct("<4s4H2LH")

# What to do, by what went wrong.
_DAMAGED = "it is not the file its contributor made: ask for it again"
_HOSTILE = "`farm share` never writes such a file: do not use it, and tell its sender"
_UPGRADE = "upgrade the farm (pip install -U specfarm) to read it"

Record = TypeVar("Record", bound=BaseModel)


class BundleError(ConfigError):
    """A bundle refused: the message starts with its path, says what is wrong and what to
    do; nothing was read from it into any store."""

    def __init__(self, path: Path, problem: str, fix: str) -> None:
        super().__init__(f"{path}: {problem}; {fix}")
        self.path, self.problem = path, problem


@dataclass(frozen=True)
class Runs:
    """A checked bundle's runs, read from its file each time they are iterated (so that
    memory stays flat in the bundle's size): every check of ``read_bundle`` made again
    on each run, and a BundleError, after the last, if the member is not the one the
    manifest hashed."""

    path: Path
    manifest: Manifest
    jobs: frozenset[str]
    count: int

    def __iter__(self) -> Iterator[RunRecord]:
        """Each run, checked."""
        return _runs(self.path, self.manifest, self.jobs)

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class Bundle:
    """A checked bundle: its manifest, jobs and runs, the fingerprint of the key that signed
    it (None if unsigned) and the sha256 of the file's bytes."""

    manifest: Manifest
    jobs: tuple[JobRecord, ...]
    runs: Runs
    signer: str | None
    sha256: str


def read_bundle(path: Path) -> Bundle:
    """The records of the bundle at ``path``, every check above passed; else a BundleError."""
    with _archive(path) as (archive, sha256):
        infos = _checked_infos(path, archive)
        manifest_bytes = _read(path, archive, infos[MANIFEST])
        manifest = _manifest(path, manifest_bytes)
        _known_members(path, infos)
        jobs_bytes = _read(path, archive, infos[JOBS])
        signature = _read(path, archive, infos[SIGNATURE]) if SIGNATURE in infos else None
    _check_digest(path, JOBS, jobs_bytes, manifest.members[JOBS])
    signer = None if signature is None else _signer(path, signature, manifest_bytes)
    jobs = _records(path, JOBS, jobs_bytes, JobRecord)
    _check_jobs(path, jobs, manifest)
    keys = frozenset(job.job_key for job in jobs)
    checked = sum(1 for _ in _runs(path, manifest, keys))
    return Bundle(manifest, tuple(jobs), Runs(path, manifest, keys, checked), signer, sha256)


@contextmanager
def _archive(path: Path, digest: bool = True) -> Iterator[tuple[zipfile.ZipFile, str]]:
    """The open zip at ``path`` and the sha256 of its bytes (with ``digest``), read through
    one descriptor."""
    try:
        # Without blocking: a FIFO given as a bundle is refused, not waited on.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise BundleError(path, f"cannot open it ({exc.strerror})",
                          "give the path of a bundle `farm share` made") from None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise BundleError(path, "not a regular file", "give the path of a bundle file")
    with os.fdopen(descriptor, "rb") as file:
        if status.st_size > MAX_BUNDLE_BYTES:
            raise BundleError(path, f"{status.st_size} bytes, more than a bundle may have "
                              f"({MAX_BUNDLE_BYTES})", "share fewer campaigns per bundle")
        _check_directory(path, file, status.st_size)
        file.seek(0)  # the whole file, wherever the directory check left it
        sha256 = hashlib.file_digest(file, "sha256").hexdigest() if digest else ""
        file.seek(0)
        try:
            archive = zipfile.ZipFile(file)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, struct.error) as exc:
            raise BundleError(path, f"not a zip file, or a truncated or damaged one ({exc})",
                              _DAMAGED) from None
        with archive:
            yield archive, sha256


def _check_directory(path: Path, file: IO[bytes], size: int) -> None:
    """The zip's directory small enough to parse, before the zip module parses it: its end
    record found, a few entries, no zip64 (which `farm share` never needs)."""
    tail_bytes = min(size, _END_RECORD.size + 0xFFFF)  # the record and the longest comment
    file.seek(size - tail_bytes)
    tail = file.read(tail_bytes)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _END_RECORD.size:
        raise BundleError(path, "not a zip file, or a truncated one (no end of its "
                          "directory)", _DAMAGED)
    *_, entries, directory_bytes, _, _ = _END_RECORD.unpack_from(tail, at)
    if at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":
        raise BundleError(path, "a zip64 file, which a bundle never is", _HOSTILE)
    if entries > MAX_ENTRIES or directory_bytes > MAX_DIRECTORY_BYTES:
        raise BundleError(path, f"a zip of {entries} members in a directory of "
                          f"{directory_bytes} bytes; a bundle has at most {len(MEMBERS)}",
                          _HOSTILE)


def _checked_infos(path: Path, archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The zip's entries by name once every name and declared size is safe; a manifest is
    among them."""
    infos: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in archive.infolist():
        name = info.filename
        if _is_path(name):
            raise BundleError(path, f"a member named {name!r}: a path, not a member's name",
                              _HOSTILE)
        if name in infos:
            raise BundleError(path, f"two members named {name!r}", _HOSTILE)
        _check_size(path, info)
        total += info.file_size
        infos[name] = info
    if total > MAX_BUNDLE_BYTES:
        raise BundleError(path, f"its members would inflate to {total} bytes, more than a "
                          f"bundle may hold ({MAX_BUNDLE_BYTES})", _HOSTILE)
    if MANIFEST not in infos:
        raise BundleError(path, f"no {MANIFEST}: not a specfarm bundle",
                          "give a file `farm share` made")
    return infos


def _is_path(name: str) -> bool:
    """Whether a member name reaches outside a flat folder (folders, parents, roots,
    drives) or hides in one (control characters)."""
    return (not name or "/" in name or "\\" in name or ".." in name or ":" in name
            or any(ord(char) < 32 for char in name))


def _check_size(path: Path, info: zipfile.ZipInfo) -> None:
    """A member's declared size, compression and inflation within bounds."""
    name = info.filename
    most = {RUNS: MAX_MEMBER_BYTES, JOBS: MAX_JOBS_BYTES}.get(name, MAX_SMALL_BYTES)
    if info.flag_bits & 0x1:
        raise BundleError(path, f"member {name} is encrypted", _HOSTILE)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise BundleError(path, f"member {name} is compressed by method {info.compress_type}, "
                          "not deflate", _HOSTILE)
    if info.file_size > most:
        raise BundleError(path, f"member {name} declares {info.file_size} bytes, more than "
                          f"it may have ({most})", _HOSTILE)
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * info.compress_size:
        raise BundleError(path, f"member {name} would inflate {info.file_size} bytes from "
                          f"{info.compress_size}, more than {MAX_RATIO} times: a zip bomb",
                          _HOSTILE)


def _known_members(path: Path, infos: dict[str, zipfile.ZipInfo]) -> None:
    """Only the bundle's members, and every data member."""
    unknown = sorted(set(infos) - MEMBERS)
    if unknown:
        raise BundleError(path, f"a member this format does not have: {unknown[0]!r}",
                          _HOSTILE)
    missing = [name for name in DATA_MEMBERS if name not in infos]
    if missing:
        raise BundleError(path, f"no {missing[0]}", _DAMAGED)


def _read(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, never more than it declares: a stream longer or shorter than its
    declared size, or one whose checksum fails, is refused."""
    try:
        with archive.open(info) as stream:
            body = stream.read(info.file_size + 1)
    except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, ValueError,
            struct.error, zlib.error) as exc:
        raise BundleError(path, f"member {info.filename} is damaged ({exc})", _DAMAGED) from None
    if len(body) != info.file_size:
        raise BundleError(path, f"member {info.filename} holds {len(body)} bytes, not the "
                          f"{info.file_size} it declares", _DAMAGED)
    return body


def _manifest(path: Path, body: bytes) -> Manifest:
    """The manifest, its format and versions checked before its fields, so that a newer
    bundle asks for an upgrade rather than listing what this farm does not know."""
    try:
        raw = json.loads(body, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise BundleError(path, f"{MANIFEST} is not JSON ({exc})", _DAMAGED) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise BundleError(path, f"{MANIFEST} is not a {FORMAT} manifest",
                          "give a file `farm share` made")
    version, summaries = raw.get("version"), raw.get("summary_version")
    if isinstance(version, int) and version > VERSION:
        raise BundleError(path, f"made by a newer farm (bundle format {version}; this farm "
                          f"reads format {VERSION})", _UPGRADE)
    if isinstance(summaries, int) and summaries > SUMMARY_VERSION:
        raise BundleError(path, f"its job summaries are version {summaries}, newer than this "
                          f"farm's {SUMMARY_VERSION}", _UPGRADE)
    try:
        return Manifest.model_validate_json(body)
    except ValidationError as exc:
        raise BundleError(path, f"{MANIFEST}: {first_error(exc)}", _DAMAGED) from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a key given twice: {sorted(k for k in keys if keys.count(k) > 1)[0]}")
    return dict(pairs)


def _check_digest(path: Path, name: str, body: bytes, digest: MemberDigest) -> None:
    """A data member is the one the manifest hashed."""
    sha256 = hashlib.sha256(body).hexdigest()
    if len(body) != digest.bytes or sha256 != digest.sha256:
        raise BundleError(path, f"{name} does not match the manifest ({len(body)} bytes, "
                          f"sha256 {sha256[:12]}; the manifest says {digest.bytes} bytes, "
                          f"sha256 {digest.sha256[:12]}): it was changed after it was made",
                          _DAMAGED)


def _signer(path: Path, body: bytes, manifest_bytes: bytes) -> str:
    """The fingerprint of the key whose signature over the manifest verifies."""
    try:
        signature = Signature.model_validate_json(body)
        public = base64.b64decode(signature.public_key, validate=True)
        signed = base64.b64decode(signature.signature, validate=True)
    except (ValidationError, binascii.Error) as exc:
        raise BundleError(path, f"{SIGNATURE} is not a signature ({exc.__class__.__name__})",
                          _DAMAGED) from None
    if not verify(public, signed, manifest_bytes):
        raise BundleError(path, f"its signature does not verify (key {fingerprint(public)}): "
                          "the manifest was changed after it was signed, or the signature "
                          "is not over it", _DAMAGED)
    return fingerprint(public)


def _records(path: Path, name: str, body: bytes, model: type[Record]) -> list[Record]:
    """Each line of a JSONL member as ``model``; the first invalid line is named."""
    if body and not body.endswith(b"\n"):
        raise BundleError(path, f"{name} does not end with a newline", _DAMAGED)
    records = []
    for number, line in enumerate(body.split(b"\n")[:-1], start=1):
        try:
            records.append(model.model_validate_json(line))
        except ValidationError as exc:
            raise BundleError(path, f"{name} line {number}: {first_error(exc)}",
                              _DAMAGED) from None
    return records


def _check_jobs(path: Path, jobs: list[JobRecord], manifest: Manifest) -> None:
    """Jobs of the manifest's campaigns, each once, with summaries of its version."""
    if not jobs:
        raise BundleError(path, "it holds no job", "share a campaign with finished jobs")
    if len(jobs) > MAX_JOBS:
        raise BundleError(path, f"{JOBS}: {len(jobs)} jobs, more than a bundle may hold "
                          f"({MAX_JOBS})", "share fewer campaigns per bundle")
    seen: set[str] = set()
    for number, job in enumerate(jobs, start=1):
        where = f"{JOBS} line {number}"
        if job.job_key in seen:
            raise BundleError(path, f"{where}: job {job.job_key[:12]} given twice", _DAMAGED)
        seen.add(job.job_key)
        if job.campaign not in manifest.campaigns:
            raise BundleError(path, f"{where}: campaign {job.campaign!r} is not one the "
                              "manifest lists", _DAMAGED)
        if job.summary.get("version") != manifest.summary_version:
            raise BundleError(path, f"{where}: a summary of version "
                              f"{job.summary.get('version')!r}, not the manifest's "
                              f"{manifest.summary_version}", _DAMAGED)


def _runs(path: Path, manifest: Manifest, jobs: frozenset[str]) -> Iterator[RunRecord]:
    """Each line of runs.jsonl as a checked run (``_checked_run``), read as a stream from the
    file at ``path``. The member's digest is held against the manifest once it is read
    whole: a member changed after it was made is refused as such even where a line of it
    fails first (the line's problem is named only when the member is the one hashed)."""
    with _archive(path, digest=False) as (archive, _):
        info = _checked_infos(path, archive).get(RUNS)
        if info is None:
            raise BundleError(path, f"no {RUNS}", _DAMAGED)
        digest, size, seen = hashlib.sha256(), 0, set[str]()
        problem: str | None = None
        try:
            with archive.open(info) as stream:
                for number in count(1):
                    line = stream.readline(MAX_LINE_BYTES + 1)
                    if not line:
                        break
                    digest.update(line)
                    size += len(line)
                    if problem is None:
                        run, problem = _checked_run(number, line, jobs, manifest, seen)
                        if run is not None:
                            yield run
        except (zipfile.BadZipFile, EOFError, OSError, RuntimeError, ValueError,
                struct.error, zlib.error) as exc:
            raise BundleError(path, f"member {RUNS} is damaged ({exc})", _DAMAGED) from None
    expected = manifest.members[RUNS]
    if size != expected.bytes or digest.hexdigest() != expected.sha256:
        raise BundleError(path, f"{RUNS} does not match the manifest ({size} bytes, sha256 "
                          f"{digest.hexdigest()[:12]}; the manifest says {expected.bytes} "
                          f"bytes, sha256 {expected.sha256[:12]}): it was changed after it "
                          "was made", _DAMAGED)
    if problem is not None:
        # A host in a bundle made without hosts is a forgery; anything else, damage.
        raise BundleError(path, problem, _HOSTILE if "made without hosts" in problem
                          else _DAMAGED)


def _checked_run(number: int, line: bytes, jobs: frozenset[str], manifest: Manifest,
                 seen: set[str]) -> tuple[RunRecord, None] | tuple[None, str]:
    """runs.jsonl's line ``number`` as a run, or what is wrong with it: too many runs, too
    long a line, an invalid record, a run of a job the bundle lacks, an identity not its
    own or held twice, a host other than the manifest's machine in a bundle made without
    hosts."""
    where = f"{RUNS} line {number}"
    if number > MAX_RUNS:
        return None, f"{RUNS}: more than {MAX_RUNS} runs; share fewer campaigns per bundle"
    if len(line) > MAX_LINE_BYTES:
        return None, f"{where} is longer than {MAX_LINE_BYTES} bytes"
    if not line.endswith(b"\n"):
        return None, f"{RUNS} does not end with a newline"
    try:
        run = RunRecord.model_validate_json(line)
    except ValidationError as exc:
        return None, f"{where}: {first_error(exc)}"
    if run.job_key not in jobs:
        return None, f"{where}: a run of job {run.job_key[:12]}, which the bundle does not hold"
    identity = run_identity(manifest.machine_id, run.job_key, run.arm, run.block,
                            run.prompt_id, run.repetition)
    if run.identity != identity:
        return None, f"{where}: identity {run.identity[:12]} is not the run's ({identity[:12]})"
    if identity in seen:
        return None, f"{where}: the same run given twice"
    seen.add(identity)
    if not manifest.with_host and run.host != manifest.machine_id:
        return None, f"{where}: host {run.host!r} in a bundle made without hosts"
    return run, None
