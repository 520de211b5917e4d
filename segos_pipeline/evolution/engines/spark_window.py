"""A window of traces as a Spark DataFrame, and what the version will reference of it.

Local files, folders and URIs given as text go through Spark's own Parquet reader; a table in memory
through `createDataFrame`. A window of a store on a URI (`StoreWindow`) is read on the executors with the
store's own filesystem (fsspec) and pyarrow inside `mapInArrow`, over the list of files the driver
listed, never through the driver's cache:

1. a small job hashes the files on the executors: each task reads its files whole and returns, per file,
   its size, sha256 and row count (a few bytes per file back to the driver);
2. the window's DataFrame reads the same files again, each checked against that size and sha256 as it is
   read, so the version references exactly the bytes its round read.

Why fsspec and not Spark's reader for URIs: it is the filesystem (and the credentials, and the provider
package) the store itself uses, for every scheme the store can be on (`s3://` as the store names it, not
Hadoop's `s3a://` with its connector jars and settings); and reading each file whole gives its hash, which
the version records, for one extra read of the compressed files (small beside the shuffle). Trace parts
are small (one ingest batch each), so reading a file in one task loses nothing to Spark's file splitting.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ...store.filesystem import Location, RemoteStoreError, open_location, remote_io
from .. import trace_parts
from ..traces import TRACE_SCHEMA
from .base import TraceInput, parquet_files
from .store_window import StoreWindow

HASHED_SCHEMA = pa.schema(
    [("path", pa.string()), ("bytes", pa.int64()), ("sha256", pa.string()), ("rows", pa.int64())]
)
HASHED_DDL = "path STRING, bytes BIGINT, sha256 STRING, rows BIGINT"
FILES_PER_TASK = 4  # read tasks when the kernel partition count is not fixed: a few files each


@dataclass
class SparkWindow:
    frame: Any  # the Spark DataFrame of the window's traces
    rows: int | None  # known without a job (a URI window: from the hashing job), else None
    files: list[Path] | None  # local files the version references (hashed by the round)
    window_refs: list[dict[str, Any]] | None  # files at a URI the version references, hashed here

    @property
    def referenced(self) -> bool:
        """Whether the version references the window's files (else it stores the selected traces whole)."""
        return self.files is not None or self.window_refs is not None


def read_window(spark: Any, traces: TraceInput) -> Any:
    """A Spark DataFrame of the window: a Parquet file, a folder of Parquet parts, a list of Parquet files,
    or a table in memory."""
    if isinstance(traces, pl.DataFrame):
        return spark.createDataFrame(traces.to_arrow())
    if not isinstance(traces, str | Path):
        return spark.read.parquet(*[str(f) for f in parquet_files(traces)])
    path = str(traces)
    if "://" not in path and not Path(path).exists():
        raise FileNotFoundError(f"no trace table at {path}")
    return (
        spark.read.option("pathGlobFilter", "*.parquet")  # a window folder also holds its quarantine file
        .option("recursiveFileLookup", "true")
        .parquet(path)
    )


def spark_window(spark: Any, traces: TraceInput, partitions: int | None) -> SparkWindow:
    """The window's DataFrame and what its version references: local files (a window in files), the
    hashed files at a URI (a `StoreWindow`), or nothing (a table in memory or a URI given as text)."""
    if isinstance(traces, StoreWindow):
        return uri_window(spark, traces, partitions)
    in_files = not isinstance(traces, pl.DataFrame) and "://" not in str(traces)
    local_files = parquet_files(traces) if in_files else None
    return SparkWindow(read_window(spark, traces), None, local_files, None)


# ------------------------------------------------------------------------------- a window at a URI


def read_file(location: Location, rel: str, size: int) -> bytes:
    """A file of the store, whole, refused if its size is not the one listed (files under traces/ are
    written once: a different size means something rewrote it)."""
    with remote_io("read", location.url(rel)):
        data = location.fs.cat_file(location.join(rel))
    if len(data) != size:
        raise RemoteStoreError(
            f"{location.url(rel)} is {len(data)} bytes, listed at {size} when the round started; window "
            "files are written once, so something rewrote it: rerun the round"
        )
    return data


def listed_files(batch: pa.RecordBatch) -> list[tuple[str, int]]:
    return list(zip(batch.column("path").to_pylist(), batch.column("bytes").to_pylist(), strict=True))


def hash_files(uri: str) -> Any:
    """`mapInArrow` function: (path, bytes) rows → (path, bytes, sha256, rows) rows, each file read whole."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        location = open_location(uri)
        for batch in batches:
            out: dict[str, list[Any]] = {name: [] for name in HASHED_SCHEMA.names}
            for rel, size in listed_files(batch):
                data = read_file(location, rel, size)
                out["path"].append(rel)
                out["bytes"].append(size)
                out["sha256"].append(hashlib.sha256(data).hexdigest())
                out["rows"].append(pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows)
            yield pa.RecordBatch.from_pydict(out, schema=HASHED_SCHEMA)

    return run


def read_files(uri: str, hashes: dict[str, str], schema: pa.Schema) -> Any:
    """`mapInArrow` function: (path, bytes) rows → the files' traces (TRACE_SCHEMA, as Arrow `schema`),
    each file checked against the sha256 the hashing job recorded for it."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        location = open_location(uri)
        for batch in batches:
            for rel, size in listed_files(batch):
                data = read_file(location, rel, size)
                if hashlib.sha256(data).hexdigest() != hashes[rel]:
                    raise RemoteStoreError(
                        f"{location.url(rel)} changed between two reads of one round (its sha256 differs); "
                        "window files are written once, so something rewrote it: rerun the round"
                    )
                traces = pl.read_parquet(io.BytesIO(data), schema=TRACE_SCHEMA)
                yield from traces.to_arrow().cast(schema).to_batches()

    return run


def spark_schemas(spark: Any, schema: dict[str, pl.DataType]) -> tuple[Any, pa.Schema]:
    """A polars schema as Spark sees it, and the Arrow schema Spark expects back for it (`mapInArrow`)."""
    empty = spark.createDataFrame(pl.DataFrame(schema=schema).to_arrow())
    return empty.schema, empty.toArrow().schema


def uri_window(spark: Any, window: StoreWindow, partitions: int | None) -> SparkWindow:
    """The files of a window at a URI, hashed on the executors (one small job), then read by them."""
    listed = spark.createDataFrame(
        pa.table({"path": [p for p, _ in window.files], "bytes": [b for _, b in window.files]})
    )
    # a task reads a few files: as many read tasks as kernel partitions (when fixed), at most one per file
    tasks = max(1, min(len(window.files), partitions or len(window.files) // FILES_PER_TASK))
    listed = listed.repartition(tasks)
    hashed = listed.mapInArrow(hash_files(window.uri), HASHED_DDL).toArrow()
    by_path = {row["path"]: row for row in hashed.to_pylist()}
    missing = [p for p, _ in window.files if p not in by_path]
    if missing:  # every file is read by some task, or the job failed: this is a bug, not bad input
        raise RuntimeError(f"the hashing job returned no row for {', '.join(missing[:5])}")
    refs = [{"path": p, "bytes": size, "sha256": by_path[p]["sha256"]} for p, size in window.files]
    trace_parts.check_digests({r["path"]: r["sha256"] for r in refs}, window.window)  # damaged: refused
    spark_schema, arrow_schema = spark_schemas(spark, TRACE_SCHEMA)
    frame = listed.mapInArrow(
        read_files(window.uri, {r["path"]: r["sha256"] for r in refs}, arrow_schema), spark_schema
    )
    rows = sum(int(by_path[p]["rows"]) for p, _ in window.files)
    return SparkWindow(frame, rows, None, refs)
