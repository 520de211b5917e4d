"""Repairing damaged version files from the library (`segos repair`).

A version's files are never changed after its commit, and versions whose library did not change hard-link
their parent's parts (`store/parts.py`): one flipped byte in a shared part damages every version that
lists it. A cold-start build is deterministic (the same library and build settings give the same bytes), so
a damaged file whose recorded sha256 is that of a cold-start version's file (its node and token parts,
signature, vocabulary, edges, operator, report) can be made again: the cold start's library is rebuilt into
a staging folder, and the rebuilt file whose sha256 equals the manifest's replaces the damaged one. No other
file is accepted: a library that changed since makes other bytes, and the damaged file is then left as it
is, named with the mismatch.

A replacement is atomic and durable (copied into the staging folder, flushed, renamed over the damaged name,
the folder flushed): a reader sees the damaged file or the intact one, never a half file, so a server keeps
serving what it served. Every other name of the damaged file (the same inode linked into other versions) is
replaced with a link to the repaired file, so the versions share it again. A file that verifies is never
touched. Files a cold-start build does not make (an evolved version's own tables, an update's new parts)
are named with what the user can do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import BuildConfig
from ..progress import Progress
from ..store.durable import fsync_dir, fsync_file, link_or_copy
from ..store.layout import MANIFEST, sha256_file
from ..store.lock import scratch_folder
from ..store.snapshot import SnapshotError, SnapshotStore
from ..store.version_files import VersionFiles
from .build import build_cold_start

COLD_START = "cold_start"


@dataclass(frozen=True)
class Damaged:
    """A file of a version that does not match its manifest."""

    version: str
    file: str
    sha256: str  # what the manifest records


@dataclass(frozen=True)
class Outcome:
    """What repair did about one damaged file (or manifest): repaired, or left with why and what to do."""

    version: str
    file: str
    repaired: bool
    detail: str


@dataclass
class RepairReport:
    checked: list[str]  # versions checked, oldest first
    outcomes: list[Outcome] = field(default_factory=list)
    # one row per cold start rebuilt: its id, the library read, whether the library is still the one it read
    rebuilt: list[dict[str, Any]] = field(default_factory=list)

    @property
    def left(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.repaired]

    @property
    def repaired(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.repaired]

    def to_dict(self) -> dict[str, Any]:
        touched = {o.version for o in self.outcomes}
        return {
            "versions": [
                {
                    "version": v,
                    "ok": not any(o.version == v for o in self.left),
                    "repaired": [o.file for o in self.repaired if o.version == v],
                    "left": [{"file": o.file, "problem": o.detail} for o in self.left if o.version == v],
                }
                for v in [*self.checked, *sorted(touched - set(self.checked))]
            ],
            "repaired": len(self.repaired),
            "left": len(self.left),
            "rebuilt": self.rebuilt,
        }


def damaged_files(store: SnapshotStore, versions: Sequence[str]) -> list[Damaged]:
    """The files of `versions` that fail verification, and every other version's name for the same file (a
    hard link: the same damaged bytes), each once."""
    found: dict[tuple[str, str], Damaged] = {}
    inodes: set[tuple[int, int]] = set()
    for vid in versions:
        files = store.files(vid)
        for name in files.verify():
            found[vid, name] = Damaged(vid, name, files.manifest["files"][name]["sha256"])
            with contextlib.suppress(OSError):  # a file that is gone shares nothing
                st = (files.path / name).stat()
                inodes.add((st.st_dev, st.st_ino))
    if inodes:
        for m in store.list_versions():
            path = store.versions_dir / m["version"]
            for name, meta in m["files"].items():
                if (m["version"], name) in found:
                    continue
                try:
                    st = (path / name).stat()
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in inodes and VersionFiles(path, m).verify([name]):
                    found[m["version"], name] = Damaged(m["version"], name, meta["sha256"])
    return list(found.values())


def cold_start_sources(store: SnapshotStore) -> dict[str, dict[str, Any]]:
    """sha256 → the manifest of a cold-start version that lists a file with it (the oldest one)."""
    out: dict[str, dict[str, Any]] = {}
    for m in store.list_versions():
        if m.get("kind") == COLD_START:
            for meta in m["files"].values():
                out.setdefault(meta["sha256"], m)
    return out


def rebuild(
    source: dict[str, Any], library: Path, into: Path, progress: Progress | None = None
) -> tuple[dict[str, Path], dict[str, Any]]:
    """Build the cold start of `library` with `source`'s recorded settings into a store at `into`: every
    rebuilt file by its sha256, and the rebuilt manifest."""
    say = progress or (lambda _msg: None)
    # the build's messages name the scratch store's version: say they are the rebuild's
    manifest = build_cold_start(
        library,
        SnapshotStore(into),
        BuildConfig.of_manifest(source),
        lambda e: say(f"rebuild: {e}" if isinstance(e, str) else e),
        allow_empty=True,
    )
    folder = into / "versions" / manifest["version"]
    return {meta["sha256"]: folder / name for name, meta in manifest["files"].items()}, manifest


def replace_durably(target: Path, source: Path, sha256: str, scratch: Path, link: bool = False) -> None:
    """Put `source`'s bytes at `target` in one rename: copied (or, `link`, hard-linked) into `scratch` (on
    the target's filesystem), checked against `sha256`, flushed and made read-only first."""
    tmp = scratch / f"{target.name}.{uuid.uuid4().hex}"
    (link_or_copy if link else shutil.copyfile)(source, tmp)
    try:
        if sha256_file(tmp) != sha256:
            raise SnapshotError(f"the copy of {source} for {target} does not match sha256 {sha256[:12]}")
        fsync_file(tmp)
        tmp.chmod(0o444)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(target.parent)


def _cannot_rebuild(store: SnapshotStore, d: Damaged) -> str:
    m = store.files(d.version).manifest
    kind, parent = m.get("kind", "?"), m.get("parent")
    made = f"{kind} version" + (f" (child of {parent})" if parent else "")
    return (
        f"no cold-start build makes this file (it belongs to the {made}); restore {d.version} from a backup, "
        "or delete its folder and run again the command that made it"
    )


def repair(
    store: SnapshotStore,
    versions: Sequence[str],
    library: Path | None = None,
    progress: Progress | None = None,
) -> RepairReport:
    """Repair the damaged files of `versions` (ids) that a cold-start build of their library makes again;
    see the module docstring. `library` replaces the library root the cold start records (a moved
    library). Holds the store's writer lock while it replaces files."""
    if store.local_root is None:
        raise SnapshotError(
            f"segos repair works on a store folder; {store.address} is a URI: repair the store it names "
            "where it is a folder, or restore its damaged versions from a backup"
        )
    say = progress or (lambda _msg: None)
    report = RepairReport(checked=list(versions))
    for vid in versions:
        for why in store.files(vid).manifest_problems():
            report.outcomes.append(
                Outcome(vid, MANIFEST, False, f"{why}; restore {vid} from a backup, or delete its folder")
            )
    damaged = damaged_files(store, versions)
    if not damaged:
        return report
    sources = cold_start_sources(store)
    by_source: dict[str, list[Damaged]] = {}
    for d in damaged:
        if d.sha256 in sources:
            by_source.setdefault(sources[d.sha256]["version"], []).append(d)
        else:
            report.outcomes.append(Outcome(d.version, d.file, False, _cannot_rebuild(store, d)))
    if not by_source:
        return report
    # on the store's filesystem: a rename from it into a version folder is atomic
    with scratch_folder(store.staging_dir, "repair") as work:
        for n, (cold, items) in enumerate(sorted(by_source.items())):
            source = store.files(cold).manifest
            root = Path(library) if library is not None else Path(source.get("library", {}).get("root", ""))
            if not str(root) or not root.is_dir():
                why = (
                    f"the library of {cold} is not found at {root or '(no root recorded)'}; "
                    "pass --library PATH (the folder it was built from)"
                )
                report.outcomes += [Outcome(d.version, d.file, False, why) for d in items]
                continue
            say(f"rebuilding the cold start {cold} from {root}")
            t0 = time.perf_counter()
            rebuilt, manifest = rebuild(source, root, work / f"build-{n}", progress)
            same_library = manifest["library"]["fingerprint"] == source.get("library", {}).get("fingerprint")
            report.rebuilt.append(
                {
                    "from": cold,
                    "library": str(root),
                    "library_unchanged": same_library,
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
            report.outcomes += _replace(store, items, rebuilt, root, cold, same_library, work)
    return report


def _replace(
    store: SnapshotStore,
    items: Sequence[Damaged],
    rebuilt: dict[str, Path],
    root: Path,
    cold: str,
    same_library: bool,
    work: Path,
) -> list[Outcome]:
    """Replace each damaged file whose recorded sha256 a rebuilt file has, under the writer lock; the others
    are left with the mismatch named."""
    out: list[Outcome] = []
    done: dict[str, Path] = {}  # sha256 → a repaired file with it (the next name for it links to it)
    with store.writer("segos repair"):
        for d in items:
            target = store.versions_dir / d.version / d.file
            source = rebuilt.get(d.sha256)
            if source is None:
                changed = (
                    f"the library at {root} changed since {cold} was built (its fingerprint differs)"
                    if not same_library
                    else f"the rebuild of {root} did not reproduce it"
                )
                why = (
                    f"hash mismatch: no rebuilt file has the manifest's sha256 {d.sha256[:12]}: {changed}; "
                    "the damaged file is left as it is: restore the library as it was (or pass --library "
                    f"PATH to a copy of it), or restore {d.version} from a backup"
                )
                out.append(Outcome(d.version, d.file, False, why))
                continue
            if not store.files(d.version).verify([d.file]):  # repaired meanwhile (another name of it)
                continue
            linked = d.sha256 in done
            replace_durably(target, done.get(d.sha256, source), d.sha256, work, link=linked)
            done.setdefault(d.sha256, target)
            done_how = f"rebuilt from the library at {root} as in {cold}; sha256 matches"
            out.append(Outcome(d.version, d.file, True, done_how))
    return out
