"""`farm ab`: the tutorial's question in one command, on the real llama-server: it answers
with the decision design, stopping at its first look that decides (or, where this machine
cannot tell, at its futility or max-pairs stop, said so), and the matrix it writes runs
again adding nothing and passes `farm submit --dry-run` (the answer of a fixed or precision
design, and each wording: tests/unit/test_ab_answer.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_farm_run import farm, report_rows
from workers.setup.provision import Provisioned

# Shared phase: it checks the design's stops and records, not a speed. The plain MTP oracle
# (drafts always right, their cost paid on this CPU) decodes 0.5-0.6x at one thread here and
# is decided slower after 5-6 pairs (18 s); the CPU-paying oracle, 1.04-1.09x here, ran
# undecided to 12 pairs in the suite (44-87 s).
pytestmark = pytest.mark.server

ANSWER = re.compile(r"answer: the variant decodes (?P<speedup>\d+\.\d\d)x as fast as the "
                    r"baseline \[(?P<low>\d+\.\d\d), (?P<high>\d+\.\d\d)\] \(95% interval\): "
                    r"(?P<reason>(?:faster|slower|within ±3%) \(decided after (?P<decided>\d+) of "
                    r"at most 12 pairs\)|undecided after (?P<undecided>\d+) of at most 12 pairs: "
                    r"[^;]+); about (?P<saved>\d+)% of a fixed 12-pair design's GPU time saved")


def test_farm_ab_stops_at_its_first_deciding_look_and_writes_a_matrix_that_reruns_adding_no_run(
        provisioned: Provisioned, isolated_data_dir: Path) -> None:
    oracle = provisioned.models["qwen35-mtp-oracle"]
    args = ("ab", str(oracle), "--prompt-mode", "completion", "--n-predict", "32",
            "--repetitions", "1", "--prompt-suite", "extraction", "-c", "1024", "-t", "1",
            "--", "--spec-type", "draft-mtp", "--spec-draft-n-max", "3")
    result = farm(*args)
    assert result.returncode == 0, result.stderr
    *_, answer, written = result.stdout.splitlines()
    found = ANSWER.fullmatch(answer)
    assert found, answer
    pairs = int(found["decided"] or found["undecided"])
    assert 4 <= pairs <= 12 and int(found["saved"]) == round(100 * (1 - pairs / 12))
    low, speedup, high = (float(found[key]) for key in ("low", "speedup", "high"))
    assert low <= speedup <= high
    if found["reason"].startswith("faster"):
        assert low > 1.0
    if found["reason"].startswith("slower"):
        assert high < 1.0
    path = Path(written.removeprefix("matrix: ").split(" (")[0])
    assert path.parent == isolated_data_dir / "ab"
    assert list(path.parent.iterdir()) == [path]  # the matrix, once checked: nothing else
    matrix = yaml.safe_load(path.read_text())
    assert matrix["models"] == [{"name": oracle.name.removesuffix(".gguf"),
                                 "file": oracle.name}]
    assert matrix["flags"] == {"ctx-size": 1024, "threads": 1}
    assert matrix["variants"] == [{"name": "draft-mtp", "flags": {
        "spec-type": "draft-mtp", "spec-draft-n-max": 3}}]
    assert matrix["stop-rule"] == "decision"
    [row] = report_rows(matrix["campaign"])
    assert row["pairs"] == pairs and row["runs"] == pairs * 2 * 6  # two arms, six prompts
    assert row["interval_method"] == "sequential crossover"
    assert row["stop_reason"] == found["reason"]
    # The text report shows the answer among the job's flags.
    assert row["stop_reason"] in result.stdout

    again = farm("run", str(path))
    assert again.returncode == 0, again.stderr
    assert report_rows(matrix["campaign"])[0]["runs"] == row["runs"]
    same = farm(*args)
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[-2:] == [answer, written]
    assert report_rows("--all")[0]["runs"] == row["runs"] and len(report_rows("--all")) == 1

    submitted = farm("submit", "--dry-run", str(path))
    assert submitted.returncode == 0, submitted.stderr
    assert "draft-mtp" in submitted.stdout
