"""A Spark job's scratch folder on the store: where executors write per-partition tables for the driver.

Tables as large as the window (what a round adds to each selected trace; the selected traces themselves
when the version stores them) do not go back through `collect()`: each partition writes its own Parquet
file here and sends back only the name and size. The folder is `STORE/.spark/<job>/` on the store the
round runs on: beside a local store (executors on the same machine or a shared filesystem), or at the
store's URI (executors that share no filesystem with the driver). Both are opened through fsspec, so the
executors' code is one. The driver removes the folder when the round has read it; a driver killed before
that leaves it behind (nothing lists `.spark/`: it is never read as a version or a window).
"""

from __future__ import annotations

import contextlib
import io
import uuid
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ...store.filesystem import Location, make_parent, open_location, remote_io
from ...store.uri import is_uri

SCRATCH = ".spark"


def put_bytes(location: Location, data: bytes, target: str) -> None:
    """Write `data` to `target` so that a reader sees the whole file or none of it: one PUT on an object
    store, a temporary name and a rename where renames are atomic (`filesystem.put_whole`'s rule)."""
    make_parent(location, target)
    if not location.renames_atomically:
        location.fs.pipe_file(target, data)
        return
    tmp = f"{target}.{uuid.uuid4().hex}.tmp"
    location.fs.pipe_file(tmp, data)
    location.fs.mv(tmp, target)


@dataclass(frozen=True)
class Scratch:
    uri: str  # the folder, as a URI (`file://` for a local store)

    @classmethod
    def new(cls, store: str) -> Scratch:
        """A fresh folder under `store` (a local store folder or a store URI)."""
        base = store.rstrip("/") if is_uri(store) else Path(store).resolve().as_uri()
        return cls(f"{base}/{SCRATCH}/{uuid.uuid4().hex}")

    def write(self, name: str, table: pl.DataFrame) -> int:
        """Write `table` as Parquet file `name`, whole (readers see all of it or nothing); its bytes."""
        buf = io.BytesIO()
        table.write_parquet(buf)
        return self.put(name, buf.getvalue())

    def put(self, name: str, data: bytes) -> int:
        """Write `data` as file `name`, whole; its bytes."""
        location = open_location(self.uri)
        with remote_io("write", location.url(name)):
            put_bytes(location, data, location.join(name))
        return len(data)

    def read(self, name: str) -> pl.DataFrame:
        location = open_location(self.uri)
        with remote_io("read", location.url(name)):
            return pl.read_parquet(io.BytesIO(location.fs.cat_file(location.join(name))))

    def remove(self) -> None:
        location = open_location(self.uri)
        with contextlib.suppress(Exception):  # best effort: what is left is never listed or read
            location.fs.rm(location.path, recursive=True)
