"""A version being written: staged in `STORE/.staging/<uuid>/` under its lock, its files written or linked
and hashed, then handed to the store's commit (see `snapshot.py`)."""

from __future__ import annotations

import itertools
import shutil
import sys
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl

from ..text.lexicon import Signature
from .durable import fsync_file, link_or_copy
from .layout import MANIFEST, SIGNATURE, VOCAB, content_id, sha256_file
from .lock import stage_lock, sweep_stale_stages
from .parts import PartPlan, part_files
from .version_files import SamePart, VersionFiles

PART_WRITERS = 2  # parts written at once (threads)
# zstd at level 1 rather than polars' default 3: a part is written in less time for a few percent more
# bytes (a 1M-skill version writes hundreds of parts, the largest stage after the parse and the join).
PART_PARQUET: dict[str, Any] = {"compression": "zstd", "compression_level": 1}


def own_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each list column holding only its own rows' items.

    A slice of a larger table (a part of a whole node table) shares the whole table's list items, and
    polars' Parquet writer judges dictionary encoding over all of them: the same rows were stored in other
    bytes depending on the size of the table they were cut from, and a part of a 1M-skill node table took
    several times as long to write.
    """
    lists = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.List)]
    return frame.with_columns(pl.col(lists).list.eval(pl.element())) if lists else frame


class Committer(Protocol):
    """What a stage needs of its store (`snapshot.SnapshotStore`, which imports this module)."""

    staging_dir: Path
    versions_dir: Path

    def _commit(
        self, stage: Path, manifest: dict[str, Any], files: dict[str, Any], content: str
    ) -> dict[str, Any]: ...


class Stage:
    """A version being written in `.staging/`: files are written (or linked) first, the manifest last."""

    def __init__(self, store: Committer):
        self.store = store
        store.staging_dir.mkdir(parents=True, exist_ok=True)
        store.versions_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale_stages(store.staging_dir)  # folders of killed writers (a live writer's lock is held)
        self._lock = stage_lock(store.staging_dir, uuid.uuid4().hex)
        self.dir = self._lock.__enter__()
        try:
            self.dir.mkdir()
        except BaseException:
            self._lock.__exit__(*sys.exc_info())
            raise
        self.linked: dict[str, Any] = {}
        self.sealed: dict[str, Any] = {}  # files already flushed and hashed (`_seal`)
        self.parts: list[dict[str, Any]] = []
        self.current: Path = self.dir  # the file being written, for the message when writing fails

    def at(self, name: str) -> Path:
        """The staged path of `name`, noted as the file being written."""
        self.current = self.dir / name
        return self.current

    def link(self, name: str, source: Path, meta: Mapping[str, Any]) -> None:
        """Add an unchanged file of another version under `name`, keeping that version's recorded hash (so
        damage to the shared file stays detectable here too). Copies when the filesystem cannot link."""
        link_or_copy(source, self.at(name))
        self.linked[name] = {"sha256": meta["sha256"], "bytes": meta["bytes"]}

    def add_parts(self, plan: PartPlan) -> None:
        # New parts are written PART_WRITERS at a time: polars releases the GIL while it decodes, encodes
        # and compresses a part, so a second thread keeps the other core busy (a 1M-skill version has
        # hundreds of parts). Records are gathered in part order.
        with ThreadPoolExecutor(PART_WRITERS) as pool:
            self.parts.extend(pool.map(self._add_part, range(len(plan)), itertools.repeat(plan)))

    def _add_part(self, i: int, plan: PartPlan) -> dict[str, Any]:
        nodes_name, tokens_name = part_files(i)
        part = plan[i]
        if isinstance(part, SamePart):
            self.link(nodes_name, part.folder / part.record["nodes"], part.files[part.record["nodes"]])
            self.link(tokens_name, part.folder / part.record["tokens"], part.files[part.record["tokens"]])
            rec = {k: part.record[k] for k in ("rows", "first", "last") if k in part.record}
        else:
            own_rows(part.nodes).write_parquet(self.at(nodes_name), **PART_PARQUET)
            own_rows(part.tokens).write_parquet(self.at(tokens_name), **PART_PARQUET)
            self._seal(nodes_name)
            self._seal(tokens_name)
            ids = part.nodes["id"]
            rec = {
                "rows": part.nodes.height,
                "first": ids[0] if len(ids) else None,
                "last": ids[-1] if len(ids) else None,
            }
        return {"nodes": nodes_name, "tokens": tokens_name, **rec}

    def _seal(self, name: str) -> None:
        """Flush a finished file to disk and record its hash now, on the writer's thread: a 1M-skill
        version's parts are most of its bytes, and flushing and hashing them one after another at the
        commit kept the disk and a core busy while nothing else ran."""
        path = self.dir / name
        fsync_file(path)
        self.sealed[name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}

    def add_signature(self, signature: Signature | VersionFiles) -> None:
        if isinstance(signature, VersionFiles):
            files = signature.manifest["files"]
            for name in (SIGNATURE, VOCAB):
                self.link(name, signature.path / name, files[name])
            return
        m = signature.matrix.tocsr()
        with self.at(SIGNATURE).open("wb") as fh:  # uncompressed: written on every update, read fast
            np.savez(
                fh,
                indptr=m.indptr.astype(np.int64),
                indices=m.indices.astype(np.int32),
                shape=np.array(m.shape, dtype=np.int64),
            )
        pl.DataFrame({"token": signature.vocab}, schema={"token": pl.String}).write_parquet(self.at(VOCAB))

    def commit(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        files = {}
        for f in sorted(self.dir.iterdir()):
            if f.name not in self.linked and f.name not in self.sealed:
                self.current = f
                self._seal(f.name)
            files[f.name] = self.linked.get(f.name) or self.sealed[f.name]
        content = content_id(files)
        extra = {"parts": self.parts} if self.parts else {}
        self.current = self.dir / MANIFEST
        return self.store._commit(self.dir, {**manifest, **extra}, files, content)

    def discard(self) -> None:
        """Remove what is left of the folder (all of it unless committed), then release its lock."""
        try:
            if self.dir.exists():
                shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            self._lock.__exit__(None, None, None)
