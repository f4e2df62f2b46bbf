"""What a commit's build or server leaves in a folder it writes, read, measured and removed
by the farm without trusting it.

A build folder or a server's socket folder holds whatever the commit's code put there: a
FIFO that blocks a reader forever, a symbolic link to ``/dev/zero`` or to a worker's file,
a file of any size, a folder of mode 000 that hides what it holds from a walk. So:

- a file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (no link followed, no FIFO waited on),
  must be a regular file by ``fstat`` of that descriptor, and is read to a stated bound
  (``read_file``, ``read_tail``, ``copy_file``); anything else is the caller's error class
  with one line saying what was found and what the farm reads there;
- a folder is walked by descriptors, each folder opened relative to its parent without
  following links, and made readable (``u+rwx``) first where its mode hides it, so that
  ``folder_bytes`` counts every file (its size or its blocks, whichever is more) and
  ``remove_folder`` leaves nothing behind and never follows a link out of the folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from farm.errors import FarmError

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
# How deep the walk follows nested folders: past it a count refuses (``TooDeep``) and a
# removal moves the deeper folder up to the top and removes it from there, so that neither
# holds more than this many descriptors at once.
MAX_DEPTH = 128
_OWNER_ALL = stat.S_IRWXU
# The least an entry counts towards a folder's size (``folder_bytes``): a block, as an
# inode and its name take room that no file size shows.
ENTRY_BYTES = 4096


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "not a regular file"


def open_regular(path: Path, *, what: str, error: type[FarmError]) -> int:
    """A descriptor of the regular file at ``path``, opened without following a link or
    waiting on a FIFO; ``error`` naming ``what`` and what is there instead. A missing file
    is ``FileNotFoundError``, for the caller to decide."""
    try:
        descriptor = os.open(path, _READ)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise
        found = "a symbolic link" if exc.errno == errno.ELOOP else \
            f"not to be opened ({exc.strerror})"
        raise error(f"{what} ({path}) is {found}: refused; the farm reads only a regular "
                    "file there") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise error(f"{what} ({path}) is {kind_of(mode)}, not a regular file: refused; the "
                    "farm reads only a regular file there")
    return descriptor


def _read_from(descriptor: int, offset: int, most: int) -> bytes:
    """Up to ``most`` bytes from ``offset`` (fewer where the file ends first)."""
    parts, left = [], most
    while left > 0:
        chunk = os.pread(descriptor, min(_CHUNK, left), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_file(path: Path, most: int, *, what: str, error: type[FarmError],
              offset: int = 0, cut: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` from ``offset`` (``open_regular``): all of
    them, and ``error`` if there are more than ``most``; with ``cut``, the first ``most``."""
    descriptor = open_regular(path, what=what, error=error)
    try:
        data = _read_from(descriptor, offset, most + 1)
    finally:
        os.close(descriptor)
    if len(data) > most and not cut:
        raise _over(what, path, most, error)
    return data[:most]


def _over(what: str, path: Path, most: int, error: type[FarmError]) -> FarmError:
    return error(f"{what} ({path}) holds more than {most} bytes, the farm's bound for it: "
                 "refused")


def read_tail(path: Path, most: int, *, what: str, error: type[FarmError]) -> bytes:
    """The last ``most`` bytes (at most) of the regular file at ``path``."""
    descriptor = open_regular(path, what=what, error=error)
    try:
        size = os.fstat(descriptor).st_size
        return _read_from(descriptor, max(0, size - most), most)
    finally:
        os.close(descriptor)


def copy_file(source: Path, target: Path, most: int, *, what: str,
              error: type[FarmError]) -> None:
    """Copy the regular file at ``source`` (``open_regular``, at most ``most`` bytes:
    ``error`` past it) to a new file ``target``, executable by everyone (a binary)."""
    descriptor = open_regular(source, what=what, error=error)
    written = 0
    try:
        with open(target, "xb") as out:
            while chunk := os.read(descriptor, _CHUNK):
                written += len(chunk)
                if written > most:
                    raise _over(what, source, most, error)
                out.write(chunk)
    finally:
        os.close(descriptor)
    target.chmod(0o755)


def file_below(folder: Path, relative: str, *, what: str,
               error: type[FarmError]) -> Path | None:
    """``folder / relative`` where it is a regular file reached through folders, none of
    its parts a link (each checked by ``lstat``); None where nothing is there, ``error``
    naming anything else. For a folder no process writes any more (a build's, once its
    sandbox ended), so that what is checked stays so."""
    path, parts = folder, Path(relative).parts
    for index, part in enumerate(parts, start=1):
        path, last = path / part, index == len(parts)
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:  # a folder of mode 000 on the way, for one
            found = f"not to be looked at ({exc.strerror})"
        else:
            if stat.S_ISREG(mode) if last else stat.S_ISDIR(mode):
                continue
            found = f"{'a file' if stat.S_ISREG(mode) else kind_of(mode)}, not " \
                    f"{'a regular file' if last else 'a folder'}"
        raise error(f"{what} ({path}) is {found}: refused; the farm copies out only a "
                    "regular file in the build's own folders")
    return path


class HeldSocket:
    """The UNIX socket a server made in its folder, held by a path descriptor, so that
    ``address`` (``/proc/self/fd/N``) reaches that very socket whatever is put at its name
    later: a link, or another socket, put there is never connected to. Where there is no
    ``O_PATH`` (macOS, which runs no commit's code) the address is the name, checked once."""

    def __init__(self, address: str, descriptor: int | None) -> None:
        self.address, self._descriptor = address, descriptor

    @classmethod
    def of(cls, path: Path, *, what: str, error: type[FarmError]) -> HeldSocket:
        """The socket at ``path``, if it is one this process's user owns (``error`` for
        anything else there); ``FileNotFoundError`` while there is nothing."""
        descriptor = None
        try:
            if hasattr(os, "O_PATH"):
                descriptor = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                status = os.fstat(descriptor)
            else:
                status = os.lstat(path)
        except FileNotFoundError:
            raise
        except OSError as exc:  # the server took its folder's modes away, for one
            refused = f"cannot be reached ({exc.strerror})"
        else:
            refused = (
                f"is {kind_of(status.st_mode)}" if not stat.S_ISSOCK(status.st_mode) else
                f"is a socket of user {status.st_uid}, not this worker's ({os.geteuid()})"
                if status.st_uid != os.geteuid() else "")
        if refused:
            if descriptor is not None:
                os.close(descriptor)
            raise error(f"{what} ({path}) {refused}: refused; the farm connects only to a "
                        "socket the server made there itself")
        if descriptor is None:
            return cls(str(path), None)
        return cls(f"/proc/self/fd/{descriptor}", descriptor)

    def close(self) -> None:
        """Let the socket go."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


class TooDeep(Exception):
    """A folder nests folders deeper than MAX_DEPTH."""


def _open_folder(name: str | Path, parent: int | None) -> int:
    """A readable descriptor of the folder ``name`` (relative to the descriptor ``parent``),
    never through a link; a folder whose mode keeps its owner out is given ``u+rwx`` first
    (``_open_as_owner``)."""
    try:
        descriptor = os.open(name, _DIRECTORY, dir_fd=parent)
    except PermissionError:
        descriptor = _open_as_owner(name, parent)
    mode = os.fstat(descriptor).st_mode
    if mode & _OWNER_ALL != _OWNER_ALL:  # readable, but entries cannot be looked up
        os.fchmod(descriptor, stat.S_IMODE(mode) | _OWNER_ALL)
    return descriptor


def _open_as_owner(name: str | Path, parent: int | None) -> int:
    """The folder ``name``, given ``u+rwx`` first through a path descriptor of that very
    folder (``/proc/self/fd``), so that no link swapped in meanwhile is followed."""
    if not hasattr(os, "O_PATH"):  # macOS: no /proc; a mode set on a link is the link's own
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        os.chmod(name, stat.S_IMODE(mode) | _OWNER_ALL, dir_fd=parent, follow_symlinks=False)
        return os.open(name, _DIRECTORY, dir_fd=parent)
    handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=parent)
    try:
        own = f"/proc/self/fd/{handle}"
        os.chmod(own, stat.S_IMODE(os.fstat(handle).st_mode) | _OWNER_ALL)
        return os.open(own, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    finally:
        os.close(handle)


def _entries(descriptor: int) -> Iterator[tuple[str, os.stat_result]]:
    """Each entry of an open folder with its ``lstat``, as the folder is read (an entry
    removed meanwhile is skipped)."""
    with os.scandir(descriptor) as found:
        for entry in found:
            with contextlib.suppress(FileNotFoundError):
                yield entry.name, entry.stat(follow_symlinks=False)


def _vanished(exc: OSError) -> bool:
    """A folder gone, or replaced by a file or a link, while the walk ran (a build that is
    still writing): what was there is counted at its next walk."""
    return exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def folder_bytes(folder: Path) -> int:
    """What ``folder`` holds on disk: every file's size or allocated blocks, whichever is
    more (a sparse file counts its size), folders' blocks too, and every entry at least
    ENTRY_BYTES (its inode: millions of empty files fill a disk too); folders of any mode are
    entered (``u+rwx`` given where needed), links are counted as links, never followed;
    ``TooDeep`` past MAX_DEPTH. 0 when it is no folder."""
    try:
        top = _open_folder(folder, None)
    except OSError as exc:
        if _vanished(exc):
            return 0
        raise
    try:
        return _count(top, 0)
    finally:
        os.close(top)


def _count(descriptor: int, depth: int) -> int:
    total = 0
    for name, status in _entries(descriptor):
        folder = stat.S_ISDIR(status.st_mode)
        total += max(0 if folder else status.st_size, status.st_blocks * 512, ENTRY_BYTES)
        if not folder:
            continue
        if depth + 1 >= MAX_DEPTH:
            raise TooDeep(f"it nests folders deeper than {MAX_DEPTH}")
        try:
            inner = _open_folder(name, descriptor)
        except OSError as exc:
            if _vanished(exc):
                continue
            raise
        try:
            total += _count(inner, depth + 1)
        finally:
            os.close(inner)
    return total


def remove_folder(folder: Path) -> None:
    """Remove ``folder`` and all it holds, whatever the modes inside (``u+rwx`` given where
    needed) and however deep (a folder past MAX_DEPTH is moved up to the top first, under a
    random name, and removed by another pass); a link is removed, never followed. Nothing to
    do when it is missing; a file or link there is removed. ``OSError`` only where something
    could not be removed."""
    try:
        top = _open_folder(folder, None)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        folder.unlink()
        return
    try:
        while _empty(top, top, 0):
            pass
    finally:
        os.close(top)
    folder.rmdir()


def _empty(descriptor: int, top: int, depth: int) -> bool:
    """Remove what the open folder holds; True when a folder past MAX_DEPTH was moved up to
    ``top`` instead, for another pass."""
    again = False
    for name, status in _entries(descriptor):
        if not stat.S_ISDIR(status.st_mode):
            os.unlink(name, dir_fd=descriptor)
        elif depth + 1 >= MAX_DEPTH:
            os.rename(name, f".specfarm-deep-{secrets.token_hex(8)}", src_dir_fd=descriptor,
                      dst_dir_fd=top)
            again = True
        else:
            inner = _open_folder(name, descriptor)
            try:
                again |= _empty(inner, top, depth + 1)
            finally:
                os.close(inner)
            os.rmdir(name, dir_fd=descriptor)
    return again
