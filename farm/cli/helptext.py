"""What every command's ``-h`` ends with: examples to copy, and for ``farm`` itself the
``FARM_*`` settings. Kept here, by command path, so that a command's options and its
examples are written in one place each and a new option never touches this table."""

from __future__ import annotations

import click

from farm.settings import Settings

# By command path below `farm` ("" is `farm` itself); each line is one command to copy.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("farm ab SmolLM2-135M-Instruct.Q4_1.gguf -- --spec-type ngram-simple",
         "farm init && farm run matrix.yaml", "farm report", "farm paths"),
    "ab": ("farm ab SmolLM2-135M-Instruct.Q4_1.gguf -- --spec-type ngram-simple",
           "farm ab qwen35-mtp-oracle-cpu.gguf --prompt-mode completion --pairs 2 -- "
           "--spec-type draft-mtp --spec-draft-n-max 3",
           "farm ab ~/models/my.gguf -ngl 99 -o my-ab.yaml -- --spec-type draft-mtp"),
    "init": ("farm init", "farm init --engine-curve curve.yaml"),
    "schema": ("farm schema > matrix.schema.json",),
    "paths": ("farm paths", "FARM_DATA_DIR=/srv/farm farm paths"),
    "run": ("farm run examples/smollm2-ngram.yaml", "farm run --dry-run matrix.yaml"),
    "prepare": ("farm prepare matrix.yaml",),
    "selftest": ("farm selftest", "farm selftest --devices 0 --build cuda"),
    "report": ("farm report", "farm report smollm2-ngram --group-by variant",
               "farm report --all --format html -o report.html"),
    "compare": ("farm compare smollm2-ngram smollm2-ngram-2",
                "farm compare nightly nightly --build-a b6000 --build-b b6100"),
    "history": ("farm history nightly.yaml", "farm history nightly.yaml --fail-on-regression"),
    "curve": ("farm curve", "farm curve engine-curve --plot curve.png"),
    "recommend": ("farm recommend", "farm recommend --write-matrix verify.yaml",
                  "farm recommend --check verify-campaign"),
    "export": ("farm export -o runs.csv", "farm export smollm2-ngram --format parquet -o "
                                          "runs.parquet"),
    "build": ("farm build", "farm build master --source https://github.com/ggml-org/llama.cpp "
                            "--ref master --backend cuda", "farm build --prune 30"),
    "builds": ("farm builds",),
    "provision": ("farm provision",),
    "db": ("farm db upgrade",),
    "db upgrade": ("farm db upgrade", "farm db upgrade --url postgresql://farm@db/farm"),
    "db grant-worker": ("farm db grant-worker farm_worker",),
    "submit": ("farm submit matrix.yaml", "farm submit --dry-run matrix.yaml"),
    "status": ("farm status", "farm status smollm2-ngram"),
    "workers": ("farm workers",),
    "cancel": ("farm cancel smollm2-ngram",),
    "worker": ("farm worker --gpu-class rtx3090 --devices 0",
               "farm worker --config /etc/specfarm/worker.yaml --selftest",
               "farm worker --gpu-class h100 --devices 0 --exit-when-idle 300 --max-jobs 20"),
    "slurm": ("farm slurm launch h100 --cap 8",),
    "slurm launch": ("farm slurm launch h100 --cap 8",
                     "farm slurm launch h100 -- --time=4:00:00 --partition=gpu"),
    "flower": ("FARM_FLOWER_AUTH=admin:secret farm flower --port 5555",),
    "import": ("farm import llama-bench.json --note 'same box, b6100'",),
    "peers": ("farm peers", "farm peers --all --format csv"),
    "track": ("farm track nightly.yaml --ref master",
              "farm track nightly.yaml --ref master --paired"),
    "bisect": ("farm bisect nightly.yaml --good b9200 --bad master --dry-run",
               "farm bisect nightly.yaml --good b9200 --bad master --series variant "
               "--series draft"),
    "tune": ("farm tune SmolLM2-135M-Instruct.Q4_1 --dry-run",
             "farm tune qwen35-mtp-oracle --spec-type draft-mtp --budget 30m",
             "farm tune model.gguf --space spec-draft-n-max=2,3,4 --space "
             "spec-draft-p-min=0,0.6 --drafter draft.gguf"),
    "share": ("farm share smollm2-ngram --dry-run",
              "farm share smollm2-ngram -o mine.zip --sign ~/.farm-key"),
    "board": ("farm board add mine.zip theirs.zip", "farm board show --format md"),
    "board add": ("farm board add mine.zip theirs.zip",
                  "farm board add *.zip --require-signed --board postgresql://farm@db/board"),
    "board show": ("farm board show", "farm board show --format json -o board.json"),
    "board site": ("farm board site -o site/",),
    "board trust": ("farm board trust alice.pub --name alice",),
    "board key": ("farm board key ~/.farm-key",),
}


def _environment() -> list[str]:
    """One line per ``FARM_*`` setting: its variable (and the Hub's own name) and what it is."""
    lines = []
    for name, field in Settings.model_fields.items():
        variable = f"FARM_{name.upper()}"
        alias = getattr(field.validation_alias, "choices", ())
        others = [str(choice) for choice in alias if str(choice) != variable]
        shown = variable + (f" (or {', '.join(others)})" if others else "")
        lines.append(f"  {shown}: {field.description}")
    return lines


def _epilog(path: str) -> str:
    # "\b" keeps click from re-wrapping a paragraph: one command per line, as typed.
    text = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[path])
    if not path:
        text += "\n\n\b\nSettings (environment):\n" + "\n".join(_environment())
    return text


def teach(command: click.Command, path: str = "") -> None:
    """Give ``command`` and every command under it its examples (a ``KeyError`` names a
    command added without any)."""
    command.epilog = _epilog(path)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            teach(sub, f"{path} {name}".strip())
