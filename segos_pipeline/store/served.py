"""The served pointer: which version of a store followers serve (`segos mcp`, `SegosService`, "served").

    STORE/served.json   {"version": id, "previous": [ids, the most recent last], "updated_at", "reason"}

"latest" is the highest sequence number; "served" is what this file names, and moves only

- forward along the lineage: a new version whose parent is the served version (an evolution round whose
  held-out check passed, an incremental update; `advance`),
- or by an explicit `promote` (`segos promote V`, `segos build --promote`, a cold start into an empty
  store) or `rollback` (back to the version served before, from the `previous` stack).

So a second `segos build`, a re-run of an old window (its parent is older than the served version) or a
round whose held-out check failed never changes what followers serve.

A store without the file (written before this pointer existed) serves its latest version, and the first
commit into it records that version here before the new one becomes the latest (`pin`, called by the
store's commit under the writer lock): from then on only a promotion moves it. The file is replaced whole
(`SnapshotStore.write_root_file`: temporary file, fsync, rename, folder fsync; at a URI one whole upload),
so a reader sees the old pointer or the new one. Writers take the store's writer lock around the read and
the write, so two promotions do not lose one another's history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from .errors import DamagedSnapshot, SnapshotError, UnknownVersion

SERVED = "served.json"
HISTORY = 50  # versions kept in `previous` (rollback goes back at most this many promotions)


class SnapshotStore(Protocol):
    """What the pointer needs of a store (`snapshot.SnapshotStore`, `remote.RemoteStore`), which imports
    this module to resolve "served": a protocol, not the class, keeps the imports one way."""

    root: Path
    address: str

    def latest(self) -> str: ...
    def resolve(self, version: str | None) -> str: ...
    def list_versions(self) -> list[dict[str, Any]]: ...
    def verify(self, version: str | None = None) -> list[str]: ...
    def writer(self) -> AbstractContextManager[Any]: ...
    def read_root_file(self, name: str) -> bytes | None: ...
    def write_root_file(self, name: str, data: bytes) -> None: ...


class ServedError(SnapshotError):
    """The served pointer cannot be read or moved as asked (the message says what to do)."""


@dataclass(frozen=True)
class ServedPointer:
    """What the store serves. `recorded` is False for a store without `served.json` (it serves its
    latest version, and `previous` is empty)."""

    version: str
    previous: tuple[str, ...] = ()
    updated_at: str | None = None
    reason: str = ""
    recorded: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "previous": list(self.previous)}


def pointer(store: SnapshotStore) -> ServedPointer:
    """The store's served pointer; without `served.json`, its latest version (raises `UnknownVersion` on
    a store without versions)."""
    data = store.read_root_file(SERVED)
    if data is None:
        return ServedPointer(version=store.latest(), recorded=False)
    return _parse(store, data)


def served(store: SnapshotStore) -> str:
    """The id of the version the store serves; a pointer naming a version the store lacks is an error
    (a follower must not silently serve something else)."""
    found = pointer(store)
    if found.recorded and found.version not in {m["version"] for m in store.list_versions()}:
        raise UnknownVersion(
            f"{store.address}/{SERVED} names version {found.version}, which the store does not hold; "
            f"serve another one with `segos promote VERSION --store {store.address}`"
        )
    return found.version


def served_or_none(store: SnapshotStore) -> str | None:
    """`served`, or None when the pointer file is unreadable: for a command that has committed already
    and only reports what is served (`segos promote` rewrites such a file)."""
    try:
        return pointer(store).version
    except ServedError:
        return None


def promote(store: SnapshotStore, version: str, reason: str, verify: bool = True) -> ServedPointer:
    """Serve `version` (an id, prefix, `vN`, `latest`); the one served before goes on the `previous`
    stack. Refuses a version whose files fail their hash check (with `verify`), changing nothing."""
    with store.writer():
        vid = store.resolve(version)
        if verify:
            bad = store.verify(vid)
            if bad:
                raise DamagedSnapshot(
                    f"version {vid} is damaged ({', '.join(bad[:5])} differ from its manifest); it is not "
                    f"served (`segos verify {vid}` tells more; still served: {_current(store)})"
                )
        try:
            now: ServedPointer | None = pointer(store)
        except ServedError:  # an unreadable pointer file: promoting is how it is repaired
            now = None
        if now is not None and now.version == vid:
            return now if now.recorded else _write(store, replace(now, updated_at=_now(), reason=reason))
        previous = (*now.previous, now.version) if now is not None else ()
        return _write(store, ServedPointer(vid, previous[-HISTORY:], _now(), reason))


def rollback(store: SnapshotStore, reason: str = "rollback") -> ServedPointer:
    """Serve the version served before the current one again (the top of the `previous` stack)."""
    with store.writer():
        now = _read(store)
        if now is None or not now.previous:
            raise ServedError(
                f"nothing to roll back to in {store.address}: no version was served before "
                f"{now.version if now else _current(store)} (`segos promote VERSION` serves any version)"
            )
        return _write(store, ServedPointer(now.previous[-1], now.previous[:-1], _now(), reason))


def advance(store: SnapshotStore, manifest: Mapping[str, Any], reason: str) -> bool:
    """Serve the new version `manifest` describes if its parent is the served version (forward along the
    lineage; a child of an older version leaves the pointer where it is). True when it moved."""
    parent = manifest.get("parent")
    with store.writer():
        if parent is None or served_or_none(store) != parent:
            return False  # an unreadable pointer moves only by `segos promote`, which repairs it
        promote(store, manifest["version"], reason, verify=False)  # just committed and hash-checked
    return True


def pin(store: SnapshotStore, version: str) -> None:
    """Record `version` as served when the store has no pointer yet (its latest, before a commit makes
    another one the latest); a recorded pointer is left alone. Called under the writer lock."""
    if store.read_root_file(SERVED) is None:
        _write(store, ServedPointer(version, (), _now(), "served before the first commit that kept it"))


def _read(store: SnapshotStore) -> ServedPointer | None:
    data = store.read_root_file(SERVED)
    return None if data is None else _parse(store, data)


def _parse(store: SnapshotStore, data: bytes) -> ServedPointer:
    try:
        raw = json.loads(data)
        version = raw["version"]
        previous = raw.get("previous", [])
        if not isinstance(version, str) or not all(isinstance(p, str) for p in previous):
            raise ValueError("version and previous must be version ids")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ServedError(
            f"{store.address}/{SERVED} is unreadable ({exc}); serve a version again with "
            f"`segos promote VERSION --store {store.address}`, which rewrites it"
        ) from None
    return ServedPointer(version, tuple(previous), raw.get("updated_at"), str(raw.get("reason", "")))


def _write(store: SnapshotStore, new: ServedPointer) -> ServedPointer:
    new = replace(new, recorded=True)
    body = {k: v for k, v in new.as_dict().items() if k != "recorded"}
    store.write_root_file(SERVED, (json.dumps(body, indent=2) + "\n").encode())
    return new


def _current(store: SnapshotStore) -> str:
    try:
        return pointer(store).version
    except SnapshotError:
        return "none"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
