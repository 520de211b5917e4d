"""Operating-system failures (disk full, read-only store, permissions, ...) as one actionable sentence.

Shared by the store's commit path (which knows the file it was writing) and the CLI's error path (which
turns any failure into one stderr line). Polars reports an I/O error inside its own exception with the OS
error number in the text ("... (os error 28)"); that number is recovered so it gets the same advice.
"""

from __future__ import annotations

import errno as E
import os
import re

_POLARS_OS_ERROR = re.compile(r"\(os error (\d+)\)")

# what a user can do about each failure; the message already names the file
ADVICE: dict[int, str] = {
    E.ENOSPC: "free space on that filesystem, or point --store / $SEGOS_STORE to another one, then rerun",
    E.EDQUOT: "the disk quota is used up: free space or raise the quota, then rerun",
    E.EROFS: "the filesystem is mounted read-only: remount it read-write, or use a writable --store",
    E.EACCES: "check the owner and mode of that path (a store must be writable by whoever writes to it), "
    "or use another --store",
    E.EPERM: "the operation is not permitted there: check the owner and mode of that path",
    E.ENOENT: "check the path (a relative path is resolved against the current directory)",
    E.ENOTDIR: "a part of that path is a file, not a folder: check the path",
    E.EISDIR: "that path is a folder where a file was expected: check the path",
    E.EMFILE: "too many open files: raise the limit (ulimit -n) and rerun",
    E.EIO: "the device reported an I/O error: check the disk before writing to it again",
}


def os_errno(exc: BaseException) -> int | None:
    """The OS error number of an OSError, or of a polars error that wraps one (None otherwise)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return int(exc.errno)
    match = _POLARS_OS_ERROR.search(str(exc))
    return int(match.group(1)) if match else None


def explain(exc: BaseException, path: str | os.PathLike[str] | None = None) -> str:
    """'No space left on device (ENOSPC): data/store/.staging/ab12/edges.parquet; free space ...'."""
    number = os_errno(exc)
    where = path if path is not None else getattr(exc, "filename", None)
    if number is None:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{text}: {where}" if where else text
    name = E.errorcode.get(number, str(number))
    what = f"{os.strerror(number)} ({name})"
    if where:
        what += f": {where}"
    advice = ADVICE.get(number)
    return f"{what}; {advice}" if advice else what
