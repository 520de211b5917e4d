"""Reading a package's files (SPEC §3) without following anything out of the library: the kind checked before
and after opening, the opened file checked against the root through its descriptor, the bytes bounded."""

from __future__ import annotations

import errno
import os
import stat
from functools import lru_cache
from pathlib import Path


class NotARegularFile(OSError):
    """SKILL.md is a FIFO, device, socket or directory: reading it could block forever or never end."""


class LeavesRoot(OSError):
    """The file SKILL.md opened lies outside the library root (a link, or a folder swapped for one)."""


@lru_cache(maxsize=16)
def _real_root(root: str) -> str:
    return os.path.realpath(root).rstrip(os.sep) + os.sep


@lru_cache(maxsize=16)
def _root_device(root: str) -> int:
    return os.stat(root).st_dev


def _opened_path(fd: int) -> str | None:
    """The real path of the file open on `fd`, as the kernel knows it (Linux: /proc/self/fd); None where
    it cannot say."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _file_kind(mode: int) -> str:
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a regular file")


def relative_path(pkg: str | Path, root: str | Path) -> str:
    """`pkg` relative to `root` in POSIX form ("." for the root itself), by string prefix: pathlib's
    relative_to costs more than reading a small SKILL.md."""
    pkg_s, root_s = os.fspath(pkg), os.fspath(root).rstrip(os.sep) or os.sep
    if pkg_s == root_s:
        return "."
    prefix = root_s if root_s.endswith(os.sep) else root_s + os.sep
    if pkg_s.startswith(prefix):
        return pkg_s[len(prefix) :].replace(os.sep, "/")
    return Path(pkg).relative_to(root).as_posix()  # not a plain prefix: pathlib decides (or raises)


def read_limited(
    path: str | Path, limit: int, mode: int | None = None, root: str | None = None, ino: int = 0
) -> tuple[bytes, bool]:
    """The first `limit` bytes of a regular file and whether there were more; NotARegularFile otherwise.

    The kind is checked before opening (opening some devices has effects; `mode` is the caller's own
    lstat of a file that is not a symlink) and again on the open file: O_NONBLOCK keeps the open itself
    from waiting on a FIFO swapped in between the two checks.

    A file the caller saw as no symlink (`mode` given) is opened with O_NOFOLLOW: swapped for a link since,
    it fails to open. With `root`, the file actually opened must lie under it (its path asked of the kernel
    through the open descriptor, so the check and the read concern the same file, whatever link or
    swapped folder led there); LeavesRoot otherwise, before a byte is read. That question costs a system call,
    a visible share of a package's parse, so it is skipped when the opened file is the very inode the walk
    listed inside the root (`ino`, on the root's device: no link or swapped folder can have led elsewhere).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if mode is None:
        mode = os.stat(path).st_mode
    else:
        flags |= os.O_NOFOLLOW
    if not stat.S_ISREG(mode):
        raise NotARegularFile(f"SKILL.md is {_file_kind(mode)}")
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise NotARegularFile("SKILL.md became a symlink while the library was read") from None
        raise
    try:
        st = os.fstat(fd)
        if root is not None and not (ino and st.st_ino == ino and st.st_dev == _root_device(root)):
            where = _opened_path(fd)
            if where is None:  # no kernel answer (not Linux): the path's own resolution, checked now
                where = os.path.realpath(path)
            if not where.startswith(_real_root(root)):
                raise LeavesRoot(errno.EXDEV, "SKILL.md leaves the library root")
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"SKILL.md is {_file_kind(st.st_mode)}")
        # Plain os.read calls sized by fstat: a buffered file object, or read(limit + 1), would allocate the
        # whole limit (1 MB) for every small file, most of a package's read time. One byte more than the
        # size notices a file that grew since the fstat; it is then read on up to the limit.
        parts: list[bytes] = []
        got, goal = 0, min(st.st_size, limit) + 1
        while got < goal:
            part = os.read(fd, goal - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
            if got == goal <= limit:
                goal = limit + 1
        data = b"".join(parts)
    finally:
        os.close(fd)
    return data[:limit], len(data) > limit


def decodable(text: str) -> bool:
    """False for a path holding bytes that were not UTF-8 (os functions return them as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_path(text: str) -> str:
    """A path for the report: undecodable bytes as backslash escapes (b'\\xff' → "\\xff")."""
    return os.fsencode(text).decode("utf-8", errors="backslashreplace")
