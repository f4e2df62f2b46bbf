"""A local llama.cpp repository made from the provisioned sdist's tree, and the commits the
history and bisect tests plant in it: a harmless change of a server log line, and a fixed
cost per speculative round (3 ms of sleep in every `common_speculative_draft` call,
inside its draft timer)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from farm.settings import load_settings
from tests.helpers import git
from workers.paths import NodePaths
from workers.setup.manifests import load_manifest

SPECULATIVE = "common/speculative.cpp"
TIMED_DRAFT = "            impl->draft(dparams);\n"
SERVER_LINE = ('SRV_INF("%s", "initializing ...\\n");',
               'SRV_INF("%s", "initializing (commit B) ...\\n");')


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old``, there exactly once, by ``new``."""
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} is not there once"
    path.write_text(text.replace(old, new))


def commit(repo: Path, message: str) -> str:
    """Commit every change; the new commit."""
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def sdist_repository(repo: Path, message: str) -> str:
    """``repo``: a git repository on master of the provisioned build's tree (its build
    directories left out), one commit; returns it."""
    manifest = load_manifest("cpu", NodePaths.of(load_settings()))
    assert manifest is not None and manifest.tree is not None
    shutil.copytree(Path(manifest.tree), repo,
                    ignore=shutil.ignore_patterns("build-specfarm-*"))
    git(repo, "init", "-q", "-b", "master")
    return commit(repo, message)


def bare_sdist_repository(work: Path, served: Path) -> str:
    """``served/repo.git``: a bare clone of ``sdist_repository`` (made in ``work``), as
    `git daemon` serves it; returns its one commit."""
    made = sdist_repository(work / "llama.cpp", "b11434 from the sdist")
    git(work, "clone", "-q", "--bare", str(work / "llama.cpp"), str(served / "repo.git"))
    return made


def plant_draft_cost(repo: Path, ms: int = 3) -> None:
    """``ms`` of sleep in every draft call, inside the draft timer."""
    edit(repo / SPECULATIVE, TIMED_DRAFT,
         f"            std::this_thread::sleep_for(std::chrono::milliseconds({ms}));\n"
         + TIMED_DRAFT)
    edit(repo / SPECULATIVE, "#include <algorithm>\n",
         "#include <algorithm>\n#include <chrono>\n#include <thread>\n")


def cost_then_readme(repo: Path, cost: str, readme: str, ms: int = 3) -> list[str]:
    """Two commits: ``ms`` per draft call (``plant_draft_cost``, message ``cost``), then a
    README line nothing builds (message ``readme``)."""
    plant_draft_cost(repo, ms)
    planted = commit(repo, cost)
    with (repo / "README.md").open("a") as text:
        text.write("\nA line nothing builds.\n")
    return [planted, commit(repo, readme)]


def nightly_matrix(path: Path, repo: Path, model: Path, *, prompt: str, n_predict: int,
                   pairs: int) -> Path:
    """The matrix these tests follow over commits: master of ``repo``, the CPU MTP oracle,
    baseline against draft-mtp (n-max 3), two prompts of 2 repetitions a block, a fixed
    design of ``pairs``."""
    path.write_text(yaml.safe_dump({
        "campaign": "nightly", "prompt-mode": "completion",
        "build": {"name": "master", "git": str(repo), "ref": "master"},
        "models": [{"name": "oracle-cpu", "path": str(model)}],
        "prompts": ["hello speculative world", prompt],
        "n-predict": n_predict, "repetitions": 2, "pairs": pairs, "max-pairs": pairs,
        "flags": {"ctx-size": 256, "threads": 2},
        "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp",
                                               "spec-draft-n-max": 3}}]}))
    return path
