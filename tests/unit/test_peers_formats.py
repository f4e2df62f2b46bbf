"""Peers' files read into figures: speed-bench and llama-spec-bench from fixtures written
from their writers' source (tests/fixtures/peers/README.md; llama-bench's real outputs are
in tests/integration/test_peers.py), and every kind of bad file refused with the file, the
line or key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.peers.figures import PeerFileError, with_given
from farm.peers.read import detect, read_peer_file

FIXTURES = Path(__file__).parent.parent / "fixtures" / "peers"
LLAMA_BENCH_RECORD = (
    '{"build_commit": "3f545bec", "build_number": 11434, "backends": "CPU", '
    '"model_filename": "/m/smollm2.gguf", "n_threads": 2, "n_gpu_layers": 99, '
    '"n_prompt": 0, "n_gen": 16, "n_depth": 0, "test_time": "2026-12-01T22:30:00Z", '
    '"avg_ts": 101.5, "stddev_ts": 2.5, "samples_ts": [99.0, 104.0]}')


def test_speed_bench_gives_a_decode_and_a_prompt_figure_per_category() -> None:
    peer, _ = read_peer_file(FIXTURES / "speed-bench-written-from-source.json")
    assert (peer.tool, peer.format) == ("speed-bench", "json")
    decode = {f.test: f for f in peer.figures if f.measure == "decode"}
    assert set(decode) == {"coding", "math", "overall"}
    coding = decode["coding"]
    assert coding.tok_s == pytest.approx(100.0) and coding.samples == [96.0, 104.0]
    assert coding.repetitions == 2 and coding.tok_s_sd is None  # the tool gives no spread
    assert (coding.drafted, coding.accepted) == (122, 95) and coding.speculative is True
    assert coding.source == "summary[0]" and coding.n_gen == 64
    assert decode["overall"].samples == [96.0, 104.0, 88.0]  # the failed request left out
    prompt = {f.test: f for f in peer.figures if f.measure == "prompt"}
    assert prompt["math"].tok_s == pytest.approx(1210.0) and prompt["math"].drafted is None
    assert all(f.build_commit is None and f.model_file is None for f in peer.figures)


def test_spec_bench_details_give_a_figure_per_task_with_summed_counters() -> None:
    peer, _ = read_peer_file(FIXTURES / "spec-bench-details-written-from-source.jsonl")
    assert (peer.tool, peer.format) == ("llama-spec-bench", "jsonl")
    figures = {f.test: f for f in peer.figures}
    assert set(figures) == {"code", "story", "all tasks"}
    code = figures["code"]
    assert code.samples == pytest.approx([64.0, 51.2]) and code.repetitions == 2
    assert code.tok_s == pytest.approx(57.6) and code.tok_s_sd is None
    assert (code.drafts, code.drafted, code.accepted) == (102, 204, 154)
    assert code.drafted_per_pos == [102, 102] and code.accepted_per_pos == [89, 65]
    assert code.source == "lines 1-2" and code.speculative is True and code.spec_type == "mtp"
    assert code.model_file == "Qwen3.6-27B-Q4_K_M-mtp.gguf" and code.n_threads == 8
    assert figures["story"].repetitions == 1  # its failed attempt is no measurement
    assert figures["all tasks"].tok_s == pytest.approx(384 / 7.7)
    assert figures["all tasks"].source == "line 5"


def test_spec_bench_compact_baseline_is_plain_decoding_and_needs_the_model_given() -> None:
    path = FIXTURES / "spec-bench-compact-baseline-written-from-source.jsonl"
    peer, _ = read_peer_file(path)
    assert all(f.speculative is False and f.model_file is None for f in peer.figures)
    given = with_given(peer, {"model_file": "smollm2.gguf", "build_number": 11434,
                              "build_commit": None}, str(path))
    assert {(f.model_file, f.build_number) for f in given.figures} == {("smollm2.gguf", 11434)}


def test_a_given_value_that_contradicts_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text(LLAMA_BENCH_RECORD + "\n")
    peer, _ = read_peer_file(path)
    with pytest.raises(PeerFileError, match=r"bench.jsonl: line 1: it records build_commit "
                       r"'3f545bec', --build-commit says 'abc'; drop --build-commit"):
        with_given(peer, {"build_commit": "abc"}, str(path))


@pytest.mark.parametrize(("name", "text", "message"), [
    ("cut.json", "[\n  " + LLAMA_BENCH_RECORD + ",\n  {\"build_commit\": \"3f5",
     r"cut.json: line 3: not JSON \(Unterminated string.*write it again"),
    ("two.jsonl", LLAMA_BENCH_RECORD + "\n" + LLAMA_BENCH_RECORD.replace('"avg_ts": 101.5, ', ""),
     r"two.jsonl: line 2: the record has no key 'avg_ts'; write it again with `llama-bench -o "
     r"jsonl`"),
    ("nan.jsonl", LLAMA_BENCH_RECORD.replace("101.5", '"fast"'),
     r"nan.jsonl: line 1: key 'avg_ts' is 'fast', not a number"),
    ("short.csv", "build_commit,build_number,model_filename,n_prompt,n_gen,avg_ts\n"
     '"a","1","m.gguf","0","16","9.5"\n"a","1","m.gguf","0"\n',
     r"short.csv: line 3: it has another number of values than the header"),
    ("evil.sql", "CREATE TABLE IF NOT EXISTS llama_bench (\n  avg_ts REAL\n);\n\n"
     "ATTACH DATABASE '/tmp/x' AS x;\n",
     r"evil.sql: line 5: .ATTACH DATABASE '/tmp/x' AS x;. is not one of llama-bench's CREATE "
     r"TABLE or INSERT.*it never runs SQL from a file"),
    ("table.md", "| model | size | params | backend | threads | test | t/s |\n",
     r"table.md: line 1: this is llama-bench's markdown table; run llama-bench again with -o "
     r"json"),
    ("other.json", '{"hello": 1}\n', r"other.json: line 1: cannot tell which tool wrote it"),
    ("spec.jsonl", '{"row_type": "attempt", "task": "code", "ok": true, "decode_tps": 5}\n'
     '{"row_type": "what"}\n', r"spec.jsonl: line 2: not an attempt or summary row"),
])
def test_a_bad_file_gets_one_error_naming_the_file_the_line_and_the_fix(
        tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PeerFileError, match=message) as caught:
        read_peer_file(path)
    assert str(caught.value).endswith(f"Nothing of {path} was imported")


def test_a_speed_bench_error_names_the_key(tmp_path: Path) -> None:
    text = (FIXTURES / "speed-bench-written-from-source.json").read_text()
    path = tmp_path / "speed.json"
    path.write_text(text.replace('"avg_pred_t_s": 100.0', '"avg_pred_t_s": "fast"', 1))
    assert detect(path.read_text(), str(path)) == "speed-bench"
    with pytest.raises(PeerFileError, match=r"speed.json: summary\[0\].avg_pred_t_s: 'fast' "
                       "is not a number"):
        read_peer_file(path)


def test_the_same_file_given_a_build_it_lacked_is_a_new_import(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    path = FIXTURES / "speed-bench-written-from-source.json"
    first = run_cli("import", str(path))
    assert first.exit_code == 0 and "stored as import 1" in first.output
    assert "records no build commit" in first.output
    again = run_cli("import", str(path))
    assert "already imported (import 1" in again.output
    given = run_cli("import", str(path), "--build-commit", "3f545bec", "--model-file", "m.gguf")
    assert given.exit_code == 0 and "stored as import 2" in given.output
    assert "records no" not in given.output
