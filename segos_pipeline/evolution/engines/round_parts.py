"""A round's per-trace table (what it adds to each selected trace) as the bucket files its version stores.

An evolved version read from a window of files stores `round-NNNNN.parquet` (`retrieval/round_traces.py`):
bucket b holds the `added` rows (ADDED_SCHEMA) of the selected traces whose `hash(trace_id) % B == b`,
sorted by trace id, written with the fixed settings of `bucket_bytes`; every bucket is written, an empty one
as an empty table. B = ceil(window rows / ROUND_BUCKET_TRACES), at least 1 (`bucket_count`).

Why this layout. The buckets depend on the window only (its row count and its trace ids), never on how an
engine cut the window into partitions (a hash of `task_id`, a count that is an engine setting), so the
local engine and the Spark engine write the same files byte for byte. A bucket holds at most about
`ROUND_BUCKET_TRACES` rows (tens of MB): whoever writes one (a local process, a Spark task) holds one
bucket, and no process ever holds the whole table: the Spark driver only moves the files into the version.

The files are written to a scratch folder on the store before the commit (`RoundParts`) and moved or
linked into the staged version by the commit (`PlacedPart.write_parquet`, called by the store's writer as
for any extra table); the folder is removed after the commit, or when the round is dropped uncommitted.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ...retrieval.round_traces import round_part_name
from ...store.filesystem import get_whole, open_location, remote_io
from ...store.snapshot import Snapshot
from ..evidence import ADDED_SCHEMA
from .scratch import Scratch

# Window traces per round bucket: a bucket holds at most this many rows (tens of MB), whatever the
# window's size, so that whoever writes or reads one holds one bucket. Part of the version's bytes (the
# bucket count follows from it): both engines read it here.
ROUND_BUCKET_TRACES = 1_000_000
BUCKET = "_bucket"  # the bucket of a row while it travels between an engine's processes
# Fixed writer settings: part of the bytes that both engines must produce alike (polars' own defaults
# could change between releases; these are stated once).
ROW_GROUP_ROWS = 128 * 1024


def bucket_count(window_rows: int) -> int:
    """Buckets of a round over a window of `window_rows` traces (selected ≤ window: a bucket stays small)."""
    return max(1, math.ceil(window_rows / ROUND_BUCKET_TRACES))


def bucket_ids(buckets: int) -> pl.Expr:
    """Bucket of each row: a hash of its trace id (seed fixed, so every process computes the same)."""
    return (pl.col("trace_id").hash(seed=0) % buckets).cast(pl.Int32).alias(BUCKET)


def bucket_bytes(rows: pl.DataFrame) -> bytes:
    """One bucket file: the rows (ADDED_SCHEMA, any order, extra columns dropped) in trace-id order."""
    table = rows.select(list(ADDED_SCHEMA)).cast(ADDED_SCHEMA).sort("trace_id").rechunk()
    buf = io.BytesIO()
    table.write_parquet(buf, compression="zstd", statistics=True, row_group_size=ROW_GROUP_ROWS)
    return buf.getvalue()


def split_buckets(added: pl.DataFrame, buckets: int) -> Iterable[tuple[int, pl.DataFrame]]:
    """(bucket, its rows) of an `added` table, for the buckets that have rows."""
    if added.height == 0:
        return []
    keyed = added.with_columns(bucket_ids(buckets)) if BUCKET not in added.columns else added
    return (
        (int(piece[BUCKET][0]), piece.drop(BUCKET))
        for piece in keyed.partition_by(BUCKET, maintain_order=True)
    )


def round_scratch(parent: Snapshot) -> Scratch:
    """A fresh scratch folder beside the parent's store (a commit then links its files, no copy), or in the
    temp dir for a parent that is not stored."""
    if parent.path is not None:
        return Scratch.new(str(parent.path.parent.parent))  # STORE/versions/<id> → STORE
    return Scratch(Path(tempfile.mkdtemp(prefix="segos-round-")).resolve().as_uri())


def _remove(uri: str) -> None:
    Scratch(uri).remove()


@dataclass
class RoundParts:
    """A round's bucket files, written and not yet committed: in folder `uri` (a scratch folder on the
    store, `file://` for a local store), one name per bucket in bucket order."""

    uri: str
    names: list[str]
    _finalizer: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # dropped without a commit (a round evaluated, not stored; a failed commit): the folder goes too
        self._finalizer = weakref.finalize(self, _remove, self.uri)

    def record(self) -> dict[str, Any]:
        """What another process needs to commit them (`from_record`); this process no longer removes them."""
        self._finalizer.detach()
        return {"uri": self.uri, "names": list(self.names)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RoundParts:
        return cls(record["uri"], list(record["names"]))

    def placed(self) -> dict[str, PlacedPart]:
        """The files as the store's writer takes extra tables: name → something with `write_parquet`."""
        return {name: PlacedPart(self.uri, name) for name in self.names}

    def read(self) -> pl.DataFrame:
        """All buckets as one table in trace-id order (small rounds and tests: the point of the buckets is
        that a large round is never read whole)."""
        frames = [Scratch(self.uri).read(name) for name in self.names]
        table = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=ADDED_SCHEMA)
        return table.sort("trace_id")

    def remove(self) -> None:
        self._finalizer()


@dataclass(frozen=True)
class PlacedPart:
    """A bucket file in a scratch folder that the version's writer puts into the staged version: hard
    linked when both are on one local filesystem (no byte moves), else copied file to file (never held
    whole). The writer hashes it for the manifest as it does every file."""

    uri: str
    name: str

    def write_parquet(self, target: Path) -> None:
        location = open_location(self.uri)
        source = location.join(self.name)
        if location.renames_atomically:
            with contextlib.suppress(OSError):
                os.link(source, target)
                return
            shutil.copyfile(source, target)
            return
        with remote_io("read", location.url(self.name)):
            get_whole(location, source, target)


def write_bucket(folder: Scratch, bucket: int, rows: pl.DataFrame) -> tuple[str, int]:
    """Write bucket `bucket` of `rows` into `folder`: (its name, its bytes). Not hashed here: the version's
    writer hashes every file it takes in."""
    name = round_part_name(bucket)
    return name, folder.put(name, bucket_bytes(rows))


def empty_buckets(folder: Scratch, buckets: int, written: Iterable[str]) -> list[str]:
    """Write the buckets no row fell into (as empty tables); every bucket's name, in bucket order."""
    have = set(written)
    empty = pl.DataFrame(schema=ADDED_SCHEMA)
    for b in range(buckets):
        if round_part_name(b) not in have:
            write_bucket(folder, b, empty)
    return [round_part_name(b) for b in range(buckets)]


def buckets_of_table(folder: Scratch, added: pl.DataFrame, buckets: int) -> RoundParts:
    """The bucket files of an `added` table held in memory (a round whose engine returned it whole)."""
    written = [write_bucket(folder, b, rows)[0] for b, rows in split_buckets(added, buckets)]
    return RoundParts(folder.uri, empty_buckets(folder, buckets, written))


class BucketSpill:
    """The local engine's way to the bucket files while it runs partitions one at a time: each partition's
    rows are spilled per bucket (Arrow IPC in a local folder), then each bucket is read back and written
    alone. Peak: one partition's `added` rows, then one bucket."""

    def __init__(self, buckets: int):
        self.buckets = buckets
        self._tmp = tempfile.TemporaryDirectory(prefix="segos-round-buckets-")
        self.dir = Path(self._tmp.name)
        self._parts = 0

    def add(self, added: pl.DataFrame) -> None:
        for b, rows in split_buckets(added, self.buckets):
            folder = self.dir / f"{b:05d}"
            folder.mkdir(exist_ok=True)
            rows.write_ipc(folder / f"{self._parts:06d}.arrow", compression="lz4")
        self._parts += 1

    def finish(self, folder: Scratch) -> RoundParts:
        try:
            written = []
            for bucket_dir in sorted(self.dir.iterdir()):
                pieces = sorted(bucket_dir.glob("*.arrow"))
                rows = pl.concat([pl.read_ipc(p) for p in pieces], how="vertical")
                written.append(write_bucket(folder, int(bucket_dir.name), rows)[0])
                shutil.rmtree(bucket_dir)
            return RoundParts(folder.uri, empty_buckets(folder, self.buckets, written))
        finally:
            self._tmp.cleanup()
