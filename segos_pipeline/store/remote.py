"""A snapshot store on any fsspec URI (object storage in production): the URI plus a local cache folder.

    URI/versions/<version_id>/   the version's files, then manifest.json LAST (its presence is the commit)
    URI/traces/<window>/parts/   trace parts, each uploaded once under its unique name
    URI/traces/<window>/quarantine.jsonl, URI/traces/ingest_log.jsonl   uploaded whole after each ingest
    CACHE/<slug>-<hash>/         a local store laid out as today: versions/, .staging/, traces/, cache/, lock

Writing a version. It is built and committed in the cache exactly as a local store does it (staging,
hashing, hard links to the parent's parts, the writer lock), with its sequence number taken from the
versions listed at the URI. It is then uploaded file by file to `URI/versions/<id>/`, the manifest last: a
reader lists only folders whose manifest exists, so a writer that dies half way leaves no version. A
version whose manifest exists at the URI is never overwritten (`VersionExists`), and a version that
another writer's version overtook while this one was uploading is not published (`StaleParent`); either
way the cache forgets the version it had committed, so the cache never holds what the URI lacks.

Reading a version. The manifests at the URI are listed (each downloaded once: a published manifest never
changes), and a version is downloaded into the cache on first load: files it shares with a version in the
cache (same sha256) are hard-linked, the others downloaded and checked against the manifest's size and
sha256, the manifest written last and the folder renamed into place. From there the local code loads it
as always (memory maps, verification, derived caches beside it).

Concurrency. The writer lock is the cache's `flock`: writers sharing one cache take turns. Writers on
different machines are checked optimistically: a commit refuses when a version with its sequence number or
a later one appears at the URI, checked before the first upload and again right before the manifest. A
writer that publishes between that last check and this one's manifest is not caught; object stores'
conditional writes (S3 `If-None-Match`) would close that window and are not used here.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import posixpath
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config import WRITER_WAIT_S
from .durable import link_or_copy, write_atomically
from .filesystem import (
    Location,
    RemoteStoreError,
    basename,
    children,
    get_whole,
    make_parent,
    open_location,
    put_whole,
    remote_io,
)
from .layout import MANIFEST, VERSION_RE, WINDOW_FILES, read_manifest, sha256_file, version_seq
from .lock import scratch_folder, sweep_stale_stages
from .snapshot import DamagedSnapshot, Snapshot, SnapshotError, SnapshotStore, StaleParent, UnknownVersion
from .uri import is_uri
from .version_files import VersionFiles

MANIFESTS = ".remote-manifests"  # in the cache: the raw bytes of every manifest read from the URI


class VersionExists(SnapshotError):
    """The version is already published at the URI: published versions are never overwritten."""


def default_cache_base() -> Path:
    """`$SEGOS_CACHE`, else `$XDG_CACHE_HOME/segos`, else `~/.cache/segos`."""
    env = os.environ.get("SEGOS_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "segos"


def cache_folder(uri: str, base: str | Path | None = None) -> Path:
    """The cache of store `uri` under `base` (default `default_cache_base()`): one folder per URI, named so
    that a person can tell which store it caches."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", uri).strip("_")[:80]
    digest = hashlib.sha256(uri.encode()).hexdigest()[:8]
    return Path(base if base is not None else default_cache_base()) / f"{slug}-{digest}"


def open_store(root: str | Path, cache: str | Path | None = None) -> SnapshotStore:
    """A store at a local path, or at a URI (`RemoteStore`, cached under `cache`)."""
    if is_uri(root):
        return RemoteStore(str(root), cache)
    return SnapshotStore(root)


class RemoteStore(SnapshotStore):
    """A `SnapshotStore` whose versions live at a URI; `root` is the local cache folder.

    `with_windows=False` downloads versions without the window trace files they reference: for a reader
    that needs only the graph (a Spark executor replaying queries against a parent version), which would
    otherwise download the parent's whole window."""

    def __init__(
        self,
        uri: str,
        cache: str | Path | None = None,
        lock_timeout: float = WRITER_WAIT_S,
        with_windows: bool = True,
    ):
        self.location: Location = open_location(uri)
        self.uri = self.location.uri
        self.with_windows = with_windows
        self._manifests: dict[str, bytes] = {}  # also on disk; kept here too for a read-only cache
        self._root_files: dict[str, tuple[float, bytes | None]] = {}  # name → (monotonic time read, bytes)
        super().__init__(cache_folder(self.uri, cache), lock_timeout)

    def __repr__(self) -> str:
        return f"RemoteStore({self.uri!r}, cache={str(self.root)!r})"

    # ----------------------------------------------------- where it is (see `SnapshotStore.address`)

    @property
    def address(self) -> str:
        return self.uri

    @property
    def local_root(self) -> Path | None:
        return None

    @property
    def local_cache(self) -> Path | None:
        return self.root

    @property
    def commits_show_locally(self) -> bool:
        return False  # another machine's commit changes nothing in the cache: the URI is polled

    def fetch_ancestors(
        self, snapshot: Snapshot, wanted: Callable[[VersionFiles], bool]
    ) -> list[tuple[str, Exception]]:
        """Download into the cache the ancestors of `snapshot` whose files `wanted` reads (execution order
        reads their round traces from the cache folder). Files shared with cached versions are linked,
        not downloaded; an ancestor that cannot be fetched is left out and returned with why (its reader
        then finds it missing, as it finds a damaged local one)."""
        failed: list[tuple[str, Exception]] = []
        parent = snapshot.manifest.get("parent")
        seen = {snapshot.version}
        while parent and parent not in seen:
            seen.add(parent)
            try:
                manifest = self.manifest(parent)
            except (SnapshotError, OSError, ValueError):
                return failed  # a reader walking the lineage ends there too
            try:
                if wanted(VersionFiles(self.versions_dir / parent, manifest)):
                    self.files(parent)
            except (SnapshotError, OSError) as exc:
                failed.append((parent, exc))
            parent = manifest.get("parent")
        return failed

    # ------------------------------------------------------------------------------------------ listing

    def _scan(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Manifests of the versions at the URI (a folder without a manifest is an unfinished upload)."""
        url = self.location.url("versions")
        with remote_io("list the versions at", url):
            names = sorted(
                n
                for n in (basename(e["name"]) for e in children(self.location, "versions"))
                if VERSION_RE.match(n)
            )
            raw = {n: self._cached_manifest(n) for n in names}
            missing = [n for n, data in raw.items() if data is None]
            if missing:
                paths = {self.location.join("versions", n, MANIFEST): n for n in missing}
                got = self.location.fs.cat(list(paths), on_error="return")
                for path, data in got.items():
                    name = paths.get(path) or paths.get(self.location.fs._strip_protocol(path))
                    if name is None or isinstance(data, FileNotFoundError):
                        continue  # not committed (yet): upload in progress, or a writer died
                    if isinstance(data, BaseException):
                        raise data
                    raw[name] = data
        found, unreadable = [], {}
        for name in names:
            data = raw.get(name)
            if data is None:
                continue
            try:
                found.append(read_manifest(data, name))
            except ValueError as exc:
                unreadable[name] = f"{MANIFEST} unreadable: {exc}"
                continue
            self._remember_manifest(name, data)
        return found, unreadable

    def _cached_manifest(self, vid: str) -> bytes | None:
        if vid not in self._manifests:
            path = self.root / MANIFESTS / f"{vid}.json"
            if not path.is_file():
                return None
            self._manifests[vid] = path.read_bytes()
        return self._manifests[vid]

    def _remember_manifest(self, vid: str, data: bytes) -> None:
        self._manifests[vid] = data
        path = self.root / MANIFESTS / f"{vid}.json"
        if not path.is_file():
            with contextlib.suppress(OSError):  # a read-only cache still reads: it just lists again
                write_atomically(path, data)

    def _manifest_bytes(self, vid: str) -> bytes:
        data = self._cached_manifest(vid)
        if data is None:
            self._scan()
            data = self._cached_manifest(vid)
        if data is None:
            raise UnknownVersion(f"no version {vid} at {self.uri}")
        return data

    def manifest(self, version: str | None = None) -> dict[str, Any]:
        return json.loads(self._manifest_bytes(self.resolve(version)))

    def published_manifest(self, vid: str) -> bytes:
        """The manifest of version `vid` (a full id), read alone: one read instead of listing the store and
        reading every manifest not yet cached, for a reader told which version to load (an executor)."""
        data = self._cached_manifest(vid)
        if data is not None:
            return data
        if not VERSION_RE.match(vid):
            raise UnknownVersion(f"{vid!r} is not a full version id (store {self.uri})")
        path = self.location.join("versions", vid, MANIFEST)
        try:
            with remote_io("read", self.location.url("versions", vid, MANIFEST)):
                data = self.location.fs.cat_file(path)
        except RemoteStoreError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                raise UnknownVersion(f"no version {vid} at {self.uri}") from None
            raise
        try:
            named = json.loads(data).get("version")
        except (ValueError, AttributeError):
            named = None
        if named != vid:
            raise DamagedSnapshot(f"version {vid} at {self.uri}: its {MANIFEST} does not name it")
        self._remember_manifest(vid, data)
        return data

    def fetch_published(self, vid: str) -> Path:
        """The cache folder of version `vid` (a full id), downloaded hash-checked if the cache lacks it,
        without listing the store."""
        return self.fetch(vid, self.published_manifest(vid))

    def load(self, version: str | None = None, verify: bool = True) -> Snapshot:
        """A version loaded from the cache (downloaded first if needed), knowing the URI it came from."""
        return replace(super().load(version, verify), store_uri=self.uri)

    # ------------------------------------------------------------------------------------------ reading

    def files(self, version: str | None = None) -> VersionFiles:
        """The files of a version, downloaded into the cache first when they are not there yet."""
        vid = self.resolve(version)
        data = self._manifest_bytes(vid)
        return VersionFiles(self.fetch(vid, data), json.loads(data))

    def fetch(self, vid: str, manifest_bytes: bytes) -> Path:
        """The cache folder of version `vid`, downloaded whole (hash-checked, manifest last) if missing."""
        target = self.versions_dir / vid
        if (target / MANIFEST).is_file():
            return target
        manifest = json.loads(manifest_bytes)
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale_stages(self.staging_dir)  # downloads of killed readers
        with scratch_folder(self.staging_dir, "fetch") as tmp:
            cached = self._cached_files()
            for name, meta in sorted(manifest.get("files", {}).items()):
                self._fetch_file(vid, name, meta, tmp / name, cached.get(meta["sha256"]))
            if self.with_windows:
                self._fetch_window_files(vid, manifest)
            (tmp / MANIFEST).write_bytes(manifest_bytes)  # last, as in a commit
            for f in tmp.iterdir():
                f.chmod(0o444)
            try:
                os.rename(tmp, target)
            except OSError:
                if not (target / MANIFEST).is_file():  # else another reader fetched it first
                    raise
        return target

    def _fetch_file(self, vid: str, name: str, meta: dict[str, Any], dest: Path, cached: Path | None) -> None:
        if cached is not None and cached.stat().st_size == meta["bytes"]:
            link_or_copy(cached, dest)  # verified when it entered the cache; `load` verifies it again
            return
        url = self.location.url("versions", vid, name)
        try:
            with remote_io("download", url):
                get_whole(self.location, self.location.join("versions", vid, name), dest)
        except RemoteStoreError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                raise DamagedSnapshot(
                    f"version {vid} at {self.uri} is damaged: {name} is listed in its manifest but missing "
                    "at the URI; load another version (published versions are never repaired in place)"
                ) from None
            raise
        if dest.stat().st_size != meta["bytes"] or sha256_file(dest) != meta["sha256"]:
            raise DamagedSnapshot(
                f"version {vid} at {self.uri} is damaged: {url} does not match the size and sha256 of its "
                "manifest; load another version (published versions are never repaired in place)"
            )

    def _fetch_window_files(self, vid: str, manifest: dict[str, Any]) -> None:
        """The trace files an evolved version references by hash (`window_files`, paths relative to the
        store) into the cache's `traces/`, where its round traces are read from; each written once under a
        unique name, so a cached copy of the right size is the same file."""
        for ref in manifest.get(WINDOW_FILES, []):
            rel = str(ref.get("path", ""))
            if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
                continue  # a file outside the store: not the store's to fetch
            local = self.root / rel
            if local.is_file() and local.stat().st_size == ref["bytes"]:
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            url = self.location.url(rel)
            with remote_io("download", url):
                get_whole(self.location, self.location.join(rel), local)
            if local.stat().st_size != ref["bytes"] or sha256_file(local) != ref["sha256"]:
                local.unlink(missing_ok=True)
                raise DamagedSnapshot(
                    f"version {vid} at {self.uri} references window traces that changed: {url} does not "
                    "match the size and sha256 its manifest records"
                )

    def _cached_files(self) -> dict[str, Path]:
        """sha256 → a file of a version already in the cache (shared parts are linked, not downloaded)."""
        out: dict[str, Path] = {}
        if not self.versions_dir.is_dir():
            return out
        for folder in self.versions_dir.iterdir():
            try:
                files = json.loads((folder / MANIFEST).read_text()).get("files", {})
            except (OSError, ValueError):
                continue
            for name, meta in files.items():
                out.setdefault(meta["sha256"], folder / name)
        return out

    # ------------------------------------------------------------------------------------------ writing

    def _commit(
        self, stage: Path, manifest: dict[str, Any], files: dict[str, Any], content: str
    ) -> dict[str, Any]:
        """Commit in the cache as a local store does, then publish; a version that cannot be published
        leaves the cache too (nothing was committed)."""
        with self.writer():
            self._forget_unpublished()
            full = super()._commit(stage, manifest, files, content)
            folder = self.versions_dir / full["version"]
            try:
                self.publish(folder, overtaken_check=True)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        return full

    def _forget_unpublished(self) -> list[str]:
        """Remove cached versions the URI does not list: left by a writer killed while it published (one
        that fails removes its own). Run under the writer lock, so no live writer's version is touched;
        readers only ever add versions the URI lists."""
        if not self.versions_dir.is_dir():
            return []
        published = {m["version"] for m in self._scan()[0]}
        gone = [p for p in self.versions_dir.iterdir() if p.is_dir() and p.name not in published]
        for folder in gone:
            shutil.rmtree(folder, ignore_errors=True)
        return [p.name for p in gone]

    def publish(self, folder: Path, overtaken_check: bool = False) -> dict[str, Any]:
        """Upload a committed version folder (of this cache or of any local store) to the URI, file by
        file, its manifest last. Refuses a version already published (`VersionExists`); with
        `overtaken_check`, also one whose sequence number another writer's version took meanwhile."""
        data = (folder / MANIFEST).read_bytes()
        manifest = json.loads(data)
        vid = manifest["version"]
        url = self.location.url("versions", vid)
        fs = self.location.fs
        with remote_io("publish a version to", url):
            self._refuse_published(vid)
            if overtaken_check:
                self._refuse_overtaken(manifest)
            same = self._published_by_hash(manifest.get("parent"))
            make_parent(self.location, self.location.join("versions", vid, MANIFEST))
            for name, meta in sorted(manifest["files"].items()):
                target = self.location.join("versions", vid, name)
                source = same.get(meta["sha256"])
                if source is not None:
                    fs.copy(source, target)  # unchanged since the parent: a copy inside the store
                else:
                    fs.put_file(str(folder / name), target)
            # again right before the commit point: another writer may have published while this one uploaded
            self._refuse_published(vid)
            if overtaken_check:
                self._refuse_overtaken(manifest)
            put_whole(self.location, folder / MANIFEST, self.location.join("versions", vid, MANIFEST))
        self._remember_manifest(vid, data)
        return manifest

    def _refuse_published(self, vid: str) -> None:
        path = self.location.join("versions", vid, MANIFEST)
        self.location.fs.invalidate_cache(path)
        if self.location.fs.exists(path):
            raise VersionExists(
                f"version {vid} is already published at {self.location.url('versions', vid)}; a published "
                "version is never overwritten (commit a new version instead)"
            )

    def _refuse_overtaken(self, manifest: dict[str, Any]) -> None:
        vid, seq = manifest["version"], int(manifest.get("seq", version_seq(manifest["version"])))
        versions = self._scan()[0]
        newer = [m for m in versions if m["version"] != vid and version_seq(m["version"]) >= seq]
        if newer:
            other = newer[-1]
            raise StaleParent(
                f"another writer published {other['version']} ({other.get('kind', '?')}, "
                f"{other.get('created_at', '?')}) at {self.uri} while this command was writing {vid}; "
                "nothing was published. Rerun the command: it builds on the newest version"
            )

    def _published_by_hash(self, vid: str | None) -> dict[str, str]:
        """sha256 → path at the URI of the files of published version `vid` (none when unknown)."""
        data = self._cached_manifest(vid) if vid else None
        if data is None:
            return {}
        files = json.loads(data).get("files", {})
        return {meta["sha256"]: self.location.join("versions", vid, n) for n, meta in files.items()}

    # --------------------------------------------------------------------- other files (trace windows)

    def names_in(self, rel: str) -> list[str]:
        """Names directly under `rel` at the URI (none when it does not exist)."""
        with remote_io("list", self.location.url(rel)):
            return sorted(basename(e["name"]) for e in children(self.location, rel))

    def files_in(self, rel: str, suffix: str) -> dict[str, int]:
        """Files under `rel` (any depth) whose name ends with `suffix`: path relative to the store → bytes.
        Temporary uploads (`*.tmp`) and hidden files are left out."""
        with remote_io("list", self.location.url(rel)):
            self.location.fs.invalidate_cache(self.location.join(rel))
            try:
                found = self.location.fs.find(self.location.join(rel), detail=True)
            except FileNotFoundError:
                return {}
        base = self.location.fs._strip_protocol(self.location.path)
        out = {}
        for path, info in found.items():
            name = basename(path)
            if name.endswith(suffix) and not name.startswith("."):
                rel_path = posixpath.relpath(self.location.fs._strip_protocol(path), base)
                out[rel_path] = int(info.get("size") or 0)
        return out

    def pull(self, rel: str, suffix: str) -> list[Path]:
        """Download the files under `rel` ending with `suffix` that the cache lacks (or holds at another
        size). Meant for files written once under a unique name, which a cached copy can never go stale
        for; returns the local paths downloaded."""
        return self.download(dict(sorted(self.files_in(rel, suffix).items())))[1]

    def download(self, sizes: Mapping[str, int]) -> tuple[list[Path], list[Path]]:
        """Files of the store (path relative to it → bytes, each written once under a unique name) in the
        cache: (the local path of each, in the order given; those downloaded now). A cached copy of the
        listed size is the file."""
        paths, got = [], []
        for rel_path, size in sizes.items():
            local = self.root / rel_path
            paths.append(local)
            if local.is_file() and local.stat().st_size == size:
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            with remote_io("download", self.location.url(rel_path)):
                get_whole(self.location, self.location.join(rel_path), local)
            if local.stat().st_size != size:
                local.unlink(missing_ok=True)
                raise RemoteStoreError(
                    f"{self.location.url(rel_path)} changed while it was read (listed at {size} bytes); "
                    "files under traces/ are written once: rerun, and check what else writes there"
                )
            got.append(local)
        return paths, got

    def pull_file(self, rel: str) -> bool:
        """Replace the cache's copy of `rel` with the URI's (a file rewritten whole, e.g. a quarantine);
        False (and no cached copy) when the URI has no such file."""
        local = self.root / rel
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            with remote_io("download", self.location.url(rel)):
                get_whole(self.location, self.location.join(rel), local)
        except RemoteStoreError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                local.unlink(missing_ok=True)  # the cache mirrors the URI: what it lacks was never published
                return False
            raise
        return True

    def push(self, local: Path) -> None:
        """Upload a file of the cache to the same place at the URI, whole (see `filesystem.put_whole`)."""
        rel = local.relative_to(self.root).as_posix()
        with remote_io("upload", self.location.url(rel)):
            put_whole(self.location, local, self.location.join(rel))

    def url(self, rel: str) -> str:
        return self.location.url(rel)

    # ------------------------------------------------------------- small files (the served pointer)

    def read_root_file(self, name: str) -> bytes | None:
        """File `name` at the URI's top, None when it has none; a reader made by `polling` reads it at most
        every `listing_max_age` seconds, like its listing."""
        seen = self._root_files.get(name)
        if seen is not None and 0 <= time.monotonic() - seen[0] < self.listing_max_age:
            return seen[1]
        started = time.monotonic()
        path = self.location.join(name)
        try:
            with remote_io("read", self.location.url(name)):
                self.location.fs.invalidate_cache(path)
                data: bytes | None = self.location.fs.cat_file(path)
        except RemoteStoreError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError):
                raise
            data = None
        self._root_files = {**self._root_files, name: (started, data)}
        return data

    def write_root_file(self, name: str, data: bytes) -> None:
        """Replace file `name` at the URI whole (see `filesystem.put_whole`), through the cache."""
        local = self.root / name
        write_atomically(local, data)
        self.push(local)
        self._root_files = {**self._root_files, name: (time.monotonic(), data)}

    # ----------------------------------------------------------------- readers that poll (segos mcp)

    listing_max_age: float = 0.0  # seconds `list_versions` reuses its last listing; 0: always list
    _listed: tuple[float, list[dict[str, Any]]] | None = None  # (monotonic time listed, manifests)

    def list_versions(self) -> list[dict[str, Any]]:
        """As `SnapshotStore.list_versions`; a reader made by `polling` reuses its last listing for
        `listing_max_age` seconds, so that `latest`, `resolve` and `load` ask the URI at most that often."""
        listed = self._listed
        if listed is not None and 0 <= time.monotonic() - listed[0] < self.listing_max_age:
            return list(listed[1])
        started = time.monotonic()
        versions = super().list_versions()
        self._listed = (started, versions)
        return list(versions)

    def polling(self, every: float) -> RemoteStore:
        """A reader of this store (same URI and cache) that lists the URI at most every `every` seconds.
        A copy, so that a writer holding this store keeps listing on every check."""
        if every < 0:
            raise ValueError(f"a polling interval is a number of seconds >= 0, not {every!r}")
        reader = copy.copy(self)
        reader.listing_max_age, reader._listed, reader._root_files = float(every), None, {}
        return reader
