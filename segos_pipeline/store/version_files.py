"""The files of one committed version, read on demand and checked against its manifest."""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..text.lexicon import TOKEN_SCHEMA, Signature
from .errors import DamagedSnapshot, SnapshotError
from .layout import (
    EDGES,
    MANIFEST,
    NODES,
    SIGNATURE,
    TOKENS,
    TRANSITION,
    VERSION_RE,
    VOCAB,
    WINDOW_FILES,
    content_id,
    sha256_file,
)
from .oserrors import explain


@dataclass(frozen=True)
class SamePart:
    """A part of an existing version, linked unchanged into the new one."""

    folder: Path
    record: Mapping[str, Any]  # the part's manifest record: file names, rows, first and last id
    files: Mapping[str, Any]  # the version's file hashes (the linked files keep theirs)


class VersionFiles:
    """The files of one committed version, read on demand (what an incremental update needs of its parent
    without loading whole tables). Handles both storage formats."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self.version: str = manifest["version"]
        files = manifest.get("files", {})
        if "parts" in manifest:
            self.parts: list[dict[str, Any]] = [dict(p) for p in manifest["parts"]]
        else:  # format 1: the whole table is one part (its token `node` column is already 0-based)
            rows = int(manifest.get("counts", {}).get("skills", 0))
            self.parts = [{"nodes": NODES, "tokens": TOKENS, "rows": rows}] if NODES in files else []
        self.node_rows = sum(int(p["rows"]) for p in self.parts)
        self._parts_read: dict[int, tuple[pl.DataFrame, pl.DataFrame]] = {}
        self._verified: set[str] = set()

    def verify(self, names: Sequence[str] | None = None) -> list[str]:
        """Names (of `names`, default every file) whose size or sha256 differ from the manifest. A file
        found intact is not hashed again by this object (an update checks a part up front and again when
        it reads it)."""
        files = self.manifest["files"]
        bad = []
        for name in names if names is not None else list(files):
            if name in self._verified:
                continue
            meta = files.get(name)
            f = self.path / name
            intact = meta is not None and f.is_file() and f.stat().st_size == meta["bytes"]
            if intact and sha256_file(f) == meta["sha256"]:
                self._verified.add(name)
            else:
                bad.append(name)
        return bad

    def manifest_problems(self) -> list[str]:
        """What is wrong with the manifest as a whole (empty when nothing): an id that does not follow
        from its file table (`content_id`) or its sequence number, and files in the version's folder that
        it does not list (a version's folder is written whole and never changed afterwards)."""
        out = []
        files = self.manifest.get("files", {})
        m = VERSION_RE.match(self.version)
        if m is None or not self.version.endswith(f"-{content_id(files)}"):
            out.append(
                f"its id {self.version} does not match the hash of its file table ({content_id(files)})"
            )
        elif int(m.group(1)) != self.manifest.get("seq", int(m.group(1))):
            out.append(f"its id {self.version} does not match its sequence number {self.manifest.get('seq')}")
        if self.path.is_dir():
            unlisted = sorted(
                p.name for p in self.path.iterdir() if p.name != MANIFEST and p.name not in files
            )
            if unlisted:
                out.append(f"{', '.join(unlisted[:5])}{' ...' if len(unlisted) > 5 else ''} not listed in it")
        return out

    def check(self, names: Sequence[str] | None = None) -> None:
        bad = self.verify(names)
        if bad:
            raise DamagedSnapshot(
                f"version {self.version} is damaged: {', '.join(bad)} no longer match(es) the manifest "
                "hashes; load another version, run `segos repair` (it makes cold-start files again from the "
                "library), or rebuild it"
            )

    def read_nodes(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        cols = list(columns) if columns is not None else None
        frames = [self._parquet(p["nodes"], columns=cols) for p in self.parts]
        # one chunk per column: row gathers (hydrating a bundle) on a many-chunk frame are several times
        # slower, and every query pays that while the copy is paid once
        return pl.concat(frames, how="vertical", rechunk=True) if frames else pl.DataFrame()

    def read_tokens(self) -> pl.DataFrame:
        frames = [
            frame.with_columns((pl.col("node") + start).cast(pl.UInt32)) if start else frame
            for start, _stop, frame in self.token_parts()
        ]
        return (
            pl.concat(frames, how="vertical", rechunk=True) if frames else pl.DataFrame(schema=TOKEN_SCHEMA)
        )

    def token_parts(self) -> Iterator[tuple[int, int, pl.DataFrame]]:
        """(first node, end node, token rows with `node` local to the part) of each part in turn: the
        token table a part at a time, for readers that must not hold it whole (100M rows at 1M skills)."""
        offset = 0
        for p in self.parts:
            rows = int(p["rows"])
            yield offset, offset + rows, self._parquet(p["tokens"])
            offset += rows

    def read_part(self, i: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Node rows and token rows (`node` local) of part i, checked against the manifest first (what is
        read of a part may be written into a new one: damage must not carry over under a fresh hash).
        Kept once read: an update reads its part twice."""
        if i not in self._parts_read:
            p = self.parts[i]
            self.check([p["nodes"], p["tokens"]])
            self._parts_read[i] = (
                self._parquet(p["nodes"]),
                self._parquet(p["tokens"]),
            )
        return self._parts_read[i]

    def part_at(self, idx: int) -> tuple[int, int]:
        """(part, its first node index) of the part that holds node `idx`, or receives it: a node inserted
        at a part boundary joins the later part, one appended at the end joins the last."""
        starts = np.cumsum([0] + [int(p["rows"]) for p in self.parts])
        i = min(int(np.searchsorted(starts, idx, side="right")) - 1, max(len(self.parts) - 1, 0))
        return i, int(starts[i])

    def same_part(self, i: int) -> SamePart:
        return SamePart(self.path, self.parts[i], self.manifest["files"])

    def has_signature(self) -> bool:
        return SIGNATURE in self.manifest.get("files", {})

    def read_signature(self) -> Signature:
        with self.reading(SIGNATURE), np.load(self.path / SIGNATURE) as z:
            indptr, indices, shape = z["indptr"], z["indices"], tuple(int(x) for x in z["shape"])
        data = np.ones(len(indices), dtype=np.float32)
        matrix = sp.csr_matrix((data, indices, indptr), shape=shape)
        return Signature(matrix, self._parquet(VOCAB)["token"])

    def read_extra(self, name: str) -> pl.DataFrame:
        """Another Parquet table of this version (e.g. the build report), as listed in its manifest."""
        if name not in self.manifest.get("files", {}):
            raise SnapshotError(f"version {self.version} has no file {name!r}")
        return self._parquet(name)

    def read_edges(self) -> pl.DataFrame:
        return self._parquet(EDGES)

    def window_files(self) -> list[Path]:
        """The window files this version references, each checked against its recorded size and sha256."""
        root = self.path.parent.parent  # STORE/versions/<id> → STORE
        paths, bad = [], []
        for ref in self.manifest.get(WINDOW_FILES, []):
            f = root / ref["path"]  # an absolute recorded path stays absolute
            if f.is_file() and f.stat().st_size == ref["bytes"] and sha256_file(f) == ref["sha256"]:
                paths.append(f)
            else:
                bad.append(str(f))
        if bad:
            raise DamagedSnapshot(
                f"version {self.version} references window traces that are gone or changed: "
                f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}; its round traces cannot be read "
                "(restore the window's files, or rebuild the version)"
            )
        return paths

    def read_transition(self) -> sp.csr_matrix:
        with self.reading(TRANSITION):
            return sp.load_npz(self.path / TRANSITION).tocsr()

    def _parquet(self, name: str, columns: list[str] | None = None) -> pl.DataFrame:
        with self.reading(name):
            return pl.read_parquet(self.path / name, columns=columns)

    @contextlib.contextmanager
    def reading(self, name: str) -> Iterator[None]:
        """A file of this version that cannot be read (truncated, garbled, gone) is named in the error; the
        readers' own messages name no file. Polars' reader panics (a `BaseException`) are caught too."""
        try:
            yield
        except (
            OSError,
            ValueError,
            KeyError,
            zipfile.BadZipFile,
            pl.exceptions.PolarsError,
            pl.exceptions.PanicException,
        ) as exc:
            raise DamagedSnapshot(
                f"version {self.version}: cannot read {self.path / name}: {explain(exc)}. "
                "Run `segos verify --all` to see which versions are intact; `segos repair --all` makes "
                "damaged cold-start files again from the library, and restores nothing else: restore the "
                "rest from a backup, or delete the version's folder and rebuild"
            ) from exc
