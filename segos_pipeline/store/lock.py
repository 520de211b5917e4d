"""Operating-system file locks that serialize the writers of one store and tell live staging from dead.

Two kinds of lock, both `fcntl.flock`, which the kernel releases when its holder dies (a `kill -9`
leaves no stale lock behind, so no lock is ever "broken" by age or PID guessing):

- the store's writer lock, `STORE/.writer.lock`: held by a writing command for the whole read-parent →
  compute → commit (`SnapshotStore.writer`), and by every commit for the allocation of its sequence
  number. While held, the file names its holder (PID, command, since) for the message a waiting or
  refused writer prints. Re-entrant within a process: a CLI command that holds it calls library
  functions whose commit takes it again.
- a stage lock, `STORE/.staging/<uuid>.lock`, held by the writer of the staging folder `<uuid>` for the
  folder's lifetime; a folder whose lock can be taken belongs to a dead writer and may be removed.

Readers never take a lock: versions are immutable and appear by one rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

LOCK_FILE = ".writer.lock"
STAGE_LOCK_SUFFIX = ".lock"
_POLL_S = 0.1  # how often a waiting writer retries: short next to any write, cheap in syscalls


class WriterBusy(Exception):
    """Another writer holds the store's writer lock and did not release it in the time given."""


Notify = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"segos: {message}", file=sys.stderr, flush=True)


@dataclass
class _Held:
    """The writer lock as this process holds it: one open file, a depth for re-entry."""

    pid: int
    handle: IO[str]
    depth: int
    command: str


# path of the lock file -> how this process holds it; guarded by _REGISTRY (threads of one process share the
# flock, so they serialize on a per-path thread lock first)
_REGISTRY = threading.Lock()
_HELD: dict[str, _Held] = {}
_THREAD_LOCKS: dict[str, threading.RLock] = {}


def _thread_lock(key: str) -> threading.RLock:
    with _REGISTRY:
        return _THREAD_LOCKS.setdefault(key, threading.RLock())


def holder(lock_path: Path) -> dict[str, Any] | None:
    """Who holds the lock, as the holder wrote it (None when unknown: just taken, or an old holder)."""
    try:
        info = json.loads(lock_path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def describe(info: dict[str, Any] | None, now: datetime | None = None) -> str:
    """'PID 123 (segos evolve --window w1) since 2026-12-01T07:00:03+00:00, 12 s ago'."""
    if not info:
        return "a writer whose details are not recorded yet"
    since = str(info.get("since", "?"))
    ago = ""
    with contextlib.suppress(ValueError, TypeError):
        seconds = ((now or datetime.now(UTC)) - datetime.fromisoformat(since)).total_seconds()
        ago = f", {max(seconds, 0):.0f} s ago"
    host = info.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return f"PID {info.get('pid', '?')}{where} ({info.get('command', '?')}) since {since}{ago}"


def _try_flock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _acquire(lock_path: Path, command: str, timeout: float, notify: Notify) -> _Held:
    handle = lock_path.open("a+", encoding="utf-8")  # "a+": creates it, never truncates a holder's note
    try:
        deadline = time.monotonic() + max(timeout, 0.0)
        told = False
        while not _try_flock(handle):
            info = holder(lock_path)
            if time.monotonic() >= deadline:
                raise WriterBusy(
                    f"another writer is running on {lock_path.parent}: {describe(info)}; gave up after "
                    f"{timeout:g} s. Nothing was written by this command: rerun it when that writer has "
                    "finished, or give it longer with --wait SECONDS"
                )
            if not told:
                notify(
                    f"waiting for another writer on {lock_path.parent}: {describe(info)} "
                    f"(up to {timeout:g} s; --wait SECONDS changes that)"
                )
                told = True
            time.sleep(_POLL_S)
        note = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": command,
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(note))
        handle.flush()
        if told:
            notify(f"got the writer lock on {lock_path.parent}; continuing")
        return _Held(os.getpid(), handle, 1, command)
    except BaseException:
        handle.close()
        raise


@contextlib.contextmanager
def writer_lock(root: Path, command: str, timeout: float, notify: Notify | None = None) -> Iterator[bool]:
    """Hold the store's writer lock; yields True when this call took it, False when it was already held
    by this process (re-entry). Waits up to `timeout` seconds (saying so through `notify`, stderr by
    default), then raises `WriterBusy` naming the holder."""
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / LOCK_FILE
    key = str(lock_path.resolve())
    tlock = _thread_lock(key)
    if not tlock.acquire(timeout=max(timeout, 0.0)):
        raise WriterBusy(f"another thread of this process is writing to {root}; gave up after {timeout:g} s")
    try:
        held = _HELD.get(key)
        if held is not None and held.pid == os.getpid():
            held.depth += 1
            try:
                yield False
            finally:
                held.depth -= 1
            return
        # a forked child inherits the parent's registry (and its flock): it holds nothing of its own
        _HELD.pop(key, None)
        held = _acquire(lock_path, command, timeout, notify or _stderr)
        _HELD[key] = held
        try:
            yield True
        finally:
            _HELD.pop(key, None)
            with contextlib.suppress(OSError):
                held.handle.seek(0)
                held.handle.truncate()  # the next reader of the note must not see a finished holder
            held.handle.close()  # closing releases the flock
    finally:
        tlock.release()


# ============================================================================================== stages


@contextlib.contextmanager
def stage_lock(staging: Path, name: str) -> Iterator[Path]:
    """Hold the lock of staging folder `name` while it exists; yields the folder (created here, after its
    lock, so a folder without a held lock always belongs to a dead writer)."""
    staging.mkdir(parents=True, exist_ok=True)
    lock_path = staging / f"{name}{STAGE_LOCK_SUFFIX}"
    handle = _locked_file(lock_path)
    with handle:
        try:
            yield staging / name
        finally:
            with contextlib.suppress(OSError):
                lock_path.unlink()


@contextlib.contextmanager
def scratch_folder(staging: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder in `staging` held by its stage lock (a killed holder's is swept by the next writer),
    removed with everything in it when the block ends."""
    with stage_lock(staging, f"{prefix}-{uuid.uuid4().hex}") as folder:
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _locked_file(lock_path: Path) -> IO[str]:
    """Open and flock `lock_path`, making sure the file locked is still the one at the path: a sweeper
    may have taken the lock first (before the folder existed), found nothing, and unlinked the file."""
    while True:
        handle = lock_path.open("a+", encoding="utf-8")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # a fresh uuid: only a sweeper can hold it, briefly
        try:
            if os.fstat(handle.fileno()).st_ino == lock_path.stat().st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()


def sweep_stale_stages(staging: Path) -> list[str]:
    """Remove staging folders (and their lock files) whose writer is dead: those whose stage lock this
    process can take. A live writer's folder is never touched, whatever its age. Returns what was removed."""
    if not staging.is_dir():
        return []
    removed = []
    names = {p.name.removesuffix(STAGE_LOCK_SUFFIX) if p.is_file() else p.name for p in staging.iterdir()}
    for name in sorted(names):
        lock_path = staging / f"{name}{STAGE_LOCK_SUFFIX}"
        folder = staging / name
        try:
            handle = lock_path.open("a+", encoding="utf-8")
        except OSError:
            continue  # cannot even open it: leave it for a writer that can
        with handle:
            if not _try_flock(handle):
                continue  # a live writer's stage
            if folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                lock_path.unlink()
            removed.append(name)
    return removed
