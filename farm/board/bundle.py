"""A shared bundle: its typed records and its file format (version 1).

A bundle is one zip file of exactly these members, no folders:

    manifest.json   what it is: format, version, summary version, farm version, machine id,
                    time made, campaigns, whether hosts were kept, and the sha256 and size
                    of each member below
    jobs.jsonl      one ``JobRecord`` per line: a finished job of the store
    runs.jsonl      one ``RunRecord`` per line: a run of one of those jobs
    signature.json  (signed bundles only) the contributor's ed25519 public key and its
                    signature over the exact bytes of manifest.json

Every record is a pydantic model that refuses unknown keys, and its fields are typed so that
a value of the wrong shape cannot be held (a hash is 64 lowercase hex digits, a machine id
32). Lines are JSON with sorted keys and the members are stored without timestamps, so the
same records always make the same bytes. ``farm.board.verify`` reads a bundle back.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    model_validator,
)

import farm
from farm.board.bounds import (
    MAX_ARGV,
    MAX_POSITIONS,
    MAX_TOKENS,
    Celsius,
    Cores,
    Count,
    Count64,
    Int64,
    Joules,
    JsonTree,
    Load,
    MHz,
    MiB,
    Millis,
    RunText,
    Seconds,
    ServerVersion,
    Share,
    StatedSummary,
    Text40,
    Text50,
    Text100,
    Text200,
    Text255,
    Text400,
    Text1000,
    Text4096,
    TokPerS,
    Watts,
    text,
)
from farm.board.keys import public_bytes, sign
from farm.errors import ConfigError
from farm.gpus import ClassName
from farm.matrix.schema import MAX_CONCURRENCY, Name
from farm.matrix.spec import ArmRole
from farm.run_metrics import NAME_LENGTH, RUN_METRICS, RunMetric, Unit
from farm.summary import SUMMARY_VERSION

FORMAT: Final = "specfarm-bundle"
VERSION: Final = 1
MANIFEST: Final = "manifest.json"
JOBS: Final = "jobs.jsonl"
RUNS: Final = "runs.jsonl"
SIGNATURE: Final = "signature.json"
# The members the manifest hashes, and every name a bundle may hold.
DATA_MEMBERS: Final = (JOBS, RUNS)
MEMBERS: Final = frozenset({MANIFEST, JOBS, RUNS, SIGNATURE})
# The store's run columns a bundle leaves out: row ids of the contributor's store, the
# server log's local path, and any metric declared not shared (farm.run_metrics).
DROPPED_RUN_COLUMNS: Final = ("id", "job_id", "server_log",
                              *(metric.name for metric in RUN_METRICS if not metric.shared))

Hex64 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
MachineId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Base64 = Annotated[str, StringConstraints(max_length=200, pattern=r"^[A-Za-z0-9+/]*={0,2}$")]
DataMember = Literal["jobs.jsonl", "runs.jsonl"]


class _Record(BaseModel):
    """Base of a bundle's records: immutable, no unknown keys, no NaN or infinity (JSON has
    none), and no silent conversions (a count is never read from "3")."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class MemberDigest(_Record):
    """What the manifest says of one member: the sha256 of its bytes and how many."""

    sha256: Hex64
    bytes: Count


class Manifest(_Record):
    """A bundle's ``manifest.json``: what made it, whose it is, and its members' digests."""

    format: Literal["specfarm-bundle"] = Field(description="Always specfarm-bundle.")
    version: Literal[1] = Field(description="The bundle format's version.")
    summary_version: Annotated[int, Field(ge=1)] = Field(
        description="The version of the job summaries in jobs.jsonl (farm.summary).")
    farm_version: Text50 = Field(description="The farm that wrote the bundle.")
    machine_id: MachineId = Field(description="The data dir's random id (farm.board.machine).")
    created_at: AwareDatetime = Field(description="When the bundle was made (UTC).")
    campaigns: list[Name] = Field(min_length=1, description="The campaigns shared.")
    with_host: bool = Field(description="Whether runs keep their host and worker names.")
    members: dict[DataMember, MemberDigest] = Field(description="sha256 and size of each "
                                                    "data member.")

    @model_validator(mode="after")
    def _every_member_and_campaign_once(self) -> Manifest:
        missing = [name for name in DATA_MEMBERS if name not in self.members]
        if missing:
            raise ValueError(f"no digest of {', '.join(missing)}")
        if len(set(self.campaigns)) != len(self.campaigns):
            raise ValueError("a campaign listed twice")
        return self


class Signature(_Record):
    """A signed bundle's ``signature.json``: base64 of the raw ed25519 public key and of
    its signature over the exact bytes of manifest.json."""

    public_key: Base64
    signature: Base64


class JobRecord(_Record):
    """One finished job, as the store holds it (``farm.store.models.Job``), its spec's
    local paths replaced by their roles (``farm.board.share``)."""

    campaign: Name = Field(description="The campaign it belongs to.")
    job_key: Hex64 = Field(description="The job's key (JobSpec.job_key); runs name it.")
    comparable_key: Hex64 | None = Field(description="JobSpec.comparable_key, if known.")
    model_name: Text200
    build_name: Text200
    variant_name: Text400
    varying: JsonTree = Field(description="What differs between the campaign's jobs.")
    spec: JsonTree = Field(description="The stored JobSpec, paths as roles.")
    gpu_class: ClassName
    state: Literal["done"] = Field(description="Only finished jobs are shared.")
    pairs: Count = Field(description="Block pairs run.")
    stop_reason: Text1000 | None
    speculation: Literal["ok", "none", "not-requested"] | None
    summary: StatedSummary = Field(description="The job summary as the contributor's farm "
                                   "stated it, at the manifest's summary version.")
    started_at: AwareDatetime | None
    finished_at: AwareDatetime | None


# A bundle's field of each shared run metric (farm.run_metrics): bounded by its unit,
# nullable where the store's column is, and absent from bundles made before its column
# (a metric added after FORMAT_SCHEMA, the store's schema when format 1 was first written).
UNIT_BOUNDS: Final[dict[Unit, Any]] = {
    "tok/s": TokPerS, "ms": Millis, "s": Seconds, "MiB": MiB, "J": Joules, "J/token": Joules,
    "W": Watts, "MHz": MHz, "cores": Cores, "load": Load, "share": Share, "tokens": Count,
    "count": Count, "°C": Celsius, "flag": bool, "name": text(NAME_LENGTH)}
FORMAT_SCHEMA: Final = "0023"


def _metric_field(metric: RunMetric) -> tuple[Any, Any]:
    bound = UNIT_BOUNDS[metric.unit]
    if metric.required:
        return bound, ...
    return bound | None, None if metric.since > FORMAT_SCHEMA else ...


if TYPE_CHECKING:
    _MetricFields = _Record
else:
    _MetricFields = create_model("_MetricFields", __base__=_Record, **{
        metric.name: _metric_field(metric) for metric in RUN_METRICS if metric.shared})


class RunRecord(_MetricFields):
    """One run: every column of the store's run (``farm.store.models.Run``, and its metrics'
    declarations, ``farm.run_metrics``, which say what each means) but its row ids and
    server log path; its job by key, and its identity.

    ``host`` is the machine id and ``worker_name`` is null unless the bundle was made with
    hosts; argv's paths are roles (``BUILD:<name>``, ``MODELS_DIR/<file>``, ``PATH``)."""

    job_key: Hex64 = Field(description="The job the run belongs to.")
    identity: Hex64 = Field(description="run_identity(): the same run in every re-share.")
    arm: ArmRole
    arm_name: Text400
    block: Count
    pair: Count
    position: Count
    prompt_id: Text200
    prompt_category: Text100
    repetition: Count
    spec_accepted_per_pos: Annotated[list[Count], Field(max_length=MAX_POSITIONS)]
    text: RunText
    server_version: ServerVersion
    build_name: Text200
    build_commit: Text40 | None
    model_source: Text4096 | None
    model_file: Text1000
    model_size: Count64
    model_sha256: Hex64
    host: Text200
    argv: Annotated[list[Text4096], Field(max_length=MAX_ARGV)]
    sandboxed: bool | None
    tokens: Annotated[list[Count], Field(max_length=MAX_TOKENS)] | None
    seed: Int64 | None
    gpu_name: Text200 | None
    gpu_memory_mb: MiB | None
    machine_class: Text100 | None
    throttle_reasons: Annotated[list[Text100], Field(max_length=64)] | None
    # The busiest other processes (name, pid, cores): only in a bundle made with hosts.
    node_top: Annotated[list[tuple[Text100, Count, Cores]], Field(max_length=64)] | None
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]
    worker_name: Text255 | None
    attempt: Annotated[int, Field(ge=1, le=1000)]
    started_at: AwareDatetime


def run_identity(machine_id: str, job_key: str, arm: str, block: int, prompt_id: str,
                 repetition: int) -> str:
    """A run's name across bundles: the sha256 of where it ran and what it was, so a board
    takes a run once however often its bundle is shared again."""
    parts = (machine_id, job_key, arm, str(block), prompt_id, str(repetition))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def encode_lines(records: Iterable[BaseModel]) -> bytes:
    """JSONL of ``records``: one line each, sorted keys, no spaces, UTF-8."""
    return b"".join(_json(record.model_dump(mode="json")) + b"\n" for record in records)


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def write_bundle(path: Path, *, machine_id: str, campaigns: Sequence[str], with_host: bool,
                 jobs: Sequence[JobRecord], runs: Sequence[RunRecord],
                 signing_key: Ed25519PrivateKey | None = None,
                 created_at: datetime | None = None) -> Manifest:
    """Write the bundle of ``jobs`` and ``runs`` to ``path`` (signed with ``signing_key``
    if given) and return its manifest; a ConfigError when there is no job to share.

    The file appears whole or not at all: it is written beside ``path``, synced, then
    renamed over it."""
    if not jobs:
        raise ConfigError(f"nothing to share: {', '.join(campaigns)} hold no finished job; "
                          "share a campaign after `farm run` finished some of its jobs")
    data = {JOBS: encode_lines(jobs), RUNS: encode_lines(runs)}
    manifest = Manifest(
        format=FORMAT, version=VERSION, summary_version=SUMMARY_VERSION,
        farm_version=farm.__version__, machine_id=machine_id,
        created_at=(created_at or datetime.now(UTC)).replace(microsecond=0),
        campaigns=list(campaigns), with_host=with_host,
        members={"jobs.jsonl": _digest(data[JOBS]), "runs.jsonl": _digest(data[RUNS])})
    members = {MANIFEST: _json(manifest.model_dump(mode="json")) + b"\n", **data}
    if signing_key is not None:
        signature = Signature(public_key=_base64(public_bytes(signing_key)),
                              signature=_base64(sign(signing_key, members[MANIFEST])))
        members[SIGNATURE] = _json(signature.model_dump(mode="json")) + b"\n"
    _write_atomically(path, members)
    return manifest


def _digest(body: bytes) -> MemberDigest:
    return MemberDigest(sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _write_atomically(path: Path, members: dict[str, bytes]) -> None:
    """The zip of ``members`` at ``path``, through a synced temporary file in its folder."""
    folder = path.parent
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.",
                                             suffix=".part")
    try:
        with os.fdopen(descriptor, "wb") as file:
            with zipfile.ZipFile(file, "w") as archive:
                for name, body in members.items():
                    # A fixed time and mode: the same members make the same file.
                    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    archive.writestr(info, body)
            os.fchmod(file.fileno(), 0o644)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)
