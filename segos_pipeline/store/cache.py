"""Derived-data caches beside the versions (`STORE/cache/<kind>/<key>/`): written whole or not at all.

A cache entry is derived from an immutable version (a lexical index, skill vectors), so it is safe to
delete, and a damaged one is rebuilt by its reader. Writers stage a folder and rename it into place, so a
reader sees a complete entry (its `complete` marker written last) or none; a store that cannot be written
to, or a racing writer, simply leaves the entry to the next process.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path


def cache_root(version_path: Path | None, kind: str) -> Path | None:
    """`STORE/cache/<kind>` of a stored version's folder (None for an in-memory draft)."""
    return version_path.parent.parent / "cache" / kind if version_path is not None else None


def write_entry(root: Path, key: str, fill: Callable[[Path], None]) -> bool:
    """Stage `fill(folder)` (which must write `complete` last) and rename it to `root/key`; False when the
    store could not take it (the caller keeps what it holds in memory)."""
    stage = root / f".{key}.{uuid.uuid4().hex}"
    folder = root / key
    try:
        stage.mkdir(parents=True)
        fill(stage)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.rename(stage, folder)
        return True
    except OSError:
        return False
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
