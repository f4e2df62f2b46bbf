"""git's network side for source builds: every clone and fetch bounded in time, what a
killed one left behind recovered, and its failures told apart (docs/builds.md).

What may pass by itself is a transient ``BuildUnavailable`` (the worker tries again, then
hands the job back for later without refusing it): a source that does not answer, times
out or answers 5xx or 429, a connection cut mid-transfer. What will not is a refusal of
this node: no such repository, no access. A commit a mirror does not have (yet) is
transient too: ``missing_commit``.

What the source itself says (``remote:`` lines, ``remote error:``) is the source answering:
it never makes a failure transient, so a hostile server cannot keep a job deferred; and
git's output enters the error (job.error, the log) with its control characters replaced.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from farm.errors import BuildUnavailable
from farm.matrix.sources import COMMIT, git_command
from workers.setup.steps import say

# One clone or fetch of llama.cpp (about 500 MB of history) on a slow link; git's own
# low-speed bound ends a transfer stuck below 1 kB/s for a minute sooner.
GIT_SECONDS = 1800
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
        "GIT_HTTP_LOW_SPEED_TIME": "60"}
# The source says, for good, that it has nothing for us (checked first: a 404 also reads
# "unable to access").
_GONE = re.compile(r"not found|does not appear to be a git repository|returned error: 40[134]"
                   r"|Authentication failed|could not read Username|access denied",
                   re.IGNORECASE)
# The source did not answer, or broke off: it may answer later.
_PASSING = re.compile(
    r"could not resolve host|connection refused|connection reset|timed out|unable to connect"
    r"|unable to access|returned error: (5\d\d|429|408)|early eof|hung up unexpectedly"
    r"|rpc failed|temporary failure|network is unreachable|no route to host"
    r"|gnutls_handshake",
    re.IGNORECASE)


def remote_git(args: list[str], url: str) -> None:
    """``git ARGS`` that talks to ``url``; BuildUnavailable when it fails, transient when
    the failure may pass. It runs in the node's own clones, with the operator's own git
    config (credentials, proxies) but no program a repository's config names
    (``farm.matrix.sources.git_command``)."""
    argv = git_command(*args)
    say("$ git " + " ".join(args))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=GIT_SECONDS, check=False, stdin=subprocess.DEVNULL,
                              env={**os.environ, **_ENV})
    except subprocess.TimeoutExpired as exc:
        raise BuildUnavailable(f"{url}: cannot fetch: git took over {GIT_SECONDS} s",
                               transient=True) from exc
    if done.returncode == 0:
        return
    detail = "".join(char if char.isprintable() else "?"
                     for char in " ".join(done.stderr.split())[-300:])
    own = "\n".join(line for line in done.stderr.splitlines()
                    if not line.startswith("remote:") and "remote error:" not in line)
    passing = _GONE.search(own) is None and _PASSING.search(own) is not None
    # Offline, or behind a firewall: a clone made where the network is works as well.
    offline = ("; without the network, clone it where you can and give the local clone "
               "instead (`farm build NAME --source /path/to/llama.cpp`, or `git:` in a "
               "matrix's build)" if passing else "")
    raise BuildUnavailable(f"{url}: cannot fetch: {detail or f'exit code {done.returncode}'}"
                           f"{offline}", transient=passing)


def clone(url: str, repo: Path) -> None:
    """A clone of ``url`` (no checkout) at ``repo``, made whole or not at all: git clones
    into a folder beside it, which a killed clone leaves for the next one to remove."""
    partial = repo.with_name(repo.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    repo.parent.mkdir(parents=True, exist_ok=True)
    remote_git(["clone", "--no-checkout", "--", url, str(partial)], url)
    partial.rename(repo)


def clear_stale_locks(repo: Path) -> None:
    """Remove the lock files a killed git left in ``repo`` (and its worktrees). Callers
    hold the node's build lock, so no git of this node works in it now: every lock is
    stale."""
    git_dir = repo / ".git"
    for lock in [*git_dir.glob("*.lock"), *git_dir.glob("worktrees/*/*.lock"),
                 *git_dir.glob("refs/**/*.lock")]:
        say(f"removing {lock}, left by a git that was stopped")
        lock.unlink(missing_ok=True)


def missing_commit(url: str, ref: str) -> BuildUnavailable | None:
    """When ``ref`` is a full commit id that ``url`` does not hold after a fetch of every
    branch: transient (a mirror behind the source the commit was pinned from); None for
    a name (a branch or tag that does not exist is the matrix's error)."""
    if COMMIT.match(ref) is None:
        return None
    return BuildUnavailable(f"{url}: commit {ref} is not there (yet): a mirror behind the "
                            "repository it was pinned from, or history rewritten",
                            transient=True)
