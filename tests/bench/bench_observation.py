"""What the farm's own observation costs (a script, not a test): decode tok/s of a raw
llama-server with the user's flags against one with each addition the farm makes.

    verbosity   --log-verbosity 4 (the speculative statistics in the log)
    metrics     --metrics (the /metrics counters)
    calls       --metrics, and the farm's calls around each run: /slots once per block,
                /metrics before and after each run, /tokenize of each run's text
    farm        all of them, as the farm starts its servers
    sandbox     the raw server in the farm's sandbox (bubblewrap, a UNIX socket in a
                namespace with only loopback: docs/security.md); every other one runs
                with the sandbox off
    farm-sandboxed  all of the farm's additions, in the sandbox: the farm's servers today

``--per block`` (the default): a round runs one block of each (a fresh server, a warm-up,
``--runs`` requests of ``--tokens`` tokens, the same client), raw first on even rounds and
last on odd ones, the others rotated, so that a drift favours none. ``--per request``: every
configuration's server is started once and stays up, idle between its requests (one
decodes at a time, after a pause that lets the last one's threads go quiet), and a round
sends one request to each, the order rotated each round: the configurations being
compared are then seconds apart instead of a block apart, so the machine's slow drift
(about ±10% between blocks here) falls out of each round's ratios. One server per
configuration leaves out what differs between server processes (where the model's pages
and the code land); ``--blocks B`` starts every server afresh B times and takes the
interval over those blocks, so that it holds the process-to-process spread too.

Each addition's cost is the geometric mean over rounds of raw (or ``--against``'s) /
addition decode tok/s,
less 1, with its 95% t interval over rounds. A round with a busy block or round (other
processes' CPU over it at or above ``farm.stats.busy.BUSY_CORES``) is left out and
counted. Both arms of a job: the baseline's flags, and the variant's (n-gram for SmolLM2,
draft-mtp for the MTP oracle). It asserts
nothing; run it alone on the CPU:

    flock /tmp/farm-cpu.lock .venv/bin/python tests/bench/bench_observation.py \\
        --model smollm2 --arm baseline --rounds 8
    ... --per request --rounds 40
    ... --per request --blocks 8 --rounds 6 --against farm --additions farm-sandboxed
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from farm.settings import load_settings
from farm.stats.busy import BUSY_CORES
from farm.stats.intervals import t_margin
from workers.job.runtime.client import ServerClient
from workers.job.runtime.sandbox import Sandbox, sandbox_status
from workers.job.runtime.server import LOG_VERBOSITY, LlamaServer
from workers.job.telemetry.node import NodeWatch
from workers.paths import NodePaths
from workers.setup.provision import provision

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
# The user's flags per model and arm.
ARMS = {
    "smollm2": {"baseline": ["--threads", "2", "--ctx-size", "1024"],
                "variant": ["--threads", "2", "--ctx-size", "1024",
                            "--spec-type", "ngram-simple"]},
    "qwen35-mtp-oracle-cpu": {"baseline": ["--threads", "2", "--ctx-size", "1024"],
                              "variant": ["--threads", "2", "--ctx-size", "1024",
                                          "--spec-type", "draft-mtp", "--spec-draft-n-max",
                                          "2"]},
}
FARM_FLAGS = ["--log-verbosity", str(LOG_VERBOSITY), "--metrics"]
# Flags, whether the farm's calls are made, whether the server runs in the sandbox.
ADDITIONS: dict[str, tuple[list[str], bool, bool]] = {
    "raw": ([], False, False),
    "verbosity": (["--log-verbosity", str(LOG_VERBOSITY)], False, False),
    "metrics": (["--metrics"], False, False),
    "calls": (["--metrics"], True, False),
    "farm": (FARM_FLAGS, True, False),
    "sandbox": ([], False, True),
    "farm-sandboxed": (FARM_FLAGS, True, True),
}


class RawServer(LlamaServer):
    """llama-server with only the given flags (no farm-owned ones)."""

    @property
    def argv(self) -> list[str]:
        """The binary, the model, where to listen, and the arm's flags."""
        return [self.binary, "--model", self.model, "--host", self.socket_arg,
                "--parallel", "1", *self.arm_argv]


SAMPLING = {"temperature": 0.0, "seed": 1}
PAUSE = 0.3  # seconds before each request of --per request: the last server's threads idle


def _warm(client: ServerClient, calls: bool) -> None:
    """A server's first request (and its /slots call where the farm makes it)."""
    if calls:
        client.slot_speculative()
    client.generate(PROMPT, mode="completion", n_predict=8, sampling=SAMPLING,
                    ignore_eos=True)


def _run(client: ServerClient, calls: bool, tokens: int) -> float:
    """One request of ``tokens``, with the farm's calls around it where it makes them: its
    decode tok/s."""
    if calls:
        client.spec_counters()
    generation = client.generate(PROMPT, mode="completion", n_predict=tokens,
                                 sampling=SAMPLING, ignore_eos=True)
    if calls:
        client.spec_counters()
        client.tokenize(generation.text)
    return generation.decode_tok_s


def _server(binary: Path, model: Path, user: list[str], name: str, log: Path) -> RawServer:
    flags, _, sandboxed = ADDITIONS[name]
    return RawServer(str(binary), str(model), [*user, *flags], log,
                     sandbox=Sandbox("on" if sandboxed else "off"))


def block(server: RawServer, calls: bool, runs: int, tokens: int) -> tuple[float, float]:
    """One block: the median decode tok/s of its runs, and the other work beside it."""
    watch = NodeWatch([os.getpid()])
    watch.begin()
    with server, \
            ServerClient(server.http_transport()) as client:
        _warm(client, calls)
        speeds = [_run(client, calls, tokens) for _ in range(runs)]
    other = watch.end()
    return statistics.median(speeds), other.cores if other else math.nan


def block_rounds(binary: Path, model: Path, user: list[str], names: list[str],
                 args: argparse.Namespace, scratch: Path
                 ) -> Iterator[tuple[dict[str, float], float]]:
    """Rounds of one block per configuration: each round's tok/s per name, and the most
    other work beside one of its blocks."""
    for round_ in range(args.rounds):
        turn = round_ % (len(names) - 1)
        others = names[1:][turn:] + names[1:][:turn]
        order = [names[0], *others] if round_ % 2 == 0 else [*others, names[0]]
        found: dict[str, float] = {}
        cores: list[float] = []
        for name in order:
            found[name], used = block(_server(binary, model, user, name,
                                              scratch / f"{name}.log"),
                                      ADDITIONS[name][1], args.runs, args.tokens)
            cores.append(used)
        yield found, max(cores)


def request_rounds(binary: Path, model: Path, user: list[str], names: list[str],
                   args: argparse.Namespace, scratch: Path
                   ) -> Iterator[tuple[dict[str, float], float]]:
    """Every configuration's server up at once, a round one request to each in rotated
    order: each round's tok/s per name, and the other work over the round. With
    ``--blocks``, every server is started afresh (in rotated order) that many times,
    ``--rounds`` rounds each."""
    for block_ in range(args.blocks):
        with ExitStack() as stack:
            clients = {}
            turn = block_ % len(names)
            for name in names[turn:] + names[:turn]:
                server = stack.enter_context(_server(binary, model, user, name,
                                                     scratch / f"{name}.log"))
                clients[name] = stack.enter_context(ServerClient(server.http_transport()))
                _warm(clients[name], ADDITIONS[name][1])
            for round_ in range(args.rounds):
                turn = round_ % len(names)
                watch = NodeWatch([os.getpid()])
                watch.begin()
                found: dict[str, float] = {}
                for name in names[turn:] + names[:turn]:
                    time.sleep(PAUSE)
                    found[name] = _run(clients[name], ADDITIONS[name][1], args.tokens)
                other = watch.end()
                yield found, other.cores if other else math.nan


def interval(logs: list[float]) -> tuple[float, float, float]:
    """Cost (raw / addition - 1) with its 95% interval, from each unit's mean log ratio (a
    round's, or a block's with ``--blocks``)."""
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.expm1(mean), math.nan, math.nan
    margin = t_margin(statistics.stdev(logs) / math.sqrt(len(logs)), len(logs) - 1)
    return math.expm1(mean), math.expm1(mean - margin), math.expm1(mean + margin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", choices=sorted(ARMS), default="smollm2")
    parser.add_argument("--arm", choices=("baseline", "variant"), default="baseline")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--additions", default="verbosity,metrics,calls,farm")
    parser.add_argument("--against", choices=sorted(ADDITIONS), default="raw",
                        help="the configuration each addition's cost is taken against "
                        "(farm, with --additions farm-sandboxed: the sandbox's own cost)")
    parser.add_argument("--per", choices=("block", "request"), default="block",
                        help="what a round interleaves: fresh servers' blocks, or requests "
                        "to servers that stay up")
    parser.add_argument("--blocks", type=int, default=1,
                        help="--per request: start every server afresh this many times, "
                        "--rounds rounds each; the interval is then over these blocks")
    args = parser.parse_args()
    if args.per == "block":
        args.blocks = 1
    provisioned = provision(NodePaths.of(load_settings()))
    # What the sandboxed arms run in (its filter, /tmp size and cgroup bounds, from the
    # FARM_SANDBOX_* settings), as the worker's start line says it.
    print(sandbox_status(Sandbox("on")), flush=True)
    model, user = provisioned.models[args.model], ARMS[args.model][args.arm]
    names = [args.against, *args.additions.split(",")]
    # Log ratios by unit: each round, or (several blocks) each block of rounds.
    ratios: dict[str, dict[int, list[float]]] = {name: {} for name in names[1:]}
    speeds: dict[str, list[float]] = {name: [] for name in names}
    busy_rounds = 0
    rounds = block_rounds if args.per == "block" else request_rounds
    with tempfile.TemporaryDirectory(prefix="bench-observation-") as scratch:
        for number, (found, cores) in enumerate(rounds(provisioned.server, model, user, names,
                                                       args, Path(scratch)), 1):
            busy = cores >= BUSY_CORES
            print(f"round {number}: " + ", ".join(f"{name} {found[name]:.1f}"
                                                  for name in names)
                  + f" tok/s; other work up to {cores:.2f} cores"
                  + (" (busy: left out)" if busy else ""), flush=True)
            if busy:
                busy_rounds += 1
                continue
            for name in names:
                speeds[name].append(found[name])
            unit = (number - 1) // args.rounds if args.blocks > 1 else number
            for name in names[1:]:
                ratios[name].setdefault(unit, []).append(math.log(found[names[0]] / found[name]))
    kept = args.rounds * args.blocks - busy_rounds
    print(f"\n{args.model} {args.arm}, per {args.per}: {kept} rounds kept, {busy_rounds} "
          f"left out as busy (other processes >= {BUSY_CORES} core); {names[0]} "
          f"{statistics.median(speeds[names[0]]) if kept else math.nan:.1f} tok/s"
          + (f"; interval over {args.blocks} blocks of fresh servers" if args.blocks > 1
             else ""))
    print(f"| addition | cost ({names[0]} / with - 1) | 95% interval |")
    print("|---|---|---|")
    for name in names[1:]:
        if not ratios[name]:
            print(f"| {name} | - | - |")
            continue
        cost, low, high = interval([statistics.fmean(logs) for logs in ratios[name].values()])
        print(f"| {name} | {cost:+.2%} | [{low:+.2%}, {high:+.2%}] |")


if __name__ == "__main__":
    main()
