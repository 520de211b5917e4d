"""Making what was written survive a crash: a file's bytes, and a folder's entries (a rename into it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
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


def link_or_copy(source: Path, target: Path) -> None:
    """`source`'s file at `target` too: hard-linked, or copied where the filesystem cannot link it (another
    device, no hard links)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one whole, also after a
    crash: written under a temporary name, flushed, renamed over it, and the folder flushed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
