"""Immutable, atomically written graph versions (SPEC §9).

Layout of a store:

    STORE/versions/<version_id>/   nodes.parquet tokens.parquet edges.parquet transition.npz
                                   report.parquet [extra files] manifest.json
    STORE/.staging/<uuid>/         versions being written (invisible to readers)

A version's files are written first and its manifest last, so the manifest is the commit point; the
staged folder is then renamed into `versions/` in one step. Readers list only folders whose manifest is
present, and loading verifies every file's sha256 against the manifest. Files are made read-only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import scipy.sparse as sp

from . import __version__

FORMAT = 1
MANIFEST = "manifest.json"
NODES, TOKENS, EDGES, TRANSITION, REPORT = (
    "nodes.parquet",
    "tokens.parquet",
    "edges.parquet",
    "transition.npz",
    "report.parquet",
)
_VERSION_RE = re.compile(r"^v(\d{4,})-[0-9a-f]{8}$")


class SnapshotError(Exception):
    """A problem with the store or a version that a user can act on (message says how)."""


class UnknownVersion(SnapshotError):
    pass


class DamagedSnapshot(SnapshotError):
    pass


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened for fsync
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class Snapshot:
    """A loaded version: tables, operator and manifest. Read-only by convention and on disk."""

    version: str
    path: Path | None  # None for an in-memory draft (e.g. the graph inside an evolution round)
    manifest: dict[str, Any]
    nodes: pl.DataFrame
    tokens: pl.DataFrame
    edges: pl.DataFrame
    transition: sp.csr_matrix
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def parent(self) -> str | None:
        return self.manifest.get("parent")

    @property
    def round(self) -> int:
        return int(self.manifest.get("round", 0))

    def read_extra(self, name: str) -> pl.DataFrame:
        """Another Parquet table of this version (e.g. the build report), as listed in its manifest."""
        if self.path is None or name not in self.manifest.get("files", {}):
            raise SnapshotError(f"version {self.version} has no file {name!r}")
        return pl.read_parquet(self.path / name)


class SnapshotStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self.staging_dir = self.root / ".staging"

    # ------------------------------------------------------------------------------------------ listing

    def list_versions(self) -> list[dict[str, Any]]:
        """Manifests of committed versions, oldest first (a folder without manifest is not a version)."""
        if not self.versions_dir.is_dir():
            return []
        out = []
        for child in self.versions_dir.iterdir():
            manifest = child / MANIFEST
            if _VERSION_RE.match(child.name) and manifest.is_file():
                try:
                    out.append(json.loads(manifest.read_text()))
                except (OSError, json.JSONDecodeError):
                    continue  # unreadable manifest: not a committed version; `verify` reports it
        return sorted(out, key=lambda m: _seq(m["version"]))

    def latest(self) -> str:
        versions = self.list_versions()
        if not versions:
            raise UnknownVersion(f"store {self.root} has no versions yet; run `segos build` first")
        return versions[-1]["version"]

    def resolve(self, version: str | None) -> str:
        """A version id from an id, a unique prefix, `latest`/None, or `vN` (sequence number)."""
        if version in (None, "", "latest"):
            return self.latest()
        ids = [m["version"] for m in self.list_versions()]
        if version in ids:
            return version
        matches = [i for i in ids if i.startswith(version)]
        if len(matches) == 1:
            return matches[0]
        if re.fullmatch(r"v?\d+", version):
            seq = [i for i in ids if _seq(i) == int(version.lstrip("v"))]
            if seq:
                return seq[0]
        known = ", ".join(ids[-5:]) or "none"
        hint = f"ambiguous prefix (matches {len(matches)})" if matches else "no such version"
        raise UnknownVersion(
            f"{hint}: {version!r} in store {self.root}; known versions (newest last): {known}. "
            "Run `segos versions --store ...` to list them."
        )

    def manifest(self, version: str | None = None) -> dict[str, Any]:
        vid = self.resolve(version)
        return json.loads((self.versions_dir / vid / MANIFEST).read_text())

    # ------------------------------------------------------------------------------------------ loading

    def verify(self, version: str | None = None) -> list[str]:
        """Names of files whose size or sha256 differ from the manifest (empty when intact)."""
        vid = self.resolve(version)
        path = self.versions_dir / vid
        manifest = json.loads((path / MANIFEST).read_text())
        bad = []
        for name, meta in manifest["files"].items():
            f = path / name
            if not f.is_file() or f.stat().st_size != meta["bytes"] or sha256_file(f) != meta["sha256"]:
                bad.append(name)
        return bad

    def load(self, version: str | None = None, verify: bool = True) -> Snapshot:
        vid = self.resolve(version)
        path = self.versions_dir / vid
        if verify:
            bad = self.verify(vid)
            if bad:
                raise DamagedSnapshot(
                    f"version {vid} is damaged: {', '.join(bad)} no longer match(es) the manifest hashes; "
                    "load another version or rebuild it (snapshots are never repaired in place)"
                )
        manifest = json.loads((path / MANIFEST).read_text())
        return Snapshot(
            version=vid,
            path=path,
            manifest=manifest,
            nodes=pl.read_parquet(path / NODES),
            tokens=pl.read_parquet(path / TOKENS),
            edges=pl.read_parquet(path / EDGES),
            transition=sp.load_npz(path / TRANSITION).tocsr(),
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
        extra_tables: Mapping[str, pl.DataFrame] | None = None,
        extra_writers: Mapping[str, Callable[[Path], None]] | None = None,
    ) -> dict[str, Any]:
        """Write a new version atomically and return its manifest (with id, hashes and sizes).

        `manifest` carries the caller's fields (kind, parent, config, counts, ...); the store adds the
        version id, sequence, format, code version, creation time and file hashes.
        """
        self.staging_dir.mkdir(parents=True, exist_ok=True)
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        stage = self.staging_dir / uuid.uuid4().hex
        stage.mkdir()
        try:
            nodes.write_parquet(stage / NODES)
            tokens.write_parquet(stage / TOKENS)
            edges.write_parquet(stage / EDGES)
            sp.save_npz(stage / TRANSITION, transition.tocsr(), compressed=True)
            for name, table in (extra_tables or {}).items():
                table.write_parquet(stage / name)
            for name, writer in (extra_writers or {}).items():
                writer(stage / name)
            files = {}
            for f in sorted(stage.iterdir()):
                with f.open("rb") as fh:
                    os.fsync(fh.fileno())
                files[f.name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
            content = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]
            return self._commit(stage, dict(manifest), files, content)
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)

    def _commit(
        self, stage: Path, manifest: dict[str, Any], files: dict[str, Any], content: str
    ) -> dict[str, Any]:
        for _attempt in range(100):  # another writer may take the same sequence number: take the next
            seq = max((_seq(m["version"]) for m in self.list_versions()), default=0) + 1
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
            (stage / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=False, default=str))
            with (stage / MANIFEST).open("rb") as fh:
                os.fsync(fh.fileno())
            for f in stage.iterdir():
                f.chmod(0o444)
            _fsync_dir(stage)
            try:
                os.rename(stage, self.versions_dir / vid)
            except OSError:
                if (self.versions_dir / vid).exists():
                    for f in stage.iterdir():
                        f.chmod(0o644)
                    continue
                raise
            _fsync_dir(self.versions_dir)
            return full
        raise SnapshotError(f"could not allocate a version id in {self.root} after 100 attempts")


def _seq(version: str) -> int:
    m = _VERSION_RE.match(version)
    return int(m.group(1)) if m else -1
