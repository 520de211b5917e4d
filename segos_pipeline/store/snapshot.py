"""Immutable, atomically written graph versions (SPEC §9).

Writers. A writing command holds the store's writer lock from reading its parent to its commit
(`SnapshotStore.writer`), and every commit takes it (re-entrantly) to allocate its sequence number, so
sequence numbers are unique whoever writes. A commit whose parent was read as the latest version refuses
when another version was committed since (the optimistic check that covers a caller that did not hold the
lock throughout): its edit would otherwise be missing from the newest version. Staging folders of dead
writers are removed by the next write. Readers take no lock.

The layout of a version's folder, its parts and its manifest: `layout.py`; reading a version's files:
`version_files.py`; cutting tables into parts: `parts.py`; a version being written: `staging.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import scipy.sparse as sp

from .._version import __version__
from ..config import WRITER_WAIT_S
from ..text.lexicon import Signature
from ..text.token_rows import table_signature
from .durable import fsync_dir, fsync_file, write_atomically
from .errors import DamagedSnapshot, SnapshotError, StaleParent, StoreBusy, StoreWriteError, UnknownVersion
from .layout import (
    EDGES,
    EXPERIENCE,
    EXPERIENCE_SCHEMA,
    FORMAT,
    MANIFEST,
    NODES,
    TOKENS,
    TRANSITION,
    VERSION_RE,
    read_manifest,
    version_seq,
)
from .lock import Notify, WriterBusy, writer_lock
from .oserrors import explain
from .parts import PartPlan, plan_parts
from .served import pin, served
from .staging import Stage
from .uri import is_uri
from .version_files import SamePart, VersionFiles


@dataclass
class Snapshot:
    """A loaded version: tables, operator and manifest. Read-only by convention and on disk."""

    version: str
    path: Path | None  # None for an in-memory draft (e.g. the graph inside an evolution round)
    manifest: dict[str, Any]
    nodes: pl.DataFrame
    edges: pl.DataFrame
    transition: sp.csr_matrix
    # The string token table; None until first asked for on a stored version. Serving never needs it (the
    # lexical index is cached or built a part at a time) and at 1M skills it holds 100M rows.
    token_table: pl.DataFrame | None = field(default=None, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    # The URI of the store it was loaded from (`RemoteStore.load`); None for a local store or a draft.
    # Work that runs on other machines (Spark executors) opens the store by it rather than by `path`.
    store_uri: str | None = None
    # The experience table (EXPERIENCE_SCHEMA); None until first asked for on a stored version.
    experience_table: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def experience(self) -> pl.DataFrame:
        """What the version's skills learned from traces (empty for a cold start)."""
        if self.experience_table is None:
            files = self.files
            if files is not None and EXPERIENCE in self.manifest.get("files", {}):
                self.experience_table = files.read_extra(EXPERIENCE).cast(EXPERIENCE_SCHEMA)
            else:
                self.experience_table = pl.DataFrame(schema=EXPERIENCE_SCHEMA)
        return self.experience_table

    @property
    def tokens(self) -> pl.DataFrame:
        if self.token_table is None:
            files = self.files
            if files is None:
                raise SnapshotError(f"draft version {self.version} was made without a token table")
            self.token_table = files.read_tokens()
        return self.token_table

    @property
    def tokens_loaded(self) -> bool:
        return self.token_table is not None

    @property
    def parent(self) -> str | None:
        return self.manifest.get("parent")

    @property
    def round(self) -> int:
        return int(self.manifest.get("round", 0))

    @property
    def files(self) -> VersionFiles | None:
        """The stored files behind this version (None for a draft)."""
        return VersionFiles(self.path, self.manifest) if self.path is not None else None

    def signature(self) -> Signature:
        """The signature matrix of the Jaccard graph: stored with the version, or derived from the tokens."""
        if "signature" not in self._cache:
            files = self.files
            if files is not None and files.has_signature():
                self._cache["signature"] = files.read_signature()
            else:
                self._cache["signature"] = table_signature(self.tokens, self.nodes.height)
        return self._cache["signature"]

    def content_key(self, table: str) -> str | None:
        """A hash that changes exactly when the stored `table` (`nodes` or `tokens`) changes."""
        stored = self.files
        if stored is None:
            return None
        files = self.manifest.get("files", {})
        names = [p[table] for p in stored.parts]
        if not names or any(n not in files for n in names):
            return None
        if len(names) == 1 and names[0] in (NODES, TOKENS):
            return files[names[0]]["sha256"]  # format 1: keeps keys (e.g. of the lexical cache) stable
        return hashlib.sha256("".join(files[n]["sha256"] for n in names).encode()).hexdigest()

    def read_extra(self, name: str) -> pl.DataFrame:
        """Another Parquet table of this version (e.g. the build report), as listed in its manifest."""
        files = self.files
        if files is None:
            raise SnapshotError(f"version {self.version} has no file {name!r}")
        return files.read_extra(name)


# ============================================================================================ writing


class SnapshotStore:
    def __init__(self, root: str | Path, lock_timeout: float = WRITER_WAIT_S):
        if is_uri(root):  # Path() would fold `s3://b/x` into a local folder named `s3:`
            raise SnapshotError(
                f"{root} is a URI: open it with segos_pipeline.store.remote.open_store (a remote store "
                "with a local cache), not SnapshotStore"
            )
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self.staging_dir = self.root / ".staging"
        self.lock_timeout = lock_timeout  # seconds a commit waits for another writer (see `writer`)
        # per thread: the version `resolve` last returned for "latest", the base of the optimistic check
        self._reads = threading.local()

    def __getstate__(self) -> dict[str, Any]:  # a store is passed between processes (Dagster): reads stay
        return {k: v for k, v in self.__dict__.items() if k != "_reads"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reads = threading.local()

    # ------------------------------------------- where it is: a folder here, or a URI (`remote.RemoteStore`)
    # Callers ask these instead of testing for a `RemoteStore`: a store at a URI overrides each one.

    @property
    def address(self) -> str:
        """What `--store` reaches this store by: its folder (a store at a URI: the URI)."""
        return str(self.root)

    @property
    def local_root(self) -> Path | None:
        """The store's own folder on this machine; None for a store at a URI (`root` is then its cache)."""
        return self.root

    @property
    def local_cache(self) -> Path | None:
        """The cache folder a store at a URI is read and written through; None for a folder."""
        return None

    @property
    def commits_show_locally(self) -> bool:
        """Whether every writer's commit changes `versions_dir` and the served pointer on this machine (a
        folder: yes, so their mtimes tell a reader to look again; a store at a URI is polled instead)."""
        return True

    listing_max_age: float | None = None  # seconds a listing may be reused; None: a folder is listed anew

    def polling(self, every: float) -> SnapshotStore:
        """A reader that lists the store at most every `every` seconds; a folder is cheap to list, so
        itself."""
        return self

    def url(self, rel: str) -> str | None:
        """The URI of `rel` (a path relative to the store) at a store on a URI; None for a folder."""
        return None

    def names_in(self, rel: str) -> list[str]:
        """Names directly under folder `rel` of the store, sorted (none when it does not exist)."""
        folder = self.root / rel
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    def files_in(self, rel: str, suffix: str) -> dict[str, int]:
        """Files under `rel` (any depth) whose name ends with `suffix`: path relative to the store → bytes.
        Hidden files are left out."""
        folder = self.root / rel
        if not folder.is_dir():
            return {}
        found = sorted(p for p in folder.rglob(f"*{suffix}") if p.is_file() and not p.name.startswith("."))
        return {p.relative_to(self.root).as_posix(): p.stat().st_size for p in found}

    def pull(self, rel: str, suffix: str) -> list[Path]:
        """Bring the files under `rel` ending with `suffix` to this machine; the ones fetched now (a folder
        holds them already: none)."""
        return []

    def pull_file(self, rel: str) -> bool:
        """Bring the store's copy of file `rel` (rewritten whole) here; False when there is none."""
        return (self.root / rel).is_file()

    def push(self, local: Path) -> None:
        """Publish a file written under `root` (a folder: it already is)."""

    def fetch_ancestors(
        self, snapshot: Snapshot, wanted: Callable[[VersionFiles], bool]
    ) -> list[tuple[str, Exception]]:
        """Bring to this machine the ancestors of `snapshot` whose files `wanted` reads (a folder holds
        them): (ancestor, why) of those that could not be fetched."""
        return []

    # ------------------------------------------------------------------------------------------ writers

    @contextlib.contextmanager
    def writer(
        self, command: str | None = None, timeout: float | None = None, notify: Notify | None = None
    ) -> Iterator[SnapshotStore]:
        """Hold the store's writer lock for a whole write (read the parent, compute, commit):

            with store.writer("segos evolve --window w1"):
                ...  # reads and commits of this process; other writers wait or give up

        Waits up to `timeout` seconds (default `lock_timeout`), saying so on stderr (or to `notify`), then
        raises `StoreBusy` naming the holder (PID, command, since). Re-entrant within a process. The lock
        is released when the block ends, or by the kernel when the process dies."""
        try:
            with writer_lock(
                self.root,
                command or _command_line(),
                self.lock_timeout if timeout is None else timeout,
                notify,
            ):
                yield self
        except WriterBusy as exc:
            raise StoreBusy(str(exc)) from None

    # ------------------------------------------------------------------------------------------ listing

    def list_versions(self) -> list[dict[str, Any]]:
        """Manifests of committed versions, oldest first (a folder without manifest is not a version, and
        one whose manifest cannot be read is left out: `unreadable_versions` names those)."""
        # ties (two versions with one sequence number, from a store written before writers were
        # serialized) in creation order, so that `latest` is at least the same one every time
        return sorted(
            self._scan()[0],
            key=lambda m: (version_seq(m["version"]), str(m.get("created_at", "")), m["version"]),
        )

    def unreadable_versions(self) -> dict[str, str]:
        """Version folders whose manifest exists but cannot be read: folder name → why. A commit writes the
        manifest last and renames the folder into place, so these are damaged, not half-written."""
        return self._scan()[1]

    def _scan(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        if not self.versions_dir.is_dir():
            return [], {}
        found, unreadable = [], {}
        for child in self.versions_dir.iterdir():
            manifest = child / MANIFEST
            if VERSION_RE.match(child.name) and manifest.is_file():
                try:
                    found.append(read_manifest(manifest.read_text(), child.name))
                except (OSError, ValueError) as exc:
                    unreadable[child.name] = f"{MANIFEST} unreadable: {exc}"
        return found, unreadable

    def latest(self) -> str:
        """The newest version whose manifest reads (`resolve("latest")` refuses when a newer one does not)."""
        versions = self.list_versions()
        if not versions:
            raise UnknownVersion(f"store {self.address} has no versions yet; run `segos build` first")
        return versions[-1]["version"]

    def _newest_readable(self) -> str:
        """`latest()`, refused when a version numbered after it has a manifest that cannot be read: the
        store's newest version is damaged, and building on or serving the one before it must be asked for
        by name (`--from`, `--version`), never happen silently."""
        vid = self.latest()
        newer = {v: why for v, why in self.unreadable_versions().items() if version_seq(v) > version_seq(vid)}
        if newer:
            newest = max(newer, key=version_seq)
            raise DamagedSnapshot(
                f"the newest version {newest} of store {self.address} cannot be used: "
                f"{newer[newest]}. The newest readable one is {vid}; name it to use it (`--from {vid}` for "
                f"evolve, `--version {vid}` elsewhere), or restore {newest} from a backup (or delete its "
                "folder). `segos verify --all` lists every damaged version"
            )
        return vid

    def resolve(self, version: str | None) -> str:
        """A version id from an id, a unique prefix, `latest`/None, `served` (the version the store's
        served pointer names, see `served.py`), or `vN` (sequence number)."""
        if version in (None, "", "latest"):
            vid = self._newest_readable()
            self._reads.latest = vid
            return vid
        if version == "served":
            return served(self)
        manifests = self.list_versions()
        ids = [m["version"] for m in manifests]
        if version in ids:
            return version
        if re.fullmatch(r"v?\d+", version):
            seq = [
                m for m in manifests if m.get("seq", version_seq(m["version"])) == int(version.lstrip("v"))
            ]
            if len(seq) > 1:
                listed = "; ".join(
                    f"{m['version']} ({m.get('kind', '?')}, parent {m.get('parent') or '-'}, created "
                    f"{m.get('created_at', '?')})"
                    for m in seq
                )
                raise UnknownVersion(
                    f"{version!r} is ambiguous in store {self.address}: {len(seq)} versions share sequence "
                    f"number {int(version.lstrip('v'))} (written by concurrent writers before segos "
                    f"serialized them): {listed}. Give the full version id"
                )
            if seq:
                return seq[0]["version"]
        matches = [i for i in ids if i.startswith(version)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            self._refuse_unreadable(version)
        known = ", ".join(ids[-5:]) or "none"
        hint = f"ambiguous prefix (matches {len(matches)})" if matches else "no such version"
        raise UnknownVersion(
            f"{hint}: {version!r} in store {self.address}; known versions (newest last): {known}. "
            f"Run `segos versions --store {self.address}` to list them."
        )

    def _refuse_unreadable(self, version: str) -> None:
        """A version asked for by id, prefix or number that is there but whose manifest cannot be read is
        damaged, not unknown: say so."""
        seq = int(version.lstrip("v")) if re.fullmatch(r"v?\d+", version) else None
        for vid, why in sorted(self.unreadable_versions().items()):
            if vid.startswith(version) or (seq is not None and version_seq(vid) == seq):
                raise DamagedSnapshot(
                    f"version {vid} of store {self.address} cannot be used: {why}; "
                    "restore it from a backup, or delete its folder (`segos verify --all` lists every "
                    "damaged version)"
                )

    def manifest(self, version: str | None = None) -> dict[str, Any]:
        vid = self.resolve(version)
        return json.loads((self.versions_dir / vid / MANIFEST).read_text())

    # ------------------------------------------------------------------ small files beside the versions

    def read_root_file(self, name: str) -> bytes | None:
        """The bytes of file `name` at the store's top (the served pointer); None when there is none."""
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None

    def write_root_file(self, name: str, data: bytes) -> None:
        """Replace file `name` at the store's top whole (readers see the old bytes or the new ones)."""
        write_atomically(self.root / name, data)

    # ------------------------------------------------------------------------------------------ loading

    def files(self, version: str | None = None) -> VersionFiles:
        """The files of a version, for reading parts of it without loading it whole (not verified)."""
        vid = self.resolve(version)
        path = self.versions_dir / vid
        return VersionFiles(path, json.loads((path / MANIFEST).read_text()))

    def verify(self, version: str | None = None) -> list[str]:
        """Names of files whose size or sha256 differ from the manifest (empty when intact)."""
        return self.files(version).verify()

    def load(self, version: str | None = None, verify: bool = True) -> Snapshot:
        files = self.files(version)
        if verify:
            files.check()
        return Snapshot(
            version=files.version,
            path=files.path,
            manifest=files.manifest,
            nodes=files.read_nodes(),
            edges=files.read_edges(),
            transition=files.read_transition(),
        )

    # ------------------------------------------------------------------------------------------ writing

    def write(
        self,
        *,
        nodes: pl.DataFrame,
        tokens: pl.DataFrame,
        edges: pl.DataFrame,
        transition: sp.csr_matrix,
        manifest: Mapping[str, Any],
        signature: Signature | None = None,
        base: Snapshot | None = None,
        extra_tables: Mapping[str, pl.DataFrame] | None = None,
        extra_writers: Mapping[str, Callable[[Path], None]] | None = None,
    ) -> dict[str, Any]:
        """Write a new version atomically and return its manifest (with id, hashes and sizes).

        `manifest` carries the caller's fields (kind, parent, config, counts, ...); the store adds the
        version id, sequence, format, code version, creation time, parts and file hashes. With `base` (the
        parent), parts whose rows equal the parent's are linked, not rewritten, and so is the signature
        when no part changed; `signature` saves deriving it from `tokens`.
        """
        base_files = base.files if base is not None else None
        plan = plan_parts(nodes, tokens, base_files, (base.nodes, base.tokens) if base is not None else None)
        if signature is None:
            if (
                base_files is not None
                and base_files.has_signature()
                and all(isinstance(p, SamePart) for p in plan)
            ):
                sig: Signature | VersionFiles = base_files
            else:
                sig = table_signature(tokens, nodes.height)
        else:
            sig = signature
        return self.write_parts(
            parts=plan,
            signature=sig,
            edges=edges,
            transition=transition,
            manifest=manifest,
            extra_tables=extra_tables,
            extra_writers=extra_writers,
        )

    def write_parts(
        self,
        *,
        parts: PartPlan,
        signature: Signature | VersionFiles,
        edges: pl.DataFrame,
        transition: sp.csr_matrix,
        manifest: Mapping[str, Any],
        extra_tables: Mapping[str, pl.DataFrame] | None = None,
        extra_writers: Mapping[str, Callable[[Path], None]] | None = None,
    ) -> dict[str, Any]:
        """Write a version from a part plan (new parts written, unchanged ones linked); see `write`."""
        stage = Stage(self)
        try:
            stage.add_parts(parts)
            stage.add_signature(signature)
            edges.write_parquet(stage.at(EDGES))
            # uncompressed: zlib costs more time than the bytes it saves (the operator is small)
            sp.save_npz(stage.at(TRANSITION), transition.tocsr(), compressed=False)
            for name, table in (extra_tables or {}).items():
                table.write_parquet(stage.at(name))
            for name, writer in (extra_writers or {}).items():
                writer(stage.at(name))
            return stage.commit(manifest)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise StoreWriteError(
                f"could not write a new version to store {self.root}: "
                f"{explain(exc, getattr(exc, 'filename', None) or stage.current)}. "
                "Nothing was committed"
            ) from exc
        finally:
            stage.discard()  # all of it unless committed: no half version is left behind

    def _commit(
        self, stage: Path, manifest: dict[str, Any], files: dict[str, Any], content: str
    ) -> dict[str, Any]:
        # under the writer lock: the sequence number read here is still free when the folder is renamed
        with self.writer():
            versions = self.list_versions()
            self._check_parent(manifest.get("parent"), versions)
            if versions:
                # a store without a served pointer serves its latest: record it before this version
                # becomes the latest, so that only a promotion changes what followers serve
                pin(self, versions[-1]["version"])
            full = self._rename_into_place(stage, manifest, files, content, versions)
        self._reads.latest = None  # this thread's next commit builds on what it reads next
        return full

    def _check_parent(self, parent: str | None, versions: list[dict[str, Any]]) -> None:
        """Refuse a child of the version this thread read as the latest when another version has been
        committed since: the newest version would silently lack that one's change (an edit lost)."""
        based_on = getattr(self._reads, "latest", None)
        if parent is None or parent != based_on or not versions:
            return
        newest = versions[-1]
        if newest["version"] == parent:
            return
        raise StaleParent(
            f"another writer committed {newest['version']} ({newest.get('kind', '?')}, "
            f"{newest.get('created_at', '?')}) after this command read {parent} as the latest version; "
            f"nothing was committed, so that its change is not lost. Rerun the command: it builds on "
            f"{newest['version']}"
        )

    def _rename_into_place(
        self,
        stage: Path,
        manifest: dict[str, Any],
        files: dict[str, Any],
        content: str,
        versions: list[dict[str, Any]],
    ) -> dict[str, Any]:
        taken = max((version_seq(m["version"]) for m in versions), default=0)
        for attempt in range(100):  # a writer of older code takes no lock: step past its numbers
            seq = taken + 1 + attempt
            vid = f"v{seq:04d}-{content}"
            full = {
                "format": FORMAT,
                "version": vid,
                "seq": seq,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "code_version": __version__,
                **manifest,
                "files": files,
            }
            manifest_path = stage / MANIFEST
            if manifest_path.exists():
                manifest_path.chmod(0o644)  # a retry rewrites it (linked files are never touched)
            manifest_path.write_text(json.dumps(full, indent=2, sort_keys=False, default=str))
            fsync_file(manifest_path)
            for f in stage.iterdir():
                if f.stat().st_mode & 0o222:
                    f.chmod(0o444)
            fsync_dir(stage)
            if any(version_seq(p.name) == seq for p in self.versions_dir.iterdir()):
                continue
            try:
                os.rename(stage, self.versions_dir / vid)
            except OSError:
                if (self.versions_dir / vid).exists():
                    continue
                raise
            fsync_dir(self.versions_dir)
            return full
        raise SnapshotError(f"could not allocate a version id in {self.root} after 100 attempts")


def _command_line() -> str:
    """What this process is, for another writer's message (`segos evolve --window w1`, a script, ...)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name == "__main__.py":  # `python -m segos_pipeline.cli ...`
        name = "segos"
    return " ".join([name, *sys.argv[1:]])[:200]
