"""The `farm` command as a user meets it: every help page, the exit codes (0 success, 2 bad
input, 1 runtime failure, 130 interrupted) and the wording of each error, in-process."""

from __future__ import annotations

import ctypes.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import click
import pytest
from click.testing import Result

import farm.errors
import farm.runner
import workers.setup.provision
from farm.cli import cli, main
from farm.errors import ConfigError, FarmError, JobsFailed
from farm.store.db import make_engine, schema_head, upgrade
from tests.helpers import run_cli

# Wide enough that no help line wraps: each option shows on one line with its help.
HELP_WIDTH = 200


@dataclass(frozen=True)
class Help:
    """What a help page must say: its usage line, its summary, and each option as shown
    (``-o, --output PATH``) with its help line; ``--help`` is implied."""

    usage: str
    summary: str
    options: dict[str, str] = field(default_factory=dict)


def _output(*formats: str, default: str = "table", all_help: str | None = None,
            wide: bool = True, wide_help: str | None = None) -> dict[str, str]:
    """The output options of a command that writes results, as every such command has them
    (``farm.cli.output``); ``wide_help`` where its ``--wide`` shows more than columns."""
    from farm.report.formats import FORMATS

    folders = [name for name in formats if FORMATS[name].folder]
    options = {f"--format [{'|'.join(formats)}]": "; ".join(
        f"{name}: {FORMATS[name].help}" for name in formats) + f". [default: {default}]",
        f"-o, --output {'PATH' if folders else 'FILE'}":
            "Write the chosen format to this file instead of the terminal"
            + (f" (a folder for {', '.join(folders)})." if folders else ".")}
    if wide and "table" in formats:
        options["--wide"] = wide_help or ("Every column of the table, however wide (a narrow "
                                          "terminal hides the least needed ones and names "
                                          "them).")
    if all_help:
        options["--all"] = all_help
    return options


BOARD_URL = ("--board URL", "The board's store (default: board.db in the data dir; a "
             "postgresql:// URL for a shared one). Env: FARM_BOARD_URL.")
AS_CLASS = ("Run MATRIX's jobs of GPU class CLASS on this machine although it is another "
            "(FARM_GPU_CLASS, default `default`); each run records this machine's class.")
HELP: dict[tuple[str, ...], Help] = {
    (): Help("farm [OPTIONS] COMMAND [ARGS]...",
             "specfarm: measure llama.cpp speculative decoding (MTP, n-gram, draft) properly.",
             {"--version": "Show the version and exit."}),
    ("run",): Help(
        "farm run [OPTIONS] MATRIX",
        "Run MATRIX on this machine against real llama-server processes.",
        {"--dry-run": "Make every check a run makes and print the argv that would run; run "
                      "nothing, write nothing.",
         "--gpu-class TEXT": "With several gpu-classes in MATRIX: the one to run here.",
         "--as-class CLASS": AS_CLASS,
         "--allow-option NAME": "Let the matrix pass this harmless llama-server option beyond "
                                "the farm's allow-list (repeatable); options that run "
                                "programs, reach the network or touch files are never "
                                "allowed.",
         "--allow-build-path": "Run the llama-server binaries the matrix names by `build: "
                               "{path: ...}` (they run code: only for matrices you trust).",
         "--allow-path DIR": "Let the matrix's flags (draft model, LoRA, control vector, "
                             "projector) name files under DIR as well as the models dir "
                             "(repeatable; only for matrices you trust)."}),
    ("prepare",): Help(
        "farm prepare [OPTIONS] MATRIX",
        "Download MATRIX's Hub and URL models and make its source builds on this node, ahead "
        "of its jobs (a worker about to join, a box that will be offline), with progress; "
        "then check every job as `farm run` would. Runs nothing.",
        {"--gpu-class TEXT": "With several gpu-classes in MATRIX: the one this node serves."}),
    ("report",): Help(
        "farm report [OPTIONS] [CAMPAIGN]",
        "Show one row per job of CAMPAIGN (default: the latest).",
        {**_output("table", "md", "csv", "json", "html", all_help=(
            "Every campaign in the store (a campaign column when rows come from several).")),
         "--group-by [gpu_class|worker|model|variant]":
             "Aggregate jobs: geometric-mean speedup per group.",
         "--by-category": "Speedup per prompt category."}),
    ("compare",): Help(
        "farm compare [OPTIONS] A B",
        "Campaigns A and B (or two builds) side by side: change per matching job, and whether "
        "it is outside the noise.",
        {"--build-a TEXT": "Only A's jobs on this build (two builds of one campaign).",
         "--build-b TEXT": "Only B's jobs on this build.",
         **_output("table", "md", "csv", "json"),
         "--fail-on-regression [SERIES[:PERCENT]]":
             "Exit 3 when a series regressed (by the difference test, false discovery rate 5%) "
             "beyond PERCENT (default 0); repeatable; SERIES alone, or no value: speedup:0 "
             "(any speedup regression). Put it "
             "after the arguments, or write --fail-on-regression=VALUE."}),
    ("history",): Help(
        "farm history [OPTIONS] TARGET",
        "Every build the jobs of TARGET (a matrix file, or a comparable key or its first 8+ "
        "hex digits) ran on, in commit order: each series with its interval, and the changes "
        "between consecutive builds (docs/history.md). Each row is the latest job of its key "
        "on that build, from any campaign: the campaign column names it. Acceptance @1..@N "
        "is the share of drafts accepted at each draft position (past @4 folded unless "
        "--wide); acceptance length the mean accepted length per draft, (accepted + drafts) "
        "/ drafts; neither is the report's accept (accepted over drafted tokens).",
        {**_output("table", "md", "json", "html", wide_help=(
            "Every column of the table, however wide, and every acceptance position "
            "(without it, positions past @4 are folded and a narrow terminal hides the "
            "least needed columns).")),
         "--fail-on-regression [SERIES[:PERCENT]]":
             "Exit 3 when a series regressed (by the difference test, false discovery rate 5%) "
             "beyond PERCENT (default 0); repeatable; SERIES alone, or no value: all:0 "
             "(any series of the newest build). Put it "
             "after the arguments, or write --fail-on-regression=VALUE."}),
    ("track",): Help(
        "farm track [OPTIONS] MATRIX",
        "Run MATRIX with its source builds at REF's current commit, once per commit: on a "
        "fleet (FARM_DATABASE_URL and FARM_BROKER_URL set) its jobs are submitted, else run "
        "here. A commit whose jobs the store already holds is left alone (exit 0).",
        {"--ref TEXT": "Branch, tag or pull/N/head every source build of MATRIX is taken at "
                       "(its current commit). [required]",
         "--gpu-class TEXT": "With an embedded store and several gpu-classes in MATRIX: the "
                             "one to run here.",
         "--as-class CLASS": AS_CLASS,
         "--paired": "Also run each job's arms on the last tracked commit against REF's in "
                     "one paired job per arm, so `farm history` reads their tok/s changes "
                     "from a crossover interval, free of the machine's drift between jobs "
                     "(docs/history.md). Costs about twice the pairs of a plain track."}),
    ("bisect",): Help(
        "farm bisect [OPTIONS] MATRIX",
        "Find the first commit between --good and --bad where a series of MATRIX's job "
        "changed, running each step here (or, with --submit, on the fleet) as its own "
        "stored campaign (an interrupted bisect resumes; a second one reuses the steps).",
        {"--good REF": "A commit, branch or tag of the matrix's source build where the series "
                       "is as it should be (an ancestor of --bad). [required]",
         "--bad REF": "A later commit, branch or tag where it changed. [required]",
         "--job KEY": "The job to follow when MATRIX has several: a comparable key prefix (8+ "
                      "hex digits) or its variant's name (the error lists them).",
         "--series SERIES": "What changed (repeatable; default speedup): speedup, baseline, "
                            "variant (decode tok/s), acceptance-N, acceptance-length, draft, "
                            "verify (ms per token); each measured in jobs of an arm's flags on "
                            "good and on the candidate.",
         "--rounds INTEGER RANGE": "Looks a step takes at most: one more job of the same "
                                   "design per look, only while the step is too close to "
                                   "call (the ends run one job more: two at their first "
                                   "look). [default: 3; 1<=x<=10]",
         "--alpha FLOAT RANGE": "Bound on the chance that any decision of one series' search "
                                "is wrong. [default: 0.05; 0.001<=x<=0.5]",
         "--min-change PERCENT": "The smallest change worth finding: good and bad stop after "
                                 "one round with no difference only when their interval "
                                 "rules out a change this large; else they look again. "
                                 "[default: 10.0; 0.1<=x<=1000]",
         **_output("table", "md", "json", wide=False),
         "--gpu-class TEXT": "With several gpu-classes in MATRIX: the one to run here.",
         "--as-class CLASS": AS_CLASS,
         "--clone DIRECTORY": "A local clone of MATRIX's source, where the commits between "
                              "--good and --bad are listed, when its build.git is a URL (as "
                              "a fleet's is).",
         "--submit": "Run each step's job on the fleet's workers of its GPU class "
                     "(FARM_DATABASE_URL and FARM_BROKER_URL), waiting for it in the "
                     "database.",
         "--dry-run": "Print the commits, each step's error rate and the expected cost; build "
                      "and run nothing."}),
    ("import",): Help(
        "farm import [OPTIONS] FILES...",
        "Read FILES (llama-bench -o json|jsonl|csv|sql, speed-bench --output JSON, "
        "llama-spec-bench JSONL) into the store as imported figures: all of them or none.",
        {"--format [llama-bench-json|llama-bench-jsonl|llama-bench-csv|llama-bench-sql|"
         "speed-bench|spec-bench]": "What wrote the files (default: told from their content).",
         "--build-commit TEXT": "The llama.cpp commit, where a file records none.",
         "--build-number INTEGER": "The llama.cpp build number, where none.",
         "--model-file TEXT": "The GGUF's file name, where a file records none.",
         "--threads INTEGER": "Threads (-t), where none.",
         "--gpu-layers INTEGER": "GPU layers (-ngl), where none.",
         "--spec-type TEXT": "The speculative type the peer ran, where none.",
         "--note TEXT": "Kept with the import (where and how it was measured)."}),
    ("peers",): Help(
        "farm peers [OPTIONS] [CAMPAIGN]",
        "Imported figures beside the farm's jobs of CAMPAIGN (default: the latest) that ran "
        "the same model file, build and threads/offload; then those no job matches.",
        _output("table", "md", "csv", "json", all_help="The jobs of every campaign.")),
    ("curve",): Help(
        "farm curve [OPTIONS] [CAMPAIGN]",
        "The engine cost curve of CAMPAIGN (default: the latest): from its synthetic-acceptance "
        "jobs, the speedup per acceptance length, the step cost and the break-even length per "
        "draft length, with 95% intervals.",
        {**_output("table", "md", "csv", "json",
                   all_help="The synthetic-acceptance jobs of every campaign."),
         "--plot FILE": "Also write the plot: speedup vs acceptance length, a line per "
                        "draft length, break-even marked (PNG)."}),
    ("recommend",): Help(
        "farm recommend [OPTIONS] [CAMPAIGN]",
        "The settings to use per GPU class, model and prompt category, predicted from the "
        "drafters' measured acceptance in CAMPAIGN (default: the latest) and the engine cost "
        "curves in the store, with the runner-up and why.",
        {**_output("table", "md", "csv", "json"),
         "--write-matrix FILE": "Write the matrix that checks the recommendation: "
                                "recommended and runner-up settings vs baseline on the same "
                                "prompts (YAML).",
         "--check VERIFY_CAMPAIGN": "Put the predictions beside what VERIFY_CAMPAIGN (a run of "
                                    "that matrix) measured, with a verdict per row.",
         "--model TEXT": "Only this model.",
         "--gpu-class TEXT": "Only this GPU class."}),
    ("export",): Help(
        "farm export [OPTIONS] [CAMPAIGN]",
        "The tidy runs of CAMPAIGN (default: the latest), one row per run.",
        _output("csv", "json", "parquet", default="csv", all_help=(
            "The runs of every campaign (a campaign column names each)."))),
    ("share",): Help(
        "farm share [OPTIONS] CAMPAIGNS...",
        "Leave CAMPAIGNS' finished jobs, every run with its telemetry and provenance, as one "
        "self-describing bundle file (no secrets, no database URLs, no host or user names).",
        {"-o, --output FILE": "The bundle file to write (required unless --dry-run).",
         "--with-host": "Keep host names in the runs (default: the data dir's random machine "
                        "id stands for the host).",
         "--sign FILE": "Sign the bundle with this ed25519 private key (`farm board key PATH` "
                        "makes one).",
         "--dry-run": "Print what would be shared; write nothing."}),
    ("board",): Help(
        "farm board [OPTIONS] COMMAND [ARGS]...",
        "A board of results anyone shares: `farm board add BUNDLE...`, then `farm board show` "
        "or `farm board site -o DIR` (docs/board.md)."),
    ("board", "add"): Help(
        "farm board add [OPTIONS] BUNDLES...",
        "Check BUNDLES and take their new jobs and runs onto the board, every figure "
        "recomputed; a bundle that fails any check changes nothing.",
        {BOARD_URL[0]: BOARD_URL[1],
         "--require-signed": "Refuse bundles not signed by a key the board knows (`farm "
                             "board trust`)."}),
    ("board", "show"): Help(
        "farm board show [OPTIONS]",
        "Per model x GPU x setting: the speedup and decode tok/s with intervals that treat "
        "machines as random effects, and the best setting per model and GPU.",
        {BOARD_URL[0]: BOARD_URL[1], **_output("table", "md", "json", "site")}),
    ("board", "site"): Help(
        "farm board site [OPTIONS]",
        "Write the board as a static site: an index of models and GPUs, a page per model "
        "with its table and a plot of speedup against draft length, a page per bundle (the "
        "same as `farm board show --format site -o DIR`).",
        {BOARD_URL[0]: BOARD_URL[1],
         "-o, --output DIRECTORY": "The folder to write the site to (made if new; the site's "
                                   "own files replaced, any other left). [required]"}),
    ("board", "trust"): Help(
        "farm board trust [OPTIONS] PUBLIC_KEY",
        "Know PUBLIC_KEY (a `farm board key` .pub file) as NAME: bundles it signed show as "
        "signed by NAME, and `--require-signed` takes them.",
        {"--name TEXT": "The name the board shows for this key. [required]",
         BOARD_URL[0]: BOARD_URL[1]}),
    ("board", "key"): Help(
        "farm board key [OPTIONS] PATH",
        "Make an ed25519 key pair: PATH (private, mode 0600) and PATH.pub (public, for a "
        "board's `farm board trust`)."),
    ("db",): Help(
        "farm db [OPTIONS] COMMAND [ARGS]...",
        "Manage the result database (FARM_DATABASE_URL, default SQLite in the data dir)."),
    ("db", "upgrade"): Help(
        "farm db upgrade [OPTIONS]",
        "Migrate the database to the newest schema.",
        {"--url TEXT": "Database URL (default: FARM_DATABASE_URL or the embedded one)."}),
    ("db", "grant-worker"): Help(
        "farm db grant-worker [OPTIONS] ROLE",
        "Give the PostgreSQL ROLE what a GPU worker needs and nothing more: it can claim and "
        "run jobs and write their results, not create or change campaigns or job specs (run "
        "it after every `farm db upgrade`).",
        {"--url TEXT": "Database URL (default: FARM_DATABASE_URL)."}),
    ("submit",): Help(
        "farm submit [OPTIONS] MATRIX",
        "Store MATRIX as a campaign and post every job not done whose message is not already "
        "waiting in the broker; running jobs are left alone.",
        {"--dry-run": "Check every job as a worker would, with this machine's builds and "
                      "models, and print the argv that would run; post nothing.",
         "--retry-failed": "Post failed jobs again (attempts reset).",
         "--retry-cancelled": "Post cancelled jobs again (attempts reset).",
         "--allow-option NAME": "Let the matrix pass this harmless option beyond the farm's "
                                "allow-list (repeatable); each worker runs it only if its "
                                "config allows it too."}),
    ("status",): Help(
        "farm status [OPTIONS] [CAMPAIGN]",
        "Jobs of CAMPAIGN (default: the latest) by state, who runs what, failures, time "
        "left."),
    ("workers",): Help(
        "farm workers [OPTIONS]",
        "Registered workers, live and dead, with their builds and models."),
    ("cancel",): Help(
        "farm cancel [OPTIONS] CAMPAIGN",
        "Cancel CAMPAIGN's pending jobs and stop its running ones."),
    ("worker",): Help(
        "farm worker [OPTIONS]",
        "Run a Celery worker for one GPU (or GPU set): concurrency 1, late acks.",
        {"--gpu-class TEXT": "The class this worker serves (queue gpu.CLASS).",
         "--devices TEXT": "GPU indices, e.g. 0 or 0,1 for a tensor-split set.",
         "--config PATH": "Worker config: name, gpu-class, devices, models-dir, builds.",
         "--name TEXT": "This worker's name (default: the config's, else CLASS@HOST-DEVICES); "
                        "one per running worker.",
         "--selftest": "Run `farm selftest` on this worker's devices and first build before "
                       "registering; a node that fails never joins.",
         "--exit-when-idle SECONDS": "Exit once nothing was reserved and the store had no "
                                     "pending job of the class for this long (frees an "
                                     "allocation's GPU).",
         "--max-jobs N": "Exit after claiming N jobs.",
         "--deadline TIME": "Be gone by TIME (ISO 8601, or seconds from now): claim no job "
                            "whose estimate ends later; 60 s before it, hand the running job "
                            "back and exit. Default under Slurm: the allocation's end "
                            "(squeue's %e)."}),
    ("slurm",): Help(
        "farm slurm [OPTIONS] COMMAND [ARGS]...",
        "Workers on a Slurm cluster (deploy/slurm/, docs/deployment.md)."),
    ("slurm", "launch"): Help(
        "farm slurm launch [OPTIONS] CLASS [-- SBATCH_OPTION...]",
        "Submit one array task per pending job of CLASS in the store, up to --cap; each task "
        "runs a worker that drains the class and exits when idle. Options after `--` go to "
        "sbatch (e.g. -- --time=2:00:00 --partition=gpu).",
        {"--cap INTEGER RANGE": "Most array tasks (workers, one GPU each) to submit. "
                                "[default: 10; x>=1]",
         "--script PATH": "The worker's sbatch script (default: a checkout's "
                          "deploy/slurm/specfarm-worker.sbatch)."}),
    ("selftest",): Help(
        "farm selftest [OPTIONS]",
        "Check this node and the farm against known answers: the MTP oracle accepts every "
        "draft with identical text, the anti-oracle none, synthetic rates read back, MTP beats "
        "the baseline on the oracle, an A/A control covers 1, GPUs report telemetry. Exits 1 "
        "on any failure.",
        {"--gpu-class TEXT": "The class this node serves (a label in the output).",
         "--devices TEXT": "GPU indices, e.g. 0 or 0,1: the checks run on these, with every "
                           "layer offloaded (-ngl 99).",
         "--build TEXT": "The llama-server build to check (a `farm build` name).  [default: "
                         "cpu]"}),
    ("flower",): Help(
        "farm flower [OPTIONS]",
        "Start Flower on the farm's broker, with basic auth from FARM_FLOWER_AUTH.",
        {"--port INTEGER": "The port Flower listens on. [default: 5555]",
         "--address TEXT": "The address Flower listens on (127.0.0.1: this machine only). "
                           "[default: 127.0.0.1]"}),
    ("build",): Help(
        "farm build [OPTIONS] [NAME]",
        "Build llama-server as NAME (cached: the same build asked twice builds once), or "
        "register one built elsewhere (--binary), or prune unused source builds (--prune).",
        {"--source TEXT": "Git URL or repository (with --ref), a llama.cpp tree, an sdist "
                          ".tar.gz, or pypi:PACKAGE==VERSION.",
         "--binary PATH": "Instead of --source: register a llama-server built elsewhere as "
                          "NAME, so matrices may name it (`build: NAME`).",
         "--ref TEXT": "Branch, tag, commit or pull/N/head of a git source.",
         "--backend [cpu|cuda|metal|vulkan]": "The ggml backend to build for (cuda needs "
                                              "nvcc). [default: cpu]",
         "--cuda-arch TEXT": "CMAKE_CUDA_ARCHITECTURES, e.g. 86;89;90 (default native).",
         "--cmake-arg TEXT": "Extra -D... for cmake.",
         "--target TEXT": "cmake targets to build. [default: llama-server]",
         "--build-number INTEGER": "For sources without git history.",
         "--dry-run": "Print the cmake commands; build nothing.",
         "--prune DAYS": "Instead of building: remove the source builds (made for jobs) "
                         "unused for DAYS days."}),
    ("builds",): Help(
        "farm builds [OPTIONS]",
        "The builds on this node: named ones, then those made from source for jobs (with "
        "their size and last use)."),
    ("ab",): Help(
        "farm ab [OPTIONS] MODEL -- VARIANT_FLAGS...",
        "Is MODEL faster with VARIANT_FLAGS? Baseline vs baseline + VARIANT_FLAGS (given after "
        "`--`), run here with the farm's design; prints the answer and writes the matrix it ran "
        "(re-run it with `farm run`, send it to a fleet with `farm submit`). MODEL is a GGUF "
        "file, or its name in the models dir (`.gguf` optional).",
        {"-ngl, --n-gpu-layers INTEGER": "Baseline: layers on the GPU (-ngl); the variant adds "
                                         "its flags to the baseline's.",
         "-c, --ctx-size INTEGER": "Baseline: context size (-c).",
         "-t, --threads INTEGER": "Baseline: CPU threads (-t).",
         "-fa, --flash-attn [on|off|auto]": "Baseline: flash attention (-fa).",
         "--args FLAGS": "More baseline flags as one string, e.g. '-ctk q8_0 -ctv q8_0'.",
         "--pairs N": "A fixed number of block pairs (default: the --stop-rule's). "
                      "[1<=x<=100]",
         "--stop-rule [decision|precision|two-stage]": (
             "decision (the default): from 4 pairs, a look after each, stop once faster, "
             "slower or within ±3% is decided (at most 12); precision: from 4 pairs, a look "
             "after each, stop once the speedup's interval is within ±3% (at most 12); "
             "two-stage: 4 pairs plan how many more measure it to ±3% (the design before)."),
         "--n-predict INTEGER RANGE": "Tokens generated per run. [default: 128; 2<=x<=32768]",
         "--repetitions N": "Runs per prompt per block (default 3). [1<=x<=1000]",
         "--prompt-suite CATEGORY": "Built-in prompts of this category (repeatable; `all` for "
                                    "every one). [default: tutorial]",
         "--prompt-mode [chat|completion]": "chat: the model's chat template; completion: "
                                            "the prompts as raw text. [default: chat]",
         "--build TEXT": "The llama-server build (`farm builds` lists them). [default: cpu]",
         "-o, --output PATH": "Where to write the matrix it runs (default: in the data dir, "
                              "beside the results; `farm paths` shows it)."}),
    ("tune",): Help(
        "farm tune [OPTIONS] MODEL",
        "Which speculative setting makes MODEL fastest here? Every candidate of a space runs "
        "a few block pairs against the baseline; those shown slower than the leader by more "
        "than --epsilon drop out, the rest run on until one is named within --epsilon of the "
        "fastest (or the budget ends). Each round is a stored campaign: the same command "
        "resumes.",
        {"--drafter GGUF": "A draft model (-md): the default space is then draft-simple's.",
         "--spec-type TYPE": "The speculation to tune (default: draft-simple with --drafter, "
                             "else ngram-simple); draft-mtp for a model with MTP heads.",
         "--space FLAG=V1,V2": "A flag and the values to race (repeatable; every combination "
                               "is a candidate); default: the spec type's space, over the "
                               "options the build's --help lists.",
         "--epsilon FLOAT": "Settings within this of the fastest are a fair choice (0.02 = "
                            "2%). [default: 0.02]",
         "--budget PAIRS|MINUTESm": "Most block pairs (200) or minutes (30m) the race spends.",
         "-t, --threads INTEGER": "Baseline: CPU threads (-t).",
         "-ngl, --n-gpu-layers INTEGER": "Baseline: layers on the GPU.",
         "--args FLAGS": "More baseline flags as one string.",
         "--n-predict INTEGER RANGE": "Tokens generated per run. [default: 128; 2<=x<=32768]",
         "--repetitions INTEGER RANGE": "Runs per prompt per block. [default: 3; 1<=x<=1000]",
         "--prompt-suite CATEGORY": "Built-in prompts of this category. [default: tutorial]",
         "--prompt-mode [chat|completion]": "chat: the model's chat template; completion: "
                                            "raw. [default: chat]",
         "--build TEXT": "The llama-server build. [default: cpu]",
         "--write-matrix PATH": "Where to write the tune's matrix (default: the data dir); "
                                "`farm run` runs it again (resuming), a confirmatory run "
                                "edits its `tune:` away.",
         "--dry-run": "Check the space against the build and model; print it and its size; "
                      "run nothing.",
         "--format [table|md|json]": "table: a table fitted to the terminal; md: markdown "
                                     "tables (for a PR or issue); json: JSON, every column. "
                                     "[default: table]",
         "-o, --output FILE": "Write the chosen format to this file instead of the terminal.",
         "--as-class CLASS": "Run MATRIX's jobs of GPU class CLASS on this machine although "
                             "it is another (FARM_GPU_CLASS, default `default`); each run "
                             "records this machine's class."}),
    ("init",): Help(
        "farm init [OPTIONS] [OUTPUT]",
        "Write a commented starter matrix to OUTPUT (default matrix.yaml), ready for `farm "
        "run` after `farm provision` (or the Quickstart).",
        {"--engine-curve": "A matrix with an `engine-curve:` block and a drafter: `farm curve` "
                           "and `farm recommend` read its campaign.",
         "--force": "Overwrite OUTPUT if it exists."}),
    ("schema",): Help(
        "farm schema [OPTIONS]",
        "Print the matrix's JSON Schema, for an editor to complete and check matrix files "
        "(docs/matrix.md, \"Editors\").",
        {"--report": "The JSON Schema of `farm report --format json` instead: its version and "
                     "every column's type and meaning."}),
    ("paths",): Help(
        "farm paths [OPTIONS]",
        "Where the farm keeps things on this machine: the database, the logs, the caches, the "
        "builds and the models (each set by a FARM_* variable: `farm -h`); then each model "
        "file it finds, with its size."),
    ("provision",): Help(
        "farm provision [OPTIONS]",
        "Build the CPU llama-server and fetch the tiny models (idempotent, cached)."),
}


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand under ``group``, as the words that name it."""
    paths = []
    for name, command in group.commands.items():
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths += _command_paths(command, (*prefix, name))
    return paths


COMMANDS = [(), *sorted(_command_paths(cli))]


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def _flat(text: str) -> str:
    """``text`` with every run of whitespace one space: help columns and wraps ignored."""
    return " ".join(text.split())


def _raise(error: BaseException) -> object:
    def raising(*_args: object, **_kwargs: object) -> NoReturn:
        raise error
    return raising


def assert_one_line_error(result: Result, exit_code: int, message: str) -> None:
    """Handled, not a traceback: exit code, nothing on stdout, one line on stderr."""
    assert result.exit_code == exit_code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == "" and result.stderr == f"{message}\n"


def assert_usage_error(result: Result, path: str, usage: str, error: str) -> None:
    """Click's own answer to bad arguments: the usage line, where to look, the error with
    the farm's one prefix."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == (f"Usage: farm {path}{' ' if path else ''}{usage}\n"
                             f"Try 'farm {path}{' ' if path else ''}-h' for help.\n\n"
                             f"error: {error}\n")


# ----------------------------------------------------------------------------- help pages


def test_every_command_has_its_help_pinned() -> None:
    assert set(COMMANDS) == set(HELP), "pin the help of each new command in HELP"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "farm")
def test_help_shows_usage_summary_and_every_option_with_its_help(path: tuple[str, ...]) -> None:
    expected = HELP.get(path)
    if expected is None:
        pytest.fail(f"`farm {' '.join(path)}` has no pinned help: add it to HELP")
    result = run_cli(*path, "--help", width=HELP_WIDTH)
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.splitlines()[0] == f"Usage: {expected.usage}"
    page = _flat(result.stdout)
    assert _flat(expected.summary) in page
    for option, help_line in {**expected.options, "--help": "Show this message and exit."}.items():
        assert f" {option} {_flat(help_line)}" in page, option

    shown = {name.strip(",") for option in expected.options for name in option.split()
             if name.startswith("-")}
    options = {name for param in _command(path).params if isinstance(param, click.Option)
               for name in (*param.opts, *param.secondary_opts)}
    assert options == shown, "pin the help line of each new option in HELP"


def test_group_help_lists_each_subcommand() -> None:
    for path in [(), *(p for p in COMMANDS if isinstance(_command(p), click.Group))]:
        group = _command(path)
        assert isinstance(group, click.Group)
        page = run_cli(*path, "--help", width=HELP_WIDTH).stdout
        listed = page.split("Commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert {line.split()[0] for line in listed if line.strip()} == set(group.commands)


def test_the_installed_entry_point_calls_itself_farm(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/specfarm-wrapper", "--help"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("Usage: farm [OPTIONS] COMMAND [ARGS]...\n")


# -------------------------------------------------------------------------------- exit 0


def test_version_exits_0() -> None:
    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout == "farm, version 0.1.0\n"


def test_db_upgrade_creates_the_embedded_database_and_exits_0(isolated_data_dir: Path) -> None:
    result = run_cli("db", "upgrade")
    assert result.exit_code == 0, result.output
    where = f"database sqlite:///{isolated_data_dir / 'farm.db'}"
    assert result.stdout == f"{where}: created the schema (revision {schema_head()})\n"
    assert (isolated_data_dir / "farm.db").is_file()
    again = run_cli("db", "upgrade")
    assert again.stdout == (f"{where} is already at the newest schema (revision "
                            f"{schema_head()})\n")


def test_db_upgrade_of_an_older_schema_names_both_revisions(isolated_data_dir: Path) -> None:
    engine = make_engine(f"sqlite:///{isolated_data_dir / 'farm.db'}")
    upgrade(engine, "0002")
    engine.dispose()
    result = run_cli("db", "upgrade")
    assert result.stdout == (f"database sqlite:///{isolated_data_dir / 'farm.db'}: upgraded "
                             f"the schema from revision 0002 to {schema_head()}\n")


def test_build_dry_run_prints_the_cmake_commands_and_exits_0(isolated_data_dir: Path) -> None:
    result = run_cli("build", "mine", "--source", "/src/llama.cpp", "--dry-run")
    assert result.exit_code == 0, result.output
    configure, build = result.stdout.splitlines()
    assert configure.startswith("cmake -S <source> -B <source>/build-specfarm-KEY ")
    assert build.startswith("cmake --build <source>/build-specfarm-KEY ")
    assert build.endswith(" --target llama-server")
    assert not isolated_data_dir.exists()


# ------------------------------------------------------------------- exit 2: bad arguments


BAD_ARGUMENTS = [
    (["nope"], "", "[OPTIONS] COMMAND [ARGS]...", "No such command 'nope'."),
    (["db", "nope"], "db", "[OPTIONS] COMMAND [ARGS]...", "No such command 'nope'."),
    (["run", "--nope", "m.yaml"], "run", "[OPTIONS] MATRIX", "No such option '--nope'."),
    (["run", "--dryrun", "m.yaml"], "run", "[OPTIONS] MATRIX",
     "No such option '--dryrun'. Did you mean '--dry-run'?"),
    (["run"], "run", "[OPTIONS] MATRIX", "Missing argument 'MATRIX'."),
    (["compare", "a"], "compare", "[OPTIONS] A B", "Missing argument 'B'."),
    (["cancel"], "cancel", "[OPTIONS] CAMPAIGN", "Missing argument 'CAMPAIGN'."),
    (["build", "x"], "build", "[OPTIONS] [NAME]",
     "give --source (to build) or --binary (to register), one of them"),
    (["build", "x", "--source", "y", "--binary", "z"], "build", "[OPTIONS] [NAME]",
     "give --source (to build) or --binary (to register), one of them"),
    (["report", "--format", "xml"], "report", "[OPTIONS] [CAMPAIGN]",
     "Invalid value for '--format': 'xml' is not one of 'table', 'md', 'csv', 'json', 'html'."),
    (["report", "--group-by", "gpu"], "report", "[OPTIONS] [CAMPAIGN]",
     "Invalid value for '--group-by': 'gpu' is not one of 'gpu_class', 'worker', 'model', "
     "'variant'."),
    (["compare", "a", "b", "--format", "html"], "compare", "[OPTIONS] A B",
     "Invalid value for '--format': 'html' is not one of 'table', 'md', 'csv', 'json'."),
    (["export", "-o", "x", "--format", "xlsx"], "export", "[OPTIONS] [CAMPAIGN]",
     "Invalid value for '--format': 'xlsx' is not one of 'csv', 'json', 'parquet'."),
    (["build", "x", "--source", "y", "--backend", "rocm"], "build", "[OPTIONS] [NAME]",
     "Invalid value for '--backend': 'rocm' is not one of 'cpu', 'cuda', 'metal', 'vulkan'."),
    (["build", "x", "--source", "y", "--build-number", "latest"], "build", "[OPTIONS] [NAME]",
     "Invalid value for '--build-number': 'latest' is not a valid integer."),
    (["flower", "--port", "http"], "flower", "[OPTIONS]",
     "Invalid value for '--port': 'http' is not a valid integer."),
    (["worker", "--gpu-class", "h200", "--devices", "0,one"], "worker", "[OPTIONS]",
     "Invalid value for '--devices': a comma list of GPU indices, e.g. 0,1"),
    (["worker"], "worker", "[OPTIONS]", "give --gpu-class or a --config that names one"),
    (["worker", "--devices", "0"], "worker", "[OPTIONS]",
     "give --gpu-class or a --config that names one"),
]


@pytest.mark.parametrize(("args", "path", "usage", "error"), BAD_ARGUMENTS,
                         ids=[" ".join(case[0]) for case in BAD_ARGUMENTS])
def test_bad_arguments_exit_2_with_usage_and_the_error(
        args: list[str], path: str, usage: str, error: str, isolated_data_dir: Path) -> None:
    assert_usage_error(run_cli(*args), path, usage, error)
    assert not isolated_data_dir.exists()


def test_devices_not_a_list_names_the_option() -> None:
    result = run_cli("worker", "--gpu-class", "h200", "--devices", "0,one")
    assert "'--devices'" in result.stderr


@pytest.mark.parametrize("auth", [None, "", "admin"], ids=["unset", "empty", "no-password"])
def test_flower_without_user_and_password_in_farm_flower_auth_is_refused(
        auth: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FARM_FLOWER_AUTH", raising=False)
    result = run_cli("flower", env=None if auth is None else {"FARM_FLOWER_AUTH": auth})
    assert_one_line_error(result, 2, "error: set FARM_FLOWER_AUTH=user:password; Flower is "
                                     "never started without authentication")


def test_a_matrix_that_does_not_exist_exits_2(isolated_data_dir: Path) -> None:
    assert_one_line_error(run_cli("run", "missing.yaml"), 2,
                          "error: missing.yaml: no such file")
    assert not isolated_data_dir.exists()


def test_a_bad_farm_variable_exits_2_naming_it() -> None:
    result = run_cli("report", env={"FARM_LEASE_SECONDS": "soon"})
    assert_one_line_error(result, 2, "error: FARM_LEASE_SECONDS='soon': input should be a "
                                     "valid integer, unable to parse string as an integer")


@pytest.mark.parametrize("args", [["submit", "m.yaml"], ["workers"], ["cancel", "c"],
                                  ["worker", "--gpu-class", "h200"]])
def test_fleet_commands_on_the_embedded_store_exit_2_pointing_at_postgresql(
        args: list[str]) -> None:
    assert_one_line_error(run_cli(*args), 2, "error: the fleet needs one shared PostgreSQL: "
                          "set FARM_DATABASE_URL=postgresql://USER:PASSWORD@HOST/DB (on one "
                          "machine, use `farm run`)")


@pytest.mark.parametrize(("args", "message"), [
    (["report"], "the store holds no campaign yet; run `farm run MATRIX` first"),
    (["status"], "the store holds no campaign yet; run `farm run MATRIX` first"),
    (["export", "-o", "runs.csv"], "the store holds no campaign yet; run `farm run MATRIX` "
                                   "first"),
    (["compare", "a", "b"], "no campaign named 'a'; `farm report` without a name shows the "
                            "latest"),
])
def test_results_of_an_empty_store_exit_2_saying_what_to_run(
        args: list[str], message: str) -> None:
    assert run_cli("db", "upgrade").exit_code == 0
    assert_one_line_error(run_cli(*args), 2, f"error: {message}")


# ------------------------------------------------- FarmError, interrupt, database down


ERRORS = sorted((value for value in vars(farm.errors).values()
                 if isinstance(value, type) and issubclass(value, FarmError)),
                key=lambda cls: cls.__name__)


@pytest.mark.parametrize("error_class", ERRORS, ids=lambda cls: cls.__name__)
def test_each_farm_error_is_its_message_and_its_exit_code(
        error_class: type[FarmError], monkeypatch: pytest.MonkeyPatch) -> None:
    error = (error_class("it broke; do this", "c") if error_class is JobsFailed
             else error_class("it broke; do this"))
    monkeypatch.setattr(workers.setup.provision, "provision", _raise(error))
    expected = 2 if issubclass(error_class, ConfigError) else 1
    assert error_class.exit_code == expected
    assert_one_line_error(run_cli("provision"), expected, "error: it broke; do this")


def test_an_unexpected_error_is_not_disguised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers.setup.provision, "provision", _raise(ValueError("a bug")))
    result = run_cli("provision")
    assert result.exit_code == 1 and isinstance(result.exception, ValueError)


def test_ctrl_c_exits_130_saying_what_was_kept(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setattr(farm.runner, "check_matrix", _raise(KeyboardInterrupt()))
    assert_one_line_error(run_cli("run", str(tmp_path / "m.yaml")), 130,
                          "interrupted: servers stopped, finished runs kept; run the same "
                          "command again to resume")


@pytest.mark.parametrize("args", [["report"], ["status"], ["db", "upgrade"],
                                  ["compare", "a", "b"], ["export", "-o", "runs.csv"]])
def test_a_database_that_does_not_answer_exits_1_in_one_line(
        args: list[str], isolated_data_dir: Path) -> None:
    database = isolated_data_dir / "farm.db"
    database.mkdir(parents=True)  # SQLite cannot open a directory
    assert_one_line_error(run_cli(*args), 1, f"error: cannot use the database sqlite:///"
                          f"{database}: unable to open database file; check that the data dir "
                          "(FARM_DATA_DIR) is writable and its disk not full")


def test_a_data_dir_that_is_a_file_exits_1_in_one_line(isolated_data_dir: Path) -> None:
    isolated_data_dir.write_text("not a directory")
    result = run_cli("report")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: ") and "FARM_DATA_DIR" in result.stderr


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None,
                    reason="this machine has an NVIDIA driver")
@pytest.mark.parametrize("command", [["worker", "--gpu-class", "h200"], ["selftest"]])
def test_devices_on_a_machine_without_gpus_are_refused_in_one_line(command: list[str]) -> None:
    result = run_cli(*command, "--devices", "0")
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: --devices 0: this machine has no GPU 0 that NVML sees (0 "
                             "of the 1 named found; no NVIDIA driver, or fewer GPUs); drop the "
                             "devices to run on the CPU\n")
