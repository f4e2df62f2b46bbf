"""Execute one job: baseline and variant arms in counterbalanced blocks on real servers.

This is the one function both ``farm run`` (in-process) and the Celery worker call. It
reads nothing from the store itself: what is already done and where results go come
through a ``RunSink``, so the caller decides how writes are guarded.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from farm.errors import ConfigError
from farm.matrix.files import under
from farm.matrix.spec import ArmRole, JobSpec, Prompt
from farm.stats.design import StopDecision
from farm.stats.frame import tidy_runs
from farm.stats.sequential import decision_stop, precision_stop
from farm.stats.speedup import pair_log_ratios, pair_orders
from farm.stats.twostage import stop_decision
from workers.job.checks import Preflight, preflight
from workers.job.quiet import settle
from workers.job.resolve import NodeFiles, flag_files
from workers.job.results import BlockStart, Outcome, RunKey, RunResult, Slot
from workers.job.runtime.client import Generation, ServerClient
from workers.job.runtime.sandbox import Sandbox
from workers.job.runtime.server import LlamaServer
from workers.job.runtime.server_log import SpecStatsLog, context_memory, weights_spilled
from workers.job.telemetry import GpuInfo, Sample, Sampler, cuda_env
from workers.job.telemetry.node import NodeLoad, NodeWatch, cpu_state
from workers.paths import NodePaths

WARMUP_TOKENS = 8


def merge_streams(streams: Sequence[Generation]) -> Generation:
    """A run's figures from its simultaneous streams: totals of tokens and drafts, means of
    the per-request speeds and latencies, the first stream's text (what agreement compares:
    every stream of a run reads the same prompt)."""
    if len(streams) == 1:
        return streams[0]
    first = streams[0]
    prompt_speeds = [g.prompt_tok_s for g in streams if g.prompt_tok_s is not None]
    return Generation(
        text=first.text, prompt_tokens=first.prompt_tokens,
        generated_tokens=sum(g.generated_tokens for g in streams),
        prompt_tok_s=statistics.fmean(prompt_speeds) if prompt_speeds else None,
        decode_tok_s=statistics.fmean(g.decode_tok_s for g in streams),
        ttft_ms=statistics.fmean(g.ttft_ms for g in streams),
        e2e_ms=statistics.fmean(g.e2e_ms for g in streams),
        draft_n=sum(g.draft_n for g in streams),
        draft_accepted=sum(g.draft_accepted for g in streams),
        chunk_gaps_ms=[gap for g in streams for gap in g.chunk_gaps_ms],
        sent_at=min(g.sent_at for g in streams), first_at=min(g.first_at for g in streams),
        last_at=max(g.last_at for g in streams), streams=len(streams))


class RunSink(Protocol):
    """Where a job's runs go; implementations guard writes (e.g. by lease) as they need."""

    def done(self) -> dict[RunKey, float]:
        """Runs already stored, with their decode tok/s (for the stopping rule)."""
        ...

    def start(self, checked: Preflight) -> None:
        """The job passed its checks and is about to run."""
        ...

    def record(self, result: RunResult, checked: Preflight) -> None:
        """Keep one run."""
        ...

    def record_samples(self, slot: Slot, samples: list[Sample]) -> None:
        """Keep the GPU samples of one block."""
        ...


ProgressFn = Callable[[RunResult], None]
DecisionFn = Callable[[StopDecision], None]


def variant_opens(job_key: str) -> bool:
    """Whether the variant opens the job's first pair: a coin seeded by the job key, so a
    first-block effect is not paid by the same arm in every job, and a resumed job keeps
    its order."""
    return random.Random(job_key).random() < 0.5


def pair_slots(pair: int, variant_first: bool = False) -> list[Slot]:
    """The two blocks of a pair, counterbalanced: AB, BA, AB, ... (BA, AB, ... when the
    variant opens) so that a linear drift favours neither arm."""
    order: tuple[ArmRole, ArmRole] = (("baseline", "variant") if (pair % 2 == 0) != variant_first
                                      else ("variant", "baseline"))
    return [Slot(block=2 * pair + position, pair=pair, position=position, role=role)
            for position, role in enumerate(order)]


def run_sampling(sampling: dict[str, Any], prompt_id: str, repetition: int,
                 stream: int = 0) -> dict[str, Any]:
    """The request's sampling for one run: the matrix's seed mixed with the prompt, the
    repetition and (after the first) the stream, the same in both arms. Repetitions and
    streams then draw afresh where a seed matters (at temperature > 0, and the
    synthetic-acceptance draws llama-server seeds with it), while greedy outputs do not
    depend on it."""
    key = f"{sampling.get('seed', 0)}:{prompt_id}:{repetition}{f':{stream}' if stream else ''}"
    key_bytes = key.encode()
    # 0xFFFFFFFF is llama.cpp's "pick a random seed".
    seed = int.from_bytes(hashlib.sha256(key_bytes).digest()[:4], "big") % 0xFFFFFFFF
    return {**sampling, "seed": seed}


def slot_of(block: int) -> tuple[int, int]:
    """A block's pair and its place in the pair (``pair_slots``' layout)."""
    return block // 2, block % 2


def stop_rule(spec: JobSpec, measured: dict[RunKey, float], pairs_done: int) -> StopDecision:
    """After each complete pair, the job's stop rule: the decision or precision design's
    look (``farm.stats.sequential``), else the two-stage rule (``farm.stats.twostage``)."""
    frame = tidy_runs([(key.arm, key.block, *slot_of(key.block), key.prompt_id,
                        key.repetition, tok_s)
                       for key, tok_s in measured.items() if slot_of(key.block)[0] < pairs_done],
                      ["arm", "block", "pair", "position", "prompt_id", "repetition",
                       "decode_tok_s"])
    design = spec.design
    rule = (stop_decision if not design.sequential else
            decision_stop if design.rule == "decision" else precision_stop)
    return rule(pair_log_ratios(frame), pair_orders(frame), design, pairs_done)


@dataclass(frozen=True)
class Block:
    """One server session of one arm: what it runs and where its results go."""

    spec: JobSpec
    slot: Slot
    todo: list[tuple[Prompt, int]]
    log_path: Path
    roots: list[int]  # the farm's processes on the node: their trees are not other work
    waited_s: float  # how long it waited for quiet before it started


def execute_job(spec: JobSpec, sink: RunSink, *, node: NodeFiles, paths: NodePaths,
                on_run: ProgressFn | None = None, on_decision: DecisionFn | None = None,
                gpus: Sequence[GpuInfo] = (), siblings: Callable[[], Sequence[int]] = tuple,
                between_blocks: Callable[[], object] = tuple) -> Outcome:
    """Run the job's block pairs until its two-stage rule stops; raises ``FarmError``.

    ``spec`` has its builds and model resolved on ``node``. The job is checked (and old
    spellings translated) first, as a matrix load checks it, against this node's builds;
    runs already stored are kept (a resumed job only runs what is missing); ``gpus`` are
    the devices the servers run on, sampled through NVML while they do (none on a CPU node);
    ``siblings`` the pids of the farm's other workers on this node: this process, they and
    their servers are the farm's own work, everything else on the node other work, waited
    out or refused before each block as the job's ``busy_node`` says (``workers.job.quiet``);
    ``between_blocks`` is called before each block (a waiting build of this node goes
    first: ``workers.setup.ondemand.measuring``); ``on_run`` after each run and
    ``on_decision`` after each pair's stopping decision (its pairs: the plan so far).
    """
    checked = preflight(spec, node, paths)
    sink.start(checked)
    spec, measured = checked.spec, sink.done()

    def record(result: RunResult) -> None:
        measured[result.key] = result.generation.decode_tok_s
        if on_run:
            on_run(result)

    for pair in range(spec.max_pairs):
        for slot in pair_slots(pair, variant_opens(spec.job_key)):
            todo = [(prompt, rep) for prompt in spec.prompts for rep in range(spec.repetitions)
                    if RunKey(slot.role, slot.block, prompt.id, rep) not in measured]
            if todo:
                between_blocks()
                log_path = under(paths.logs_dir, spec.job_key[:16],
                                 f"block{slot.block}-{slot.role}.log", what="log")
                roots = [os.getpid(), *siblings()]
                waited = settle(spec, slot.block, roots)
                _run_block(Block(spec, slot, todo, log_path, roots, waited), sink, checked,
                           list(gpus), Sandbox(paths.sandbox), record)
        decision = stop_rule(spec, measured, pair + 1)
        if on_decision:
            on_decision(decision)
        if decision.stop:
            return Outcome(checked, pair + 1, decision.reason)
    return Outcome(checked, spec.max_pairs, f"max pairs ({spec.max_pairs}) reached")


def check_fit(client: ServerClient, spec: JobSpec, prompts: Sequence[Prompt]) -> None:
    """ConfigError unless every prompt and its generation fit one slot's context, as the
    started server reports it (ctx-size shared among the slots, capped by the model's
    training context): past it, llama-server would cut the generation short."""
    contexts = client.slot_contexts()
    n_ctx = min(contexts)
    for prompt in {prompt.id: prompt for prompt in prompts}.values():
        needed = client.prompt_tokens(prompt.text, spec.prompt_mode) + spec.n_predict
        if needed > n_ctx:
            raise ConfigError(
                f"prompt {prompt.id!r}: its {needed - spec.n_predict} tokens and n-predict "
                f"{spec.n_predict} do not fit the {n_ctx} tokens of context each of the "
                f"server's {len(contexts)} slot(s) has (ctx-size is shared among the "
                f"`concurrency` slots and capped by the model's training context): set the "
                f"matrix's ctx-size flag to at least {len(contexts) * needed}, or lower "
                "concurrency, n-predict or the prompt's length")


def run_streams(client: ServerClient, spec: JobSpec, prompt: str, n_predict: int,
                samplings: Sequence[dict[str, Any]], *, ignore_eos: bool) -> list[Generation]:
    """One request per sampling, all sent at once, the i-th on slot i (one alone is sent as
    before, without naming a slot)."""
    def stream(index: int) -> Generation:
        return client.generate(prompt, mode=spec.prompt_mode, n_predict=n_predict,
                               sampling=samplings[index], ignore_eos=ignore_eos,
                               slot=index if len(samplings) > 1 else None)

    if len(samplings) == 1:
        return [stream(0)]
    with ThreadPoolExecutor(max_workers=len(samplings)) as pool:
        return list(pool.map(stream, range(len(samplings))))


def _run_block(block: Block, sink: RunSink, checked: Preflight, gpus: list[GpuInfo],
               sandbox: Sandbox, on_run: ProgressFn) -> None:
    spec, arm = block.spec, block.spec.arm(block.slot.role)
    width = spec.concurrency
    server = LlamaServer(arm.build.local_path, spec.model.local_path, arm.argv, block.log_path,
                         parallel=width, env=cuda_env(gpus) if gpus else None,
                         offline=checked.probe(arm.role).option("offline") is not None,
                         sandbox=sandbox, trusted=arm.build.source is None, gpu=bool(gpus),
                         reads=flag_files(arm), requests=(len(block.todo) + 1) * width)
    with server, ServerClient(server.http_transport()) as client, \
            Sampler(gpus, server.pid) as sampler, server.output_bounded():
        argv = server.argv
        speculative = client.slot_speculative()
        started_log = server.log_text()
        spilled, memory = weights_spilled(started_log), context_memory(started_log)
        check_fit(client, spec, [prompt for prompt, _ in block.todo])
        spec_log = SpecStatsLog(block.log_path, server.log_offset)
        # The warm-up, one request per slot, was the server's requests 0 .. width - 1.
        warming = time.monotonic()
        run_streams(client, spec, block.todo[0][0].text, WARMUP_TOKENS,
                    [spec.sampling] * width, ignore_eos=True)
        assert server.start_s is not None  # set as /health answered
        start = BlockStart(server.start_s, time.monotonic() - warming)
        watch = NodeWatch(block.roots)
        for request, (prompt, repetition) in enumerate(block.todo, start=1):
            watch.begin()
            started, began = datetime.now(UTC), sampler.mark()
            before = client.spec_counters()
            samplings = [run_sampling(spec.sampling, prompt.id, repetition, stream)
                         for stream in range(width)]
            streams = run_streams(client, spec, prompt.text, spec.n_predict, samplings,
                                  ignore_eos=spec.stop == "fixed")
            counters = client.spec_counters() - before
            other = watch.end()
            node = NodeLoad(other, cpu_state(), sampler.other_gpu_processes(watch.own),
                            block.waited_s)
            generation = merge_streams(streams)
            result = RunResult(
                key=RunKey(block.slot.role, block.slot.block, prompt.id, repetition),
                slot=block.slot, prompt=prompt, arm_name=arm.name, build_name=arm.build.name,
                generation=generation, streams=tuple(streams),
                seeds=tuple(sampling["seed"] for sampling in samplings),
                counters=counters, spec_stats=spec_log.request(request * width, width),
                memory=memory, argv=argv, sandboxed=server.sandboxed,
                server_log=str(block.log_path), started_at=started,
                telemetry=sampler.summarize(began, sampler.mark()),
                slot_speculative=speculative, weights_spilled=spilled,
                tokens=client.tokenize(generation.text), gpu_name=gpus[0].name if gpus else None,
                gpu_memory_mb=gpus[0].vram_total_mb if gpus else None, node=node,
                start=start)
            sink.record(result, checked)
            on_run(result)
        if gpus:
            sink.record_samples(block.slot, sampler.samples)


def host_name() -> str:
    """This machine's name, as stored with each run."""
    return socket.gethostname()
