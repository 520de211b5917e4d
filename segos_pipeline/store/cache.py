"""Derived-data caches beside the versions (`STORE/cache/<kind>/<key>/`): written whole, read back checked.

A cache entry is derived from an immutable version (a lexical index, skill vectors), so it is safe to
delete, and a damaged one is rebuilt by its reader. Writers stage a folder, record every file's size and
sha256 in `hashes.json` (written last), flush the files and the folder to disk and rename it into place, so
a reader sees a complete entry or none, also after a crash; a store that cannot be written to, or a racing
writer, simply leaves the entry to the next process.

Readers go through `read_entry`: an entry whose files do not match `hashes.json` (emptied, truncated,
rewritten with values that still parse, or written before entries carried hashes), or whose loader fails in
any way, is a miss: it is dropped and its reader rebuilds it, never uses it, never crashes on it.

Hashing at load is done on every load: it reads the files the loader reads anyway (then from the page
cache), and an entry is loaded once per process and version. sha256 is faster than blake2b on the dev machine
(so sha256 it is), and on entries the size of a 100k-skill store's the check costs less than loading them
(figures: docs/benchmarks.md); rebuilding them means re-indexing and re-embedding every skill.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import polars as pl

from .durable import fsync_dir, fsync_file
from .layout import sha256_file

T = TypeVar("T")
HASHES = "hashes.json"  # {file name: {"bytes", "sha256"}} of every other file of the entry; written last


def cache_root(version_path: Path | None, kind: str) -> Path | None:
    """`STORE/cache/<kind>` of a stored version's folder (None for an in-memory draft)."""
    return version_path.parent.parent / "cache" / kind if version_path is not None else None


def write_entry(root: Path, key: str, fill: Callable[[Path], None]) -> bool:
    """Stage `fill(folder)`, seal it (`hashes.json`, everything flushed) and rename it to `root/key`; False
    when the store could not take it (the caller keeps what it holds in memory)."""
    stage = root / f".{key}.{uuid.uuid4().hex}"
    folder = root / key
    try:
        stage.mkdir(parents=True)
        fill(stage)
        _seal(stage)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.rename(stage, folder)
        fsync_dir(root)
        return True
    except OSError:
        return False
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def read_entry(root: Path, key: str, load: Callable[[Path], T | None]) -> T | None:
    """`load(root/key)` when the entry exists and every file matches its recorded hash; None otherwise.

    `load` may return None for an entry that is intact but not what the caller wants (another backend's
    vectors): that entry is kept. An entry that fails the check, or whose `load` raises anything (a polars
    reader panic included), is dropped so that the caller's rebuild replaces it."""
    folder = root / key
    try:
        inode = folder.stat().st_ino
    except OSError:
        return None
    try:
        if entry_intact(folder):
            return load(folder)
    except (Exception, pl.exceptions.PanicException):  # any failure to read derived data is a miss
        pass
    _drop(folder, inode)
    return None


def entry_intact(folder: Path) -> bool:
    """Whether every file `hashes.json` lists has its recorded size and sha256 (False without one)."""
    try:
        listed = json.loads((folder / HASHES).read_text())
        if not isinstance(listed, dict) or not listed:
            return False
        for name, meta in listed.items():
            path = folder / name
            if path.parent != folder or path.stat().st_size != meta["bytes"]:
                return False
            if sha256_file(path) != meta["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _seal(stage: Path) -> None:
    """Record the staged files' hashes in `hashes.json` and flush all of it to disk before the rename: an
    entry renamed into place is whole after a crash too."""
    hashes = {}
    for f in sorted(stage.iterdir()):
        if f.is_file():
            fsync_file(f)
            hashes[f.name] = {"bytes": f.stat().st_size, "sha256": sha256_file(f)}
    (stage / HASHES).write_text(json.dumps(hashes, indent=1, sort_keys=True))
    fsync_file(stage / HASHES)
    fsync_dir(stage)


def _drop(folder: Path, inode: int) -> None:
    """Move a failed entry aside and delete it, unless another process replaced it meanwhile (a fresh entry
    under the same key is not the one that failed). A store that cannot be written to keeps it: it is
    checked, and skipped, on every load."""
    aside = folder.with_name(f".dropped-{folder.name}.{uuid.uuid4().hex}")
    with contextlib.suppress(OSError):
        if folder.stat().st_ino != inode:
            return
        os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
