"""Landing files: trace lines appended whole or not at all, and the torn-tail rule readers share.

A landing file (`<landing>/<YYYY-MM-DD>.jsonl`) is appended to by `record_trace` in any number of threads
and processes while `segos ingest` may read it. An append is acknowledged only once its line is on disk
whole: `append_line` takes an exclusive `flock` on the file (open file descriptions exclude each other,
so threads and processes alike), repairs a torn tail, writes the line (looping on short writes), fsyncs,
and only then returns. A write or fsync that fails (ENOSPC, EIO, a write of 0 bytes) truncates the file
back to its length before the append, so nothing stays behind, and raises `LandingWriteError`.

A **torn tail** is what a crash during an append leaves: a last line with no newline that is not complete
JSON. The appender moves it aside to `<file>.torn` (one line per torn tail, its bytes as they were) before
writing, so a later trace is never glued onto it; readers (`adapters.common.read_lines`) skip and report
it, never quarantine it, since it may also be an append still in progress. A last line without a newline
that *is* complete JSON (a file written by another tool, or an append cut after its last byte) is a line
like any other: the appender completes it with the newline, readers read it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..config import MAX_LINE_BYTES

TORN_SUFFIX = ".torn"
_CHUNK = 1 << 16  # bytes read per step while looking back for the last newline


class LandingWriteError(OSError):
    """An append that did not happen: the file is as it was before it, and nothing was acknowledged."""


@dataclass(frozen=True)
class Appended:
    """One acknowledged append: where the line starts, its length with the newline, and the bytes of a torn
    tail moved aside to `torn_file` first (0 when there was none)."""

    offset: int
    bytes: int
    torn_bytes: int = 0
    torn_file: str | None = None


def is_complete_json(data: bytes) -> bool:
    """Whether `data` (a last line without its newline) parses as JSON: the test between a line someone
    wrote without a final newline and a line a crash cut short (a cut JSON object never parses)."""
    try:
        json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def torn_path(path: Path) -> Path:
    return path.with_name(path.name + TORN_SUFFIX)


def append_line(path: Path, line: bytes) -> Appended:
    """Append `line` (no newline in it) and a newline to `path`, whole or not at all, fsynced before
    returning. Raises LandingWriteError when it could not (the file then holds what it held before)."""
    if b"\n" in line:
        raise ValueError("a landing line holds no newline")
    data = line + b"\n"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LandingWriteError(errno.ELOOP, f"{path} is a symbolic link: not written to") from None
        raise LandingWriteError(exc.errno, f"cannot open {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LandingWriteError(errno.EINVAL, f"{path} is not a regular file: not written to")
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        torn = _repair_tail(fd, path)
        start = os.fstat(fd).st_size
        try:
            _append(fd, data, start)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise LandingWriteError(
                exc.errno, f"trace not recorded: writing {path} failed ({reason}); nothing was kept"
            ) from None
        return Appended(start, len(data), torn, str(torn_path(path)) if torn else None)
    finally:
        os.close(fd)


def _append(fd: int, data: bytes, start: int) -> None:
    """Write `data` (looping on short writes) and fsync; on a failure cut the file back to `start` (its
    length before) and raise it."""
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            if n <= 0:  # never seen from a regular file, but a loop on it would never end
                raise OSError(errno.EIO, "write wrote nothing")
            view = view[n:]
        os.fsync(fd)
    except OSError:
        _undo(fd, start)
        raise


def _undo(fd: int, length: int) -> None:
    """Cut what a failed append wrote; a failure here leaves the error being raised as the one to report."""
    try:
        os.ftruncate(fd, length)
        os.fsync(fd)
    except OSError:
        pass


def _tail_start(fd: int, size: int) -> int:
    """Offset just after the file's last newline (0 when it has none)."""
    end = size
    while end > 0:
        begin = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - begin, begin)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return begin + at + 1
        end = begin
    return 0


def is_torn(tail: bytes) -> bool:
    """Whether a last line without its newline is torn: not blank, within a trace line's bound (a longer
    one is no append of ours; ingest rejects it as too long) and not complete JSON."""
    return bool(tail.strip()) and len(tail) <= MAX_LINE_BYTES and not is_complete_json(tail)


def _repair_tail(fd: int, path: Path) -> int:
    """Under the lock: move a torn last line to the sidecar and cut it off, or end any other last line with
    its newline. Returns the bytes moved aside."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    start = _tail_start(fd, size)
    tail = os.pread(fd, min(size - start, MAX_LINE_BYTES + 1), start)
    step = "repairing the last line of"
    try:
        if not is_torn(tail):
            _append(fd, b"\n", size)
            return 0
        step = "moving the torn last line aside from"
        _keep_aside(torn_path(path), tail)  # kept before it is cut: a failure loses nothing
        os.ftruncate(fd, start)
        os.fsync(fd)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise LandingWriteError(exc.errno, f"trace not recorded: {step} {path} failed ({reason})") from None
    return len(tail)


def _keep_aside(sidecar: Path, tail: bytes) -> None:
    """Append a torn tail to the sidecar, fsynced, before it is cut from the landing file."""
    fd = os.open(sidecar, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        _append(fd, tail + b"\n", os.fstat(fd).st_size)
    finally:
        os.close(fd)
