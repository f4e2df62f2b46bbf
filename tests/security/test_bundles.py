"""Crafted bundles (farm.board.verify): each is refused whole with one line that starts with
its path and says what is wrong, and reading it writes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from farm.board import verify
from farm.board.bundle import JOBS, MANIFEST, RUNS, SIGNATURE
from farm.board.keys import new_key
from farm.board.verify import BundleError, read_bundle
from farm.summary import SUMMARY_VERSION
from tests.unit.test_bundle import MACHINE, write_sample

Members = list[tuple[str, bytes]]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A valid unsigned bundle."""
    path = tmp_path / "good.bundle"
    write_sample(path)
    return path


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle whose runs.jsonl inflates to 600 MiB of zeros (about 600 KiB on disk)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.bundle"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MANIFEST, b"{}")
        archive.writestr(JOBS, b"")
        with archive.open(RUNS, "w") as stream:
            for _ in range(600):
                stream.write(bytes(1 << 20))
    return path


def members_of(path: Path) -> Members:
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def rezip(path: Path, members: Members, rehash: bool = False) -> Path:
    """``members`` as the zip at ``path``; with ``rehash``, the manifest's digests made to
    match the data members, as a forger would."""
    if rehash:
        body = dict(members)
        manifest = json.loads(body[MANIFEST])
        for name in (JOBS, RUNS):
            manifest["members"][name] = {"sha256": hashlib.sha256(body[name]).hexdigest(),
                                         "bytes": len(body[name])}
        members = [(name, json.dumps(manifest).encode() if name == MANIFEST else data)
                   for name, data in members]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path


def edited(path: Path, name: str, edit: Callable[[bytes], bytes], rehash: bool = False,
           into: str = "crafted.bundle") -> Path:
    """The bundle at ``path`` with member ``name`` passed through ``edit``, beside it."""
    members = [(member, edit(data) if member == name else data)
               for member, data in members_of(path)]
    return rezip(path.with_name(into), members, rehash)


def manifest_edit(**changes: Any) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        return json.dumps({**json.loads(data), **changes}).encode()
    return edit


def line_edit(number: int, change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        lines = data.decode().splitlines()
        record = json.loads(lines[number - 1])
        change(record)
        lines[number - 1] = json.dumps(record)
        return ("\n".join(lines) + "\n").encode()
    return edit


@pytest.fixture
def refused(tmp_path: Path) -> Iterator[Callable[[Path, str], BundleError]]:
    """Read a bundle that must be refused: one line, its path first, matching ``pattern``;
    the folder the same after as before."""
    def check(path: Path, pattern: str) -> BundleError:
        before = sorted((item.name, item.stat().st_mtime_ns) for item in tmp_path.iterdir())
        with pytest.raises(BundleError, match=pattern) as caught:
            read_bundle(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: ") and "\n" not in message
        assert sorted((item.name, item.stat().st_mtime_ns)
                      for item in tmp_path.iterdir()) == before
        return caught.value
    yield check


def test_the_good_bundle_is_read(good: Path) -> None:
    assert read_bundle(good).manifest.machine_id == MACHINE


def test_a_truncated_bundle_is_refused(good: Path, refused: Any) -> None:
    cut = good.with_name("cut.bundle")
    cut.write_bytes(good.read_bytes()[:-200])
    refused(cut, "not a zip file, or a truncated one.*ask for it again")


def test_a_file_that_is_no_zip_is_refused(tmp_path: Path, refused: Any) -> None:
    (tmp_path / "text.bundle").write_text("hello")
    refused(tmp_path / "text.bundle", "not a zip file")
    (tmp_path / "folder.bundle").mkdir()
    refused(tmp_path / "folder.bundle", "not a regular file")
    os.mkfifo(tmp_path / "fifo.bundle")
    refused(tmp_path / "fifo.bundle", "not a regular file")
    refused(tmp_path / "missing.bundle", "cannot open it")


def test_a_flipped_byte_is_refused(good: Path, refused: Any) -> None:
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as archive:
        info = archive.getinfo(RUNS)
    data[info.header_offset + 30 + len(RUNS) + 100] ^= 0x01  # inside the runs' deflate stream
    flipped = good.with_name("flipped.bundle")
    flipped.write_bytes(bytes(data))
    refused(flipped, "member runs.jsonl is damaged")


def test_a_member_changed_without_rehashing_the_manifest_is_refused(
        good: Path, refused: Any) -> None:
    crafted = edited(good, RUNS, line_edit(1, lambda run: run.update(decode_tok_s=999.0)))
    refused(crafted, "runs.jsonl does not match the manifest .*changed after it was made")


def test_a_manifest_whose_digest_was_edited_is_refused(good: Path, refused: Any) -> None:
    def edit(data: bytes) -> bytes:
        manifest = json.loads(data)
        manifest["members"][JOBS]["sha256"] = "0" * 64
        return json.dumps(manifest).encode()
    refused(edited(good, MANIFEST, edit), "jobs.jsonl does not match the manifest")


def test_a_manifest_naming_another_machine_is_refused(good: Path, refused: Any) -> None:
    refused(edited(good, MANIFEST, manifest_edit(machine_id="f" * 32)),
            "runs.jsonl line 1: identity .* is not the run's")


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/b", "a\\b", "C:x", "a/"])
def test_a_member_named_by_a_path_is_refused(good: Path, refused: Any, name: str) -> None:
    crafted = rezip(good.with_name("crafted.bundle"), [*members_of(good), (name, b"x")])
    assert name in zipfile.ZipFile(crafted).namelist()
    refused(crafted, re.escape(f"a member named {name!r}: a path, not a member's name"))


def test_a_member_given_twice_is_refused(good: Path, refused: Any) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):
        crafted = rezip(good.with_name("crafted.bundle"),
                        [*members_of(good), (RUNS, b"")])
    refused(crafted, "two members named 'runs.jsonl'")


def test_a_member_the_format_does_not_have_is_refused(good: Path, refused: Any) -> None:
    crafted = rezip(good.with_name("crafted.bundle"), [*members_of(good), ("x.sh", b"")])
    refused(crafted, "a member this format does not have: 'x.sh'")


def test_too_many_members_are_refused_before_the_zip_is_parsed(
        good: Path, refused: Any) -> None:
    crafted = rezip(good.with_name("crafted.bundle"),
                    [*members_of(good), *((f"m{n}", b"") for n in range(20))])
    refused(crafted, "a zip of 23 members .* a bundle has at most 4")


def test_a_zip_bomb_is_refused_by_its_declared_size(bomb: Path, refused: Any) -> None:
    refused(bomb, r"member runs.jsonl declares 629145600 bytes, more than it may have "
                  r"\(536870912\).*do not use it")


def test_a_zip_bomb_is_refused_by_its_ratio(good: Path, refused: Any) -> None:
    crafted = rezip(good.with_name("crafted.bundle"), [
        (name, bytes(5 << 20) if name == RUNS else data) for name, data in members_of(good)])
    refused(crafted, r"member runs.jsonl would inflate 5242880 bytes from \d+, more than "
                     "100 times: a zip bomb")


def test_a_member_is_read_no_further_than_its_declared_size(good: Path, refused: Any) -> None:
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as archive:
        info = archive.getinfo(RUNS)
    struct.pack_into("<L", data, info.header_offset + 22, 10)  # the local header's size
    at = data.find(b"PK\x01\x02")  # and the directory's
    while at >= 0:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_length] == RUNS.encode():
            struct.pack_into("<L", data, at + 24, 10)
        at = data.find(b"PK\x01\x02", at + 4)
    short = good.with_name("short.bundle")
    short.write_bytes(bytes(data))
    assert zipfile.ZipFile(short).getinfo(RUNS).file_size == 10
    refused(short, "member runs.jsonl is damaged .*ask for it again")


def test_a_bundle_larger_than_allowed_is_refused_unread(
        good: Path, refused: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "MAX_BUNDLE_BYTES", 1000)
    refused(good, r"\d+ bytes, more than a bundle may have \(1000\)")


def test_a_newer_format_asks_for_an_upgrade(good: Path, refused: Any) -> None:
    refused(edited(good, MANIFEST, manifest_edit(version=2, members={})),
            r"made by a newer farm \(bundle format 2; this farm reads format 1\); upgrade "
            "the farm")


def test_newer_summaries_ask_for_an_upgrade(good: Path, refused: Any) -> None:
    refused(edited(good, MANIFEST, manifest_edit(summary_version=SUMMARY_VERSION + 1)),
            f"job summaries are version {SUMMARY_VERSION + 1}, newer than this farm's "
            f"{SUMMARY_VERSION}; upgrade the farm")


def test_a_manifest_of_another_format_is_refused(good: Path, refused: Any) -> None:
    refused(edited(good, MANIFEST, manifest_edit(format="other")), "not a specfarm-bundle "
                                                                   "manifest")
    refused(edited(good, MANIFEST, lambda data: data[:-5], into="cut.bundle"),
            "manifest.json is not JSON")
    refused(edited(good, MANIFEST, lambda data: b'{"format": 1, "format": 2}', into="dup.bundle"),
            "manifest.json is not JSON .*a key given twice: format")


def test_a_non_hex_machine_id_is_refused(good: Path, refused: Any) -> None:
    refused(edited(good, MANIFEST, manifest_edit(machine_id="Z" * 32)),
            "manifest.json: machine_id: string should match pattern")


def test_a_run_line_with_an_extra_key_is_refused_by_its_line(good: Path, refused: Any) -> None:
    crafted = edited(good, RUNS, line_edit(2, lambda run: run.update(surprise=1)), rehash=True)
    refused(crafted, "runs.jsonl line 2: surprise: extra inputs are not permitted")


def test_a_run_of_a_value_no_column_holds_is_refused(good: Path, refused: Any) -> None:
    crafted = edited(good, RUNS, line_edit(3, lambda run: run.update(generated_tokens="32")),
                     rehash=True)
    refused(crafted, "runs.jsonl line 3: generated_tokens: input should be a valid integer")


def test_a_run_of_a_job_the_bundle_lacks_is_refused(good: Path, refused: Any) -> None:
    crafted = edited(good, RUNS, line_edit(1, lambda run: run.update(job_key="e" * 64)),
                     rehash=True)
    refused(crafted, "runs.jsonl line 1: a run of job eeeeeeeeeeee, which the bundle does not "
                     "hold")


def test_a_host_in_a_bundle_made_without_hosts_is_refused(good: Path, refused: Any) -> None:
    crafted = edited(good, RUNS, line_edit(1, lambda run: run.update(host="alice-desktop")),
                     rehash=True)
    refused(crafted, "runs.jsonl line 1: host 'alice-desktop' in a bundle made without hosts")


def test_a_signature_that_does_not_verify_is_refused(good: Path, refused: Any,
                                                      tmp_path: Path) -> None:
    signed = tmp_path / "signed.bundle"
    write_sample(signed, signing_key=new_key(tmp_path / "me.pem"))
    crafted = edited(signed, MANIFEST, manifest_edit(campaigns=["c1", "c2"]))
    refused(crafted, r"its signature does not verify \(key [0-9a-f]{16}\)")
    forged = edited(signed, SIGNATURE, lambda data: b'{"public_key": "AA==", "signature": ""}',
                    into="forged.bundle")
    refused(forged, "its signature does not verify")
    junk = edited(signed, SIGNATURE, lambda data: b'{"public_key": "!!"}', into="junk.bundle")
    refused(junk, "signature.json is not a signature")


def test_random_damage_is_refused_as_a_bundle_error_or_harmless(
        good: Path, tmp_path: Path) -> None:
    data = good.read_bytes()
    rng = random.Random(39)
    damaged = tmp_path / "damaged.bundle"
    outcomes = set()
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        damaged.write_bytes(bytes(mutated[:rng.choice([len(mutated), rng.randrange(
            len(mutated))])]))
        try:
            outcomes.add(list(read_bundle(damaged).runs) == list(read_bundle(good).runs))
        except BundleError as refusal:
            outcomes.add(str(refusal).startswith(f"{damaged}: "))
    assert outcomes == {True}


# --- typed, bounded records (farm.board.bounds) ------------------------------------------

OSC8_LINK = "\x1b]8;;https://evil.example/\x1b\\NVIDIA H100\x1b]8;;\x1b\\"
CLEAR_SCREEN = "\x1b[2J\x1b[H"
SET_TITLE = "\x1b]0;pwned\x07"


@pytest.mark.parametrize(("field", "value", "pattern"), [
    ("decode_tok_s", 1e300, "decode_tok_s: input should be less than or equal to 1000000"),
    ("decode_tok_s", 1e-9, "decode_tok_s: value error, a speed of 1e-09 tok/s"),
    ("decode_tok_s", float("nan"), "decode_tok_s: input should be a finite number"),
    ("ttft_ms", -5.0, "ttft_ms: input should be greater than or equal to 0"),
    ("gpu_memory_mb", -1.0, "gpu_memory_mb: input should be greater than or equal to 0"),
    ("energy_j", -1.0, "energy_j: input should be greater than or equal to 0"),
    ("server_start_s", -1.0, "server_start_s: input should be greater than or equal to 0"),
    ("server_start_s", float("inf"), "server_start_s: input should be a finite number"),
    ("warmup_s", 1e300, "warmup_s: input should be less than or equal to"),
    ("warmup_s", "1.5", "warmup_s: input should be a valid number"),
    ("prompt_tokens", 2**70, "prompt_tokens: input should be less than or equal to 2147483647"),
    ("seed", 2**70, "seed: input should be less than or equal to 9223372036854775807"),
    ("server_version", "version: " + "9" * 400 + " (abc1234)",
     "server_version: value error, names a build number of more digits than any build has"),
    ("gpu_name", OSC8_LINK, "gpu_name: value error, holds a control character u+001b at 0"),
    ("argv", ["BUILD:cpu", "--n-gpu-layers", "99" + CLEAR_SCREEN],
     "argv.2: value error, holds a control character u+001b at 2"),
    ("argv", ["BUILD:cpu", SET_TITLE], "argv.1: value error, holds a control character"),
    ("text", "red \x9b31m text", "text: value error, holds a control character u+009b"),
    ("prompt_id", "p" * 201, "prompt_id: string should have at most 200 characters"),
    ("tokens", list(range(70_000)), "tokens: list should have at most 65536 items"),
])
def test_a_run_value_out_of_its_bounds_is_refused(good: Path, refused: Any, field: str,
                                                  value: Any, pattern: str) -> None:
    crafted = edited(good, RUNS, line_edit(2, lambda run: run.update({field: value})),
                     rehash=True)
    refused(crafted, re.escape(f"runs.jsonl line 2: {pattern}"))


def _flag(flag: list[Any]) -> Callable[[dict[str, Any]], None]:
    def change(job: dict[str, Any]) -> None:
        job["spec"] = {"variant": {"flags": [["spec-type", "ngram-simple"], flag]}}
    return change


def _nested(job: dict[str, Any]) -> None:
    deep: dict[str, Any] = {}
    for _ in range(20):
        deep = {"x": deep}
    job["varying"] = deep


@pytest.mark.parametrize(("change", "pattern"), [
    (lambda job: job["summary"].update(speedup="fast"),
     "summary: value error, not a job summary (speedup: input should be a valid number, "
     "unable to parse string as a number)"),
    (lambda job: job["summary"].update(speedup=float("inf")),
     "summary: value error, a number out of range (inf; finite"),
    (lambda job: job["summary"].update(df=2**70), "summary: value error, a number out of range"),
    (lambda job: job["summary"].pop("version"),
     "summary: value error, not a job summary (job summary of version none"),
    (_flag([SET_TITLE, "1"]), "spec: value error, holds a control character u+001b at 0"),
    (_flag(["spec-draft-n-max", "4" + CLEAR_SCREEN]),
     "spec: value error, holds a control character u+001b at 1"),
    (_flag(["spec-draft-n-max", 2**70]), "spec: value error, a number out of range"),
    (_nested, "varying: value error, more than 20000 values, or nested deeper than 16"),
    (lambda job: job.update(stop_reason="s" * 1001),
     "stop_reason: string should have at most 1000 characters"),
])
def test_a_job_value_out_of_its_bounds_is_refused(
        good: Path, refused: Any, change: Callable[[dict[str, Any]], None],
        pattern: str) -> None:
    refused(edited(good, JOBS, line_edit(1, change), rehash=True),
            re.escape(f"jobs.jsonl line 1: {pattern}"))


def test_runs_jobs_and_lines_past_their_caps_are_refused(
        good: Path, refused: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "MAX_RUNS", 15)  # the sample holds 16
    refused(good, r"runs.jsonl: more than 15 runs; share fewer campaigns per bundle")
    monkeypatch.setattr(verify, "MAX_LINE_BYTES", 1000)
    refused(good, r"runs.jsonl line 1 is longer than 1000 bytes")
    monkeypatch.setattr(verify, "MAX_JOBS", 1)
    refused(good, r"jobs.jsonl: 2 jobs, more than a bundle may hold \(1\); share fewer")


def test_a_changed_member_is_named_as_changed_even_where_a_line_fails_first(
        good: Path, refused: Any) -> None:
    crafted = edited(good, RUNS, line_edit(1, lambda run: run.update(generated_tokens="x")))
    refused(crafted, "runs.jsonl does not match the manifest .*changed after it was made")


def test_runs_changed_on_disk_after_the_check_are_refused_when_read_again(
        good: Path, tmp_path: Path) -> None:
    bundle = read_bundle(good)
    crafted = edited(good, RUNS, line_edit(1, lambda run: run.update(decode_tok_s=999.0)),
                     rehash=True)
    crafted.replace(good)  # the file swapped between the check and the board's read
    with pytest.raises(BundleError, match=r"runs\.jsonl does not match the manifest"):
        list(bundle.runs)
