"""Two contributors, one board, for real: two farm data dirs on this machine (two random
machine ids) each run a small SmolLM2 n-gram campaign with their own draft lengths on real
llama-servers, `farm share` each as a bundle (one signed), and `farm board add` merges
them: the draft length both ran counts two machines, the same bundle added twice adds
nothing, a bundle whose stated summary was edited (its manifest rehashed to match) still
shows the board's own figure and is reported, a byte flipped without rehashing is refused
with nothing changed, and `--require-signed` takes only the signed contributor's.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_farm_run import farm
from tests.helpers import matrix_dict, write_matrix

pytestmark = [pytest.mark.server, pytest.mark.alone]


def _contribute(root: Path, name: str, smollm2: Path, lengths: tuple[int, ...]
                ) -> tuple[dict[str, str], str]:
    """A contributor's data dir and the campaign it ran there."""
    env = {"FARM_DATA_DIR": str(root / name)}
    campaign = f"{name}-ngram"
    matrix = matrix_dict(smollm2, campaign=campaign, pairs=3, **{"max-pairs": 3},
                         repetitions=1, variants=[
                             {"name": f"ngram-{length}", "flags": {
                                 "spec-type": "ngram-simple", "spec-draft-n-max": length}}
                             for length in lengths])
    ran = farm("run", str(write_matrix(root, matrix, f"{name}.yaml")), env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return env, campaign


def _board(board: str, *args: str) -> Any:
    found = farm("board", *args, "--board", board)
    assert found.returncode == 0, found.stderr[-3000:]
    return found


def _show(board: str) -> dict[str, Any]:
    return dict(json.loads(_board(board, "show", "--format", "json").stdout))


def _edited(bundle: Path, out: Path) -> None:
    """``bundle`` with its first job's stated speedup doubled, the manifest's hash of the
    jobs member rehashed to match: a bundle whose checks all pass."""
    with zipfile.ZipFile(bundle) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    lines = members["jobs.jsonl"].decode().splitlines()
    first = json.loads(lines[0])
    first["summary"]["speedup"] = first["summary"]["speedup"] * 2
    lines[0] = json.dumps(first, sort_keys=True)
    members["jobs.jsonl"] = ("\n".join(lines) + "\n").encode()
    manifest = json.loads(members["manifest.json"])
    manifest["members"]["jobs.jsonl"] = {
        "sha256": hashlib.sha256(members["jobs.jsonl"]).hexdigest(),
        "bytes": len(members["jobs.jsonl"])}
    members["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    members.pop("signature.json", None)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in members.items():
            archive.writestr(name, body)


def test_two_machines_bundles_merge_into_one_board(tmp_path: Path, smollm2: Path) -> None:
    alice, alice_campaign = _contribute(tmp_path, "alice", smollm2, (4, 8))
    bob, bob_campaign = _contribute(tmp_path, "bob", smollm2, (4, 16))
    key = tmp_path / "alice.key"
    made = farm("board", "key", str(key))
    assert made.returncode == 0, made.stderr
    shared = farm("share", alice_campaign, "--dry-run", env=alice)
    assert shared.returncode == 0 and "would share 2 jobs" in shared.stdout, shared.stderr
    bundles = {name: tmp_path / f"{name}.zip" for name in ("alice", "bob")}
    for name, env, campaign, sign in (("alice", alice, alice_campaign, ("--sign", str(key))),
                                      ("bob", bob, bob_campaign, ())):
        done = farm("share", campaign, "-o", str(bundles[name]), *sign, env=env)
        assert done.returncode == 0, done.stderr
    # Nothing of where it ran: no host name, no data dir.
    raw = b"".join(zipfile.ZipFile(bundles["alice"]).read(name)
                   for name in zipfile.ZipFile(bundles["alice"]).namelist())
    assert str(tmp_path).encode() not in raw

    board = f"sqlite:///{tmp_path / 'board.db'}"
    signed_only = farm("board", "add", str(bundles["alice"]), "--require-signed",
                       "--board", board)
    assert signed_only.returncode == 2 and "trust" in signed_only.stderr
    _board(board, "trust", f"{key}.pub", "--name", "alice")
    refused = farm("board", "add", str(bundles["bob"]), "--require-signed", "--board", board)
    assert refused.returncode == 2 and "unsigned" in refused.stderr
    added = _board(board, "add", str(bundles["alice"]), str(bundles["bob"]))
    print(added.stdout)
    assert added.stdout.count("2 new jobs") == 2
    found = _show(board)
    rows = {row["setting"]: row for row in found["rows"]}
    both = next(row for setting, row in rows.items() if "spec-draft-n-max 4" in setting)
    assert both["machines"] == 2 and len(both["bundles"]) == 2
    assert {row["machines"] for setting, row in rows.items()
            if "spec-draft-n-max 4" not in setting} == {1}
    signed = {bundle["machine"]: bundle["signed"] for bundle in found["bundles"]}
    assert sorted(signed.values()) == ["known: alice", "unsigned"]
    print(_board(board, "show").stdout)

    again = _board(board, "add", str(bundles["bob"]))
    assert "on the board already; nothing added" in again.stdout
    assert _show(board)["rows"] == found["rows"]

    edited = tmp_path / "bob-edited.zip"
    _edited(bundles["bob"], edited)
    reported = _board(board, "add", str(edited))
    assert "0 new jobs, 0 new runs" in reported.stdout
    assert "differs from its stated summary" in reported.stdout and "speedup stated" in \
        reported.stdout
    assert _show(board)["rows"] == found["rows"]  # the board's own figures, unchanged

    flipped = tmp_path / "bob-flipped.zip"
    body = bytearray(bundles["bob"].read_bytes())
    body[len(body) // 3] ^= 0xFF
    flipped.write_bytes(bytes(body))
    bad = farm("board", "add", str(flipped), "--board", board)
    assert bad.returncode == 2 and str(flipped) in bad.stderr
    assert "Traceback" not in bad.stderr
    assert len(_show(board)["bundles"]) == 3  # alice's, bob's, bob's edited: no fourth

    site = tmp_path / "site"
    _board(board, "site", "-o", str(site))
    assert (site / "index.html").is_file()
