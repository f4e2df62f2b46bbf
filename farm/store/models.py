"""Tables: campaign -> job -> run. Typed columns for what people filter and aggregate on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeEngine

from farm.run_metrics import NAME_LENGTH, RUN_METRICS, Kind, RunMetric

# Deterministic constraint names, so batch migrations can alter them on SQLite too.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base of every table: named constraints, and JSON columns for dicts and lists."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class JobState(StrEnum):
    """queued -> running -> done | failed | cancelled. A running job whose lease expired
    becomes lost and is posted again; an interrupted or handed-back job is queued again."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    LOST = "lost"
    CANCELLED = "cancelled"


class Campaign(Base):
    """A named campaign: the matrix file it came from, and its jobs."""

    __tablename__ = "campaign"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    matrix_path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())

    jobs: Mapped[list[Job]] = relationship(back_populates="campaign")


class Job(Base):
    """One comparison. ``spec`` is the full JobSpec; the typed columns are for queries."""

    __tablename__ = "job"
    __table_args__ = (UniqueConstraint("campaign_id", "job_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaign.id", ondelete="CASCADE"),
                                             index=True)
    job_key: Mapped[str] = mapped_column(String(64))
    # JobSpec.comparable_key: jobs with equal keys measured the same thing, whatever their
    # campaign, build or design; `farm compare` matches on it. Null only for a job stored
    # without a spec this farm can read (written by hand, or by a much older farm).
    comparable_key: Mapped[str | None] = mapped_column(String(64), index=True)
    model_name: Mapped[str] = mapped_column(String(200))
    build_name: Mapped[str] = mapped_column(String(200))
    variant_name: Mapped[str] = mapped_column(String(400))
    varying: Mapped[dict[str, Any]] = mapped_column()
    spec: Mapped[dict[str, Any]] = mapped_column()
    gpu_class: Mapped[str] = mapped_column(String(100), default="default",
                                           server_default="default", index=True)
    # queued -> running -> done | failed | cancelled. A running job whose lease expired
    # becomes lost and is posted again; an interrupted local run goes back to queued.
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED, index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3, server_default="3")
    error: Mapped[str | None] = mapped_column(Text)
    # The database owns job ownership (docs/deployment.md, "Visibility timeout and
    # leases"): the worker holding the lease until lease_expires_at (database clock) is the
    # only one allowed to write.
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The job table is the outbox of the broker (see farm.fleet.reconcile): a queued or lost
    # job with no posted_at still has to be posted; one posted longer ago than the repost
    # bound is checked against what the broker holds. Message ids are job-<id>-<post_gen>,
    # so any message in the broker names its job.
    task_id: Mapped[str | None] = mapped_column(String(64))
    posted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    post_gen: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # A retry waits out its backoff here, in the database, not as a countdown message that
    # a dying worker would hold unacknowledged for the broker's whole visibility timeout.
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Renames applied so an old command line runs on this build (`mtp` -> `draft-mtp`).
    translations: Mapped[list[Any]] = mapped_column(default=list, server_default="[]")
    # bad_flag, unsupported_by_build, no_mtp_heads, out_of_memory, model_unreadable, crash,
    # timeout, request_failed, node_busy, config: what reports group failures by.
    failure_class: Mapped[str | None] = mapped_column(String(32))
    # Did the variant really speculate? "ok", "none" (asked for it, drafted nothing: never
    # shown as a speedup) or "not-requested".
    speculation: Mapped[str | None] = mapped_column(String(16))
    # Written when the job finishes: pairs run, why the design stopped adding pairs, and
    # its summary (farm.summary: the speedup with its interval over block pairs,
    # output agreement, drift, the run facts) so reports need not recompute them from
    # every run.
    pairs: Mapped[int | None] = mapped_column(Integer)
    stop_reason: Mapped[str | None] = mapped_column(Text)
    # The job's log speedup's standard error and degrees of freedom: what a random-effects
    # interval over jobs needs (farm.stats.pooling.pool_jobs), typed for SQL users. The df
    # is pairs - 2 for the crossover interval, second-stage pairs - 2 for the two-stage
    # rule, pairs - 1 for the paired t (fewer than 4 pairs, or one order; and migration
    # 0008's read-back of older jobs).
    log_se: Mapped[float | None] = mapped_column(Float)
    df: Mapped[int | None] = mapped_column(Integer)
    summary: Mapped[dict[str, Any] | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Workers that could not make the job's build (source not allowed, no toolkit, no
    # space): worker name -> why. None of them claims it again; once every live worker of
    # its class is here, the job fails with their reasons (farm.store.leases.refuse).
    refusals: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    # Times a worker handed the job back to wait out an outage that may pass (a Hub
    # answering 503, a source that does not answer), neither refusing it nor counting an
    # attempt; past farm.store.leases.DEFER_WAITS the worker refuses it.
    deferrals: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Seconds the last attempt spent making its builds, apart from the measurement (and
    # not counted against the job's time limit); null when it made none.
    build_seconds: Mapped[float | None] = mapped_column(Float)
    # The job's report row as a report last worked it out (JSON text: its across-jobs
    # columns null; never while the job runs), and its head (JSON: the key of the row code
    # and job columns it is valid for, and what reports read across jobs): the next report
    # prints it as it is (farm.results.rows.report_rows). Written by reports, never by
    # workers (farm.store.roles).
    report_row: Mapped[str | None] = mapped_column(Text)
    report_head: Mapped[str | None] = mapped_column(Text)

    campaign: Mapped[Campaign] = relationship(back_populates="jobs")
    runs: Mapped[list[Run]] = relationship(back_populates="job")


class Run(Base):
    """One generation request (arm x block x prompt x repetition) with its provenance.

    Provenance columns are copied onto every row on purpose: a run stays comparable across
    machines and campaigns without joining to anything that may change later. Its metrics'
    columns are made from their declarations (``farm.run_metrics``), below the class: in
    typed code, ``Run.__table__.c.decode_tok_s``.
    """

    __tablename__ = "run"
    __table_args__ = (UniqueConstraint("job_id", "arm", "block", "prompt_id", "repetition"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    arm: Mapped[str] = mapped_column(String(16))
    arm_name: Mapped[str] = mapped_column(String(400))
    block: Mapped[int] = mapped_column(Integer)
    pair: Mapped[int] = mapped_column(Integer)
    position: Mapped[int] = mapped_column(Integer)  # order of the arm inside its pair (0, 1)
    prompt_id: Mapped[str] = mapped_column(String(200))
    prompt_category: Mapped[str] = mapped_column(String(100))
    repetition: Mapped[int] = mapped_column(Integer)

    # Tokens accepted at each draft position (/metrics deltas), and the generated text.
    spec_accepted_per_pos: Mapped[list[Any]] = mapped_column(default=list)
    text: Mapped[str] = mapped_column(Text)

    server_version: Mapped[str] = mapped_column(Text)
    build_name: Mapped[str] = mapped_column(String(200))
    # The commit a source build was made from (the job spec's, resolved at submit); null
    # for a build by name (its version string says what it knows).
    build_commit: Mapped[str | None] = mapped_column(String(40))
    # A downloaded model's source: OWNER/NAME@COMMIT for the Hub, the URL; null for a file
    # of the node's own. With model_sha256, what the run measured is the Hub's bytes.
    model_source: Mapped[str | None] = mapped_column(Text)
    model_file: Mapped[str] = mapped_column(Text)
    model_size: Mapped[int] = mapped_column(BigInteger)
    model_sha256: Mapped[str] = mapped_column(String(64))
    # Indexed: a job's drift test reads the earlier jobs of its host
    # (farm.results.runs.earlier_runs).
    host: Mapped[str] = mapped_column(String(255), index=True)
    argv: Mapped[list[Any]] = mapped_column()
    # Whether the server ran in the node's sandbox (workers.job.runtime.sandbox): its
    # operator may turn it off per node, and every run says which. Null before 0019.
    sandboxed: Mapped[bool | None] = mapped_column()
    server_log: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[list[Any] | None] = mapped_column()  # the text's token ids (/tokenize)
    # The request's seed (workers.job.executor.run_sampling): the same for a prompt and
    # repetition in both arms. Null for runs stored before it was kept.
    seed: Mapped[int | None] = mapped_column(BigInteger)
    gpu_name: Mapped[str | None] = mapped_column(String(200))
    gpu_memory_mb: Mapped[float | None] = mapped_column(Float)  # its GPU's total, MiB
    # The GPU class of the machine that measured it (FARM_GPU_CLASS, a worker's own): the
    # job's, unless `farm run --as-class` ran the job's class on another machine.
    machine_class: Mapped[str | None] = mapped_column(String(100))
    # The GPU throttle reasons seen over the run (NVML), and the node's busiest other
    # processes over it as [name, pid, cores] (workers.job.telemetry.node).
    throttle_reasons: Mapped[list[Any] | None] = mapped_column()
    node_top: Mapped[list[Any] | None] = mapped_column()
    # A run of N simultaneous streams (the job's concurrency, N server slots) holds their
    # totals (tokens, drafts) and means (speeds, latencies, per request) in its metrics, the
    # first stream's text, and what they delivered together (aggregate_tok_s, overlap).
    # Each stream's own figures are in `stream`.
    # No default on this side: an INSERT from an older farm's columns must not name it.
    concurrency: Mapped[int] = mapped_column(Integer, server_default="1")
    worker_name: Mapped[str | None] = mapped_column(String(255))
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    job: Mapped[Job] = relationship(back_populates="runs")
    streams: Mapped[list[Stream]] = relationship(back_populates="run")


# Each metric's SQL type, by its kind (farm.run_metrics).
METRIC_TYPES: dict[Kind, Callable[[], TypeEngine[Any]]] = {
    "float": Float, "int": Integer, "flag": Boolean, "text": lambda: String(NAME_LENGTH)}


def _add_metric_columns(table: type[Base], metrics: Iterable[RunMetric]) -> None:
    """Each declared run metric's column on ``table`` (SQLAlchemy adds it to the table and
    the mapper): nullable unless every run has one."""
    for metric in metrics:
        setattr(table, metric.name, mapped_column(
            metric.name, METRIC_TYPES[metric.kind](), nullable=not metric.required,
            default=metric.default))


_add_metric_columns(Run, RUN_METRICS)


class Stream(Base):
    """One of a run's simultaneous streams (runs of concurrency > 1 only): the slot it ran
    on, its client times in ms from the run's first request, and its own figures: the
    columns of the run metrics declared per stream (``farm.run_metrics``), below the class:
    in typed code, ``Stream.__table__.c.draft_n``."""

    __tablename__ = "stream"
    __table_args__ = (UniqueConstraint("run_id", "stream"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    stream: Mapped[int] = mapped_column(Integer)
    slot: Mapped[int | None] = mapped_column(Integer)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    sent_ms: Mapped[float] = mapped_column(Float)
    first_ms: Mapped[float] = mapped_column(Float)
    last_ms: Mapped[float] = mapped_column(Float)

    run: Mapped[Run] = relationship(back_populates="streams")


_add_metric_columns(Stream, (metric for metric in RUN_METRICS if metric.stream))


class Model(Base):
    """A GGUF file as inspected (no load), keyed by content; runs carry model_sha256."""

    __tablename__ = "model"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    file_name: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    architecture: Mapped[str] = mapped_column(String(100))
    file_type: Mapped[str] = mapped_column(String(100))
    n_params: Mapped[int] = mapped_column(BigInteger)
    context_length: Mapped[int | None] = mapped_column(Integer)
    has_chat_template: Mapped[bool] = mapped_column()
    nextn_layers: Mapped[int] = mapped_column(Integer)
    vocab_size: Mapped[int] = mapped_column(Integer)
    tokenizer: Mapped[str] = mapped_column(String(100))
    vocab_hash: Mapped[str] = mapped_column(String(64))


class GpuSample(Base):
    """One NVML sample of one GPU while an arm's server ran (GPU workers only)."""

    __tablename__ = "gpu_sample"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    block: Mapped[int] = mapped_column(Integer)
    t: Mapped[float] = mapped_column(Float)  # seconds since the block's server started
    device: Mapped[str] = mapped_column(String(100))  # GPU UUID
    vram_used_mb: Mapped[float] = mapped_column(Float)
    power_w: Mapped[float] = mapped_column(Float)
    sm_clock_mhz: Mapped[int] = mapped_column(Integer)
    mem_clock_mhz: Mapped[int] = mapped_column(Integer)
    temperature_c: Mapped[int] = mapped_column(Integer)
    throttle_reasons: Mapped[int] = mapped_column(BigInteger)
    energy_mj: Mapped[int | None] = mapped_column(BigInteger)


class Worker(Base):
    """A worker process bound to one GPU (or GPU set), as it registered itself."""

    __tablename__ = "worker"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    gpu_class: Mapped[str] = mapped_column(String(100), index=True)
    devices: Mapped[list[Any]] = mapped_column()
    gpus: Mapped[list[Any]] = mapped_column()  # [{index, name, uuid}] or [] on a CPU node
    driver: Mapped[str | None] = mapped_column(String(100))
    builds: Mapped[dict[str, Any]] = mapped_column()  # build name -> llama-server --version
    # Git sources it makes jobs' source builds from (its config's `sources:`).
    sources: Mapped[list[Any]] = mapped_column(default=list, server_default="[]")
    models: Mapped[list[Any]] = mapped_column()  # GGUF file names in its models dir
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    stopped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ReportText(Base):
    """A whole ``farm report --format json`` as it was printed (farm.results.printed): per
    scope, ``all`` or ``campaign:ID``, with the stamp of the code and the jobs it came from.
    Written by reports, never by workers (farm.store.roles); used on PostgreSQL only."""

    __tablename__ = "report_text"

    scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign_id: Mapped[int | None] = mapped_column(
        ForeignKey("campaign.id", ondelete="CASCADE"))
    stamp: Mapped[str] = mapped_column(String(128))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    made_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                              server_default=func.now())


class PeerImport(Base):
    """One file of another tool's results read by ``farm import`` (docs/peers.md): which
    tool wrote it, the sha256 of its bytes and of what the user added at import (so the
    same file with the same additions is imported once) and a note."""

    __tablename__ = "peer_import"

    id: Mapped[int] = mapped_column(primary_key=True)
    tool: Mapped[str] = mapped_column(String(32))  # llama-bench, speed-bench, llama-spec-bench
    format: Mapped[str] = mapped_column(String(16))  # json, jsonl, csv, sql
    file_name: Mapped[str] = mapped_column(Text)
    file_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    note: Mapped[str | None] = mapped_column(Text)
    imported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                  server_default=func.now())

    results: Mapped[list[PeerResult]] = relationship(back_populates="peer_import")


class PeerResult(Base):
    """One figure a peer reported (kind ``imported``): never a run of the farm, never part of
    its intervals. Its provenance is what the peer wrote (or the user gave at import), in
    the columns the farm's runs use for the same things, so reports put it beside the farm
    job of the same model file, build and threads/offload, and a history can put it beside
    the farm's builds. Null means the peer did not say."""

    __tablename__ = "peer_result"

    id: Mapped[int] = mapped_column(primary_key=True)
    import_id: Mapped[int] = mapped_column(ForeignKey("peer_import.id", ondelete="CASCADE"),
                                           index=True)
    # Where in the file the figure came from: "line 12", "summary[3]", "lines 2-4".
    source: Mapped[str] = mapped_column(String(200))
    build_commit: Mapped[str | None] = mapped_column(String(64), index=True)
    build_number: Mapped[int | None] = mapped_column(Integer)
    model_file: Mapped[str | None] = mapped_column(Text)  # the file's name, without folders
    model_type: Mapped[str | None] = mapped_column(String(200))
    model_size: Mapped[int | None] = mapped_column(BigInteger)
    model_n_params: Mapped[int | None] = mapped_column(BigInteger)
    backends: Mapped[str | None] = mapped_column(String(200))
    cpu_info: Mapped[str | None] = mapped_column(Text)
    gpu_info: Mapped[str | None] = mapped_column(Text)
    n_threads: Mapped[int | None] = mapped_column(Integer)
    n_gpu_layers: Mapped[int | None] = mapped_column(Integer)
    n_batch: Mapped[int | None] = mapped_column(Integer)
    n_ubatch: Mapped[int | None] = mapped_column(Integer)
    type_k: Mapped[str | None] = mapped_column(String(32))
    type_v: Mapped[str | None] = mapped_column(String(32))
    flash_attn: Mapped[str | None] = mapped_column(String(16))
    # Did the peer speculate? False for plain decoding (llama-bench always), True when it
    # drafted or was configured to, null when the file does not say; and how, if it says.
    speculative: Mapped[bool | None] = mapped_column()
    spec_type: Mapped[str | None] = mapped_column(String(200))
    # What was measured: llama-bench's test name (pp512, tg128, pp512+tg128, "@ d512" for a
    # depth), speed-bench's category, llama-spec-bench's task; prompt, decode or both.
    test: Mapped[str] = mapped_column(String(200))
    measure: Mapped[str] = mapped_column(String(16))
    n_prompt: Mapped[int | None] = mapped_column(Integer)
    n_gen: Mapped[int | None] = mapped_column(Integer)
    n_depth: Mapped[int | None] = mapped_column(Integer)
    # The figure, and only the spread the peer gave: llama-bench's standard deviation over
    # its repetitions (tok_s_sd), how many there were, their values where it lists them.
    tok_s: Mapped[float] = mapped_column(Float)
    tok_s_sd: Mapped[float | None] = mapped_column(Float)
    repetitions: Mapped[int | None] = mapped_column(Integer)
    samples: Mapped[list[Any] | None] = mapped_column()
    drafts: Mapped[int | None] = mapped_column(BigInteger)
    drafted: Mapped[int | None] = mapped_column(BigInteger)
    accepted: Mapped[int | None] = mapped_column(BigInteger)
    drafted_per_pos: Mapped[list[Any] | None] = mapped_column()
    accepted_per_pos: Mapped[list[Any] | None] = mapped_column()
    measured_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    raw: Mapped[dict[str, Any]] = mapped_column()  # the record as the peer wrote it

    peer_import: Mapped[PeerImport] = relationship(back_populates="results")
