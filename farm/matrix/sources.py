"""Builds a matrix names by source (a git URL or repository, a ref, a backend, cmake options):
what a source build may ask for (its cmake options: ``farm.matrix.cmake_options``), and its
ref resolved to a commit once, at load.

The commit is what every worker builds; resolving it here (``farm run``, ``farm submit``,
``--dry-run``) and storing it in the job spec means a moving ref (``master``) names one
commit for the whole campaign. Git is run with an argument list, never through a shell,
and a ref or URL that could read as an option is refused before git sees it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from farm.errors import ConfigError

# Callers check a build's cmake options with its source, here (the allow-list: its module).
from farm.matrix.cmake_options import check_cmake_option as check_cmake_option

# A ref as git spells branches, tags, pull/N/head and master~1: no option (a leading
# '-'), no reflog ('@{'); a range ('..') is refused by resolve_commit.
REF_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./~^-]*$"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_GIT_TIMEOUT = 120

# git run in a repository someone else made (`farm bisect --clone DIR`, a matrix's local
# `git:` path) reads that repository's own config, and settings there run programs as the
# operator: `gpg.program` under `log.showSignature`, `core.fsmonitor`, hooks. So
# git_command names each such setting on the command line, where it outranks a
# repository's config, and git in such a repository runs with GIT_ENV: no system or user
# config either. Neither disables git's ownership check (`safe.directory`): it still
# refuses a repository another user owns.
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
           "PATH": "/usr/bin:/bin"}
_NO_PROGRAMS = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "log.showSignature=false",
                "gpg.program=false", "gpg.openpgp.program=false", "gpg.x509.program=false",
                "gpg.ssh.program=false")


def git_command(*args: str) -> list[str]:
    """``git ARGS`` with every setting of a repository's config that runs a program
    overridden (a hook, an fsmonitor, a signature's verifier)."""
    return ["git", *(item for setting in _NO_PROGRAMS for item in ("-c", setting)), *args]


def source_location(git: str, base: Path) -> str:
    """A git source as every node names it: a URL as written, a local repository as an
    absolute path (relative ones start at the matrix file)."""
    if "://" in git or re.match(r"^[\w.-]+@[\w.-]+:", git):
        return git
    return str((base / Path(git).expanduser()).resolve())


def _git(argv: list[str], where: str) -> subprocess.CompletedProcess[str]:
    # From "/": a command that names no repository (ls-remote) finds none around the
    # farm's working directory either.
    try:
        return subprocess.run(git_command(*argv), check=False, capture_output=True,
                              text=True, timeout=_GIT_TIMEOUT, stdin=subprocess.DEVNULL,
                              env=GIT_ENV, cwd="/")
    except FileNotFoundError as exc:
        raise ConfigError(f"{where}: git is not installed here; install it to resolve "
                          "the ref") from exc
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"{where}: git did not answer in {_GIT_TIMEOUT} s; check the "
                          "URL and the network") from exc


def _remote_refs(git: str, ref: str, where: str) -> dict[str, str]:
    result = _git(["ls-remote", "--", git, ref], where)
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"{where}.git: cannot read {git}: {detail}; check the URL (and "
                          "that this machine reaches it)")
    pairs = (line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line)
    return {name: commit for commit, name in pairs}


def resolve_commit(git: str, ref: str, where: str) -> str:
    """The commit ``ref`` names in ``git`` now: a local repository asks git directly, a
    URL through ``git ls-remote`` (a branch, a tag, pull/N/head); a full commit id stands."""
    if git.startswith("-"):
        raise ConfigError(f"{where}.git: {git!r} is not a URL or a repository path")
    if ".." in ref:
        raise ConfigError(f"{where}.ref: {ref!r} is a range; give one branch, tag, "
                          "pull/N/head or commit")
    if Path(git).is_dir():
        found = _git(["-C", str(Path(git).resolve()), "rev-parse", "--verify", "--quiet",
                      "--end-of-options", f"{ref}^{{commit}}"], where)
        if found.returncode == 0 and COMMIT.match(found.stdout.strip()):
            return found.stdout.strip()
    elif COMMIT.match(ref):
        return ref
    else:
        listed = _remote_refs(git, ref, where)
        for name in (ref, f"refs/{ref}", f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}",
                     f"refs/tags/{ref}"):
            if name in listed:
                return listed[name]
    raise ConfigError(f"{where}.ref: {git} has no ref {ref!r}; give a branch, a tag, "
                      "pull/N/head or a full commit id it has")


def _normal(source: str) -> str:
    text = source.rstrip("/").removesuffix(".git").rstrip("/")
    return text if "://" in text or ":" in text else str(Path(text).expanduser().resolve())


def source_allowed(git: str, allowed: list[str] | tuple[str, ...]) -> bool:
    """Whether ``git`` is one of ``allowed`` (a trailing ``/`` or ``.git`` aside, local
    paths compared resolved)."""
    return _normal(git) in {_normal(item) for item in allowed}


def first_parent_commits(git: str, good: str, bad: str, where: str) -> list[tuple[str, str]]:
    """The commits after ``good`` up to ``bad`` (both resolved commits of the local
    repository ``git``) along bad's first parents, oldest first, each with its subject
    line (``git rev-list --first-parent good..bad``); a ConfigError unless good is an
    ancestor of bad."""
    if not Path(git).is_dir():
        raise ConfigError(f"{where}.git: {git}: `farm bisect` lists the commits between good "
                          "and bad with git: give the path of a local clone of it (as --clone, to "
                          "keep the URL the workers fetch)")
    git = str(Path(git).resolve())
    if good == bad:
        raise ConfigError(f"--good and --bad are the same commit {good[:12]}; give a good "
                          "commit before the bad one")
    ancestor = _git(["-C", git, "merge-base", "--is-ancestor", "--end-of-options", good, bad],
                    where)
    if ancestor.returncode != 0:
        raise ConfigError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]} in {git}: "
                          "a bisect searches the commits from good to bad; give a good commit "
                          "that bad descends from (swap them if good is the newer)")
    listed = _git(["-C", git, "log", "--no-show-signature", "--first-parent", "--reverse",
                   "--format=%H%x09%s", "--end-of-options", f"{good}..{bad}"], where)
    if listed.returncode != 0:
        raise ConfigError(f"{where}.git: git log failed in {git}: {listed.stderr.strip()}")
    return [(commit, subject) for commit, _, subject in
            (line.partition("\t") for line in listed.stdout.splitlines())]


def require_repository(path: Path, where: str) -> str:
    """``path`` as an absolute path, a ConfigError unless it is a git repository."""
    found = _git(["-C", str(path.resolve()), "rev-parse", "--git-dir"], where)
    if found.returncode != 0:
        raise ConfigError(f"{where}: {path} is not a git repository; give a clone of the "
                          "matrix's source")
    return str(path.resolve())


def commit_subject(git: str, commit: str, where: str) -> str:
    """The subject line of ``commit`` in the local repository ``git``."""
    git = str(Path(git).resolve())
    found = _git(["-C", git, "log", "--no-show-signature", "-1", "--format=%s",
                  "--end-of-options", commit], where)
    return found.stdout.strip() if found.returncode == 0 else ""
