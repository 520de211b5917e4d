"""Making what was written survive a crash: a file's bytes, and a folder's entries (a rename into it)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_file(path: Path) -> None:
    """Flush a written file's bytes to disk (before the rename that publishes it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries to disk (after a rename into it), where the filesystem allows it."""
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened for fsync
        fsync_file(path)
