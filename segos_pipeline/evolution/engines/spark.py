"""The Spark engine: the window read from Parquet (`spark_window.py`: by Spark, or at a store's URI by the
executors), repartitioned by a hash of `task_id`, and the kernels of `evolution/evidence.py` run on each
partition (`mapInArrow`: Arrow batches straight into polars). Executors ship back each partition's
partial pair tables (Arrow IPC) and write its tables that grow with the traces (what the round adds per
selected trace, L3's witnesses and usage, and the selected traces when the version stores them) as
Parquet to a scratch folder on the store (`scratch.py`); the driver reads the small ones back and sums
everything with the same functions as the local engine (`sum_partials`, `finish`). No rule is written here.

What the round adds per selected trace never reaches the driver: a second job reads the partitions' files
on the executors, shuffles the rows by their round bucket (a hash of trace id, `round_parts.py`) and each
task writes its buckets' files, the version's own bytes, to a folder on the store; the driver gets their
names back and the commit links (or copies) the files into the version.

The parent version is loaded once per Python worker (a module-level cache keyed by store, version and
retrieval settings), not shipped with every batch. For a store on a URI (`RemoteStore`) the executors open
it by its URI and download the parent into a cache folder of their own (`executor_snapshot`), so they share
no filesystem with the driver; for a local store they read the store's folder (one machine, or a shared
filesystem). Executors need segos installed (and the URI's fsspec provider package).
"""

from __future__ import annotations

import io
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from ...config import EngineConfig, EvolutionConfig, RetrievalConfig
from ...progress import Progress
from ...retrieval.ranker import Retriever
from ...store.remote import RemoteStore
from ...store.snapshot import Snapshot, SnapshotStore
from ...store.uri import is_uri, scheme
from ..evidence import ADDED_SCHEMA, Partial, finish, partition_evidence, sum_partials
from .base import EngineResult, TraceInput
from .replay import Replay
from .round_parts import (
    BUCKET,
    RoundParts,
    bucket_count,
    bucket_ids,
    empty_buckets,
    write_bucket,
)
from .scratch import Scratch
from .spark_window import spark_schemas, spark_window

INSTALL_HINT = (
    "the Spark engine needs PySpark and Java 17: pip install 'segos[spark]' (and a JDK 17 on PATH or "
    "JAVA_HOME)"
)
OUT_SCHEMA = "part INT, name STRING, payload BINARY"
# A partition's tables that grow with its traces, written to the job's scratch folder instead of shipped:
# what the round adds per selected trace, L3's witnesses (one row per successful trace that used a skill
# outside its query's top-N) and usage (per distinct skill and query text), and the selected traces when
# the version stores them. The rest grows with the skill pairs a partition witnesses, and is shipped.
WRITTEN = ("added", "witnesses", "usage", "experience", "holdout")
PER_TRACE = ("selected", *WRITTEN)
# what L3 and the experience stage read on the driver; `added` goes into bucket files there
DRIVER_READS = ("witnesses", "usage", "experience", "holdout")
SUM_EVERY = 64  # partial tables summed on the driver in groups of this many (summing is associative)
KEEP_VERSIONS = 2  # parent versions a Python worker keeps loaded

# per Python worker: (store, executor cache, version, retrieval) → replay
_REPLAYS: dict[tuple[str, str, str, str], Replay] = {}


def require_pyspark() -> Any:
    try:
        import pyspark  # noqa: F401
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise RuntimeError(INSTALL_HINT) from exc
    return SparkSession


IN_PROCESS_SCHEMES = ("memory",)  # fsspec filesystems that live in one process: no executor reaches them


def parent_store(parent: Snapshot) -> str:
    """Where executors open the parent's store: its URI when it was loaded from one (each executor then
    downloads the version itself), else the local store folder (one machine, or a shared filesystem)."""
    if parent.store_uri is not None:
        if scheme(parent.store_uri) in IN_PROCESS_SCHEMES:
            raise ValueError(
                f"store {parent.store_uri} lives in this process only: Spark's executors cannot open it "
                "(use a file:// folder or an object store, or the local engine)"
            )
        return parent.store_uri
    assert parent.path is not None
    return str(parent.path.parent.parent)  # STORE/versions/<id> → STORE


def executor_cache_base(configured: str | None) -> Path:
    """The cache base of this executor's Python workers for a store on a URI: the configured folder, else
    $SEGOS_CACHE, else a folder in the temp dir, per user. The workers of one machine share it: versions
    never change once published, and concurrent downloads of one version are safe (`RemoteStore.fetch`)."""
    if configured:
        return Path(configured)
    env = os.environ.get("SEGOS_CACHE")
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"segos-executor-cache-{os.getuid()}"


def executor_snapshot(store: str, version: str, cache: str | None) -> Snapshot:
    """The parent version on an executor. From a URI: the one version (not a listing of the store, not the
    trace files it references) downloaded into this executor's cache, hash-checked file by file, unless
    already there; then loaded by the local code. From a local folder: loaded there (the driver verified
    it)."""
    if is_uri(store):
        remote = RemoteStore(store, executor_cache_base(cache), with_windows=False)
        remote.fetch_published(version)
        return SnapshotStore(remote.root).load(version, verify=False)  # the download checked every hash
    return SnapshotStore(store).load(version, verify=False)


def executor_replay(store: str, version: str, retrieval: dict[str, Any], cache: str | None = None) -> Replay:
    """The parent version's replay in this worker process, loaded on first use and kept for later tasks."""
    key = (store, cache or "", version, json.dumps(retrieval, sort_keys=True))
    if key not in _REPLAYS:

        def load() -> Retriever:
            return Retriever(executor_snapshot(store, version, cache), RetrievalConfig(**retrieval))

        while len(_REPLAYS) >= KEEP_VERSIONS:  # a long-lived worker serves round after round
            _REPLAYS.pop(next(iter(_REPLAYS)))
        _REPLAYS[key] = Replay(load)
    return _REPLAYS[key]


def written_name(table: str, part: int) -> str:
    return f"{table}-{part:05d}.parquet"


def _ipc(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_ipc(buf)
    return buf.getvalue()


def partition_kernel(
    store: str,
    cache: str | None,
    version: str,
    retrieval: dict[str, Any],
    pool: bool,
    threshold: float,
    experience: tuple[float, int],
    scratch: str,
    keep_selected: bool,
    buckets: int,
):
    """The function `mapInArrow` runs once per partition: all its batches → one polars frame → kernels.

    The partial pair tables go back to the driver (small: they grow with the skill pairs a partition
    witnesses). The tables that grow with its traces (`PER_TRACE`; the selected traces only when the
    version must store them, `keep_selected`) are written to the job's `scratch` folder on the store
    (`Scratch`) as one Parquet file each, and only their sizes come back; `added` carries each row's round
    bucket (of `buckets`) for the job that writes the bucket files.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        t = time.perf_counter()
        batches = list(batches)
        rows = sum(b.num_rows for b in batches)
        if rows == 0:
            return
        arrow = pa.Table.from_batches(batches)
        input_bytes = arrow.nbytes  # what the repartition moved to this task, uncompressed
        traces = pl.from_arrow(arrow)
        assert isinstance(traces, pl.DataFrame)
        del batches, arrow
        replay = executor_replay(store, version, retrieval, cache)
        top_n = RetrievalConfig(**retrieval).top_n
        partial = partition_evidence(traces, replay, pool, threshold, top_n, *experience)
        part = TaskContext.get().partitionId()
        folder = Scratch(scratch)
        # the driver needs the traces back only when the version cannot reference them
        kept = ("selected", *DRIVER_READS) if keep_selected else WRITTEN
        partial.added = partial.added.with_columns(bucket_ids(buckets))
        written = {name: folder.write(written_name(name, part), getattr(partial, name)) for name in kept}
        names = [n for n in Partial.table_names() if n not in PER_TRACE]
        payloads = [_ipc(getattr(partial, name)) for name in names]
        metrics = {
            "rows": rows,
            "selected": partial.selected.height,
            "seconds": time.perf_counter() - t,
            **partial.seconds,
            "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "payload_bytes": sum(len(p) for p in payloads),
            "shipped": names,
            "input_arrow_bytes": input_bytes,
            "selected_parquet_bytes": written.get("selected", 0),
            "added_rows": partial.added.height,
            "written_parquet_bytes": written,
        }
        yield pa.RecordBatch.from_pydict(
            {
                "part": [part] * (len(names) + 1),
                "name": [*names, "metrics"],
                "payload": [*payloads, json.dumps(metrics).encode()],
            },
            schema=pa.schema([("part", pa.int32()), ("name", pa.string()), ("payload", pa.binary())]),
        )

    return run


def spark_session(config: EngineConfig) -> Any:
    """A session on `config.spark_master`, else $SPARK_REMOTE (Spark Connect), else local[*]."""
    session_cls = require_pyspark()
    builder = session_cls.builder.appName("segos-evolve")
    remote = os.environ.get("SPARK_REMOTE")
    if config.spark_master is None and remote:
        builder = builder.remote(remote)
    else:
        if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
            raise ValueError(f"no Java found (JAVA_HOME unset, no `java` on PATH): {INSTALL_HINT}")
        builder = builder.master(config.spark_master or "local[*]")
        # Python workers run this interpreter (so they import the same segos) unless told otherwise; the
        # SparkContext reads it from the environment when it starts.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    defaults = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"}
    for key, value in {**defaults, **config.spark_conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@dataclass
class SparkEngine:
    config: EngineConfig = field(default_factory=EngineConfig)
    session: Any = None  # an existing SparkSession (tests share one); None: made from `config`
    name: str = "spark"

    def partitions(self, rows: int) -> int:
        return max(self.config.spark_min_partitions, math.ceil(rows / self.config.spark_partition_rows))

    def window_evidence(
        self,
        parent: Snapshot,
        traces: TraceInput,
        config: EvolutionConfig,
        retrieval: RetrievalConfig,
        progress: Progress | None = None,  # the executors' work shows in the Spark UI, not here
    ) -> EngineResult:
        if parent.path is None:
            raise ValueError("the Spark engine reads the parent version from its store: commit it first")
        store = parent_store(parent)  # refused before a session starts if no executor could open it
        t0 = time.perf_counter()
        spark = self.session or spark_session(self.config)
        session_s = time.perf_counter() - t0
        window = spark_window(spark, traces, self.config.partitions)
        frame, local_files = window.frame, window.files
        # Counting the window is a job of its own: only done when the partition count or the round's
        # bucket count (a window read from files) depends on it.
        rows = window.rows
        if rows is None and (window.referenced or not self.config.partitions):
            rows = frame.count()
        n = self.config.partitions or self.partitions(rows or 0)
        buckets = bucket_count(rows or 0)
        scratch = Scratch.new(store)  # on the store: executors reach it as the driver does
        round_parts: RoundParts | None = None
        try:
            kernel = partition_kernel(
                store,
                self.config.executor_cache,
                parent.version,
                asdict(retrieval),
                config.pool_attempts,
                config.success_threshold,
                (config.experience_holdout, config.experience_chars),
                scratch.uri,
                not window.referenced,
                buckets,
            )
            mapped = frame.repartition(n, "task_id").mapInArrow(kernel, OUT_SCHEMA)
            t_job = time.perf_counter()
            by_part: dict[int, dict[str, bytes]] = {}
            collected = 0
            for row in mapped.collect():  # one job; what comes back is the partial tables and metrics
                payload = bytes(row["payload"])
                collected += len(payload)
                by_part.setdefault(row["part"], {})[row["name"]] = payload
            job_s = time.perf_counter() - t_job

            t = time.perf_counter()
            metrics = []
            running: list[Partial] = []
            no_added = pl.DataFrame(schema=ADDED_SCHEMA)  # stays on the executors (the bucket job below)
            driver_read = 0  # Parquet the driver reads back from the scratch folder
            for part in sorted(by_part):
                shipped = by_part.pop(part)
                metrics.append({"part": part, **json.loads(shipped.pop("metrics"))})
                driver_read += sum(metrics[-1]["written_parquet_bytes"].get(k, 0) for k in DRIVER_READS)
                tables = {k: pl.read_ipc(io.BytesIO(v)) for k, v in shipped.items()}
                tables |= {name: scratch.read(written_name(name, part)) for name in DRIVER_READS}
                running.append(Partial(selected=pl.DataFrame(), added=no_added, **tables))
                if len(running) >= SUM_EVERY:
                    running = [sum_partials(running)]
            if not running:  # an empty window: the kernels on an empty table give the empty tables
                empty = pl.from_arrow(frame.limit(0).toArrow())
                assert isinstance(empty, pl.DataFrame)
                running.append(partition_evidence(empty, lambda _t: [], False, 1.0, retrieval.top_n))
                table = None if window.referenced else running[0].selected
            elif not window.referenced:  # no files the version could reference: keep the traces
                parts = [scratch.read(written_name("selected", m["part"])) for m in metrics]
                driver_read += sum(m["selected_parquet_bytes"] for m in metrics)
                table = pl.concat(parts, how="vertical").sort("trace_id", maintain_order=True)
            else:
                table = None
            evidence = finish(sum_partials(running), config.surfaced_min)
            combine_s = time.perf_counter() - t
            t = time.perf_counter()
            if window.referenced:
                added_files = [written_name("added", m["part"]) for m in metrics]
                # at the store's URI for a URI store: executors write there, not in the driver's cache
                round_parts = write_round_parts(
                    spark, scratch, added_files, buckets, Scratch.new(store), max(1, n)
                )
            buckets_s = time.perf_counter() - t
        finally:
            scratch.remove()
        total = time.perf_counter() - t0
        summary = summarize(metrics, sum(m["rows"] for m in metrics), n, job_s, combine_s, spark)
        summary["session_s"] = round(session_s, 3)
        summary["collected_bytes"] = collected  # everything collect() brought to the driver
        summary["driver_read_bytes"] = driver_read
        summary["round_buckets"] = buckets if round_parts is not None else 0
        summary["round_buckets_s"] = round(buckets_s, 3)  # the bucket job, the driver waiting
        return EngineResult(
            selected=table,
            evidence=evidence,
            timings={
                "select_and_reconstruct": sum(m["select_and_reconstruct"] for m in metrics),
                "evidence": total,
                "total": total,
            },
            metrics=summary,
            files=local_files,
            window_refs=window.window_refs,
            round_parts=round_parts,
        )


# ------------------------------------------------------------------------- the round's bucket files

BUCKETS_DDL = "name STRING, bytes BIGINT"
BUCKETS_ARROW = pa.schema([("name", pa.string()), ("bytes", pa.int64())])


def read_added(scratch: str, schema: pa.Schema):
    """`mapInArrow` function: names of the partitions' `added` files in the scratch folder → their rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        folder = Scratch(scratch)
        for batch in batches:
            for name in batch.column("name").to_pylist():
                yield from folder.read(name).to_arrow().cast(schema).to_batches()

    return run


def write_buckets(folder: str):
    """`mapInArrow` function: the rows of whole buckets (the shuffle put each bucket in one task) → each
    bucket's file written to `folder`, (name, bytes) back."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        if not batches or not sum(b.num_rows for b in batches):
            return
        rows = pl.from_arrow(pa.Table.from_batches(batches))
        assert isinstance(rows, pl.DataFrame)
        del batches
        location = Scratch(folder)
        out: dict[str, list[Any]] = {"name": [], "bytes": []}
        for piece in rows.partition_by(BUCKET, maintain_order=True):
            name, size = write_bucket(location, int(piece[BUCKET][0]), piece)
            out["name"].append(name)
            out["bytes"].append(size)
        yield pa.RecordBatch.from_pydict(out, schema=BUCKETS_ARROW)

    return run


def merge_one_bucket(scratch: str, folder: str):
    """`mapInArrow` function for a round of one bucket (a window of at most `ROUND_BUCKET_TRACES`
    traces): the partitions' `added` files named in its rows, read and written as that bucket's file by
    this one task, with no shuffle (the bucket is the whole table, and small)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        names = [name for batch in batches for name in batch.column("name").to_pylist()]
        if not names:
            return
        source = Scratch(scratch)
        rows = pl.concat([source.read(name) for name in names], how="vertical")
        name, size = write_bucket(Scratch(folder), 0, rows)
        yield pa.RecordBatch.from_pydict({"name": [name], "bytes": [size]}, schema=BUCKETS_ARROW)

    return run


def write_round_parts(
    spark: Any, scratch: Scratch, added_files: list[str], buckets: int, folder: Scratch, tasks: int
) -> RoundParts:
    """The version's round bucket files, written by the executors from the partitions' `added` files:
    read (one task per few files), shuffled by bucket, each bucket written by the task that holds it;
    one bucket is written by one task reading the files, without the shuffle. The driver gets the names
    back and writes the buckets no row fell into (empty tables)."""
    written: list[str] = []
    try:
        if added_files and buckets == 1:
            listed = spark.createDataFrame(pa.table({"name": added_files})).repartition(1)
            done = listed.mapInArrow(merge_one_bucket(scratch.uri, folder.uri), BUCKETS_DDL)
            written = [row["name"] for row in done.toArrow().to_pylist()]
        elif added_files:
            spark_schema, arrow_schema = spark_schemas(spark, {**ADDED_SCHEMA, BUCKET: pl.Int32})
            listed = spark.createDataFrame(pa.table({"name": added_files}))
            rows = listed.repartition(min(tasks, len(added_files))).mapInArrow(
                read_added(scratch.uri, arrow_schema), spark_schema
            )
            done = rows.repartition(buckets, BUCKET).mapInArrow(write_buckets(folder.uri), BUCKETS_DDL)
            written = [row["name"] for row in done.toArrow().to_pylist()]
        return RoundParts(folder.uri, empty_buckets(folder, buckets, written))
    except BaseException:
        folder.remove()  # a failed job's buckets: nothing will commit them
        raise


def summarize(
    metrics: list[dict[str, Any]], rows: int, n: int, job_s: float, combine_s: float, spark: Any
) -> dict[str, Any]:
    """The Spark job's measurements: per-partition costs (what the scale plan is derived from)."""
    secs = [m["seconds"] for m in metrics] or [0.0]
    rss = [m["worker_peak_rss_mb"] for m in metrics] or [0.0]
    try:
        master = spark.sparkContext.master
    except Exception:  # Spark Connect sessions have no SparkContext
        master = os.environ.get("SPARK_REMOTE", "connect")
    return {
        "engine": "spark",
        "master": master,
        "spark_version": spark.version,
        "traces": rows,
        "partitions": n,
        "partitions_nonempty": len(metrics),
        "job_s": round(job_s, 3),
        "driver_combine_s": round(combine_s, 3),
        "partition_s_max": round(max(secs), 3),
        "partition_s_mean": round(sum(secs) / len(secs), 3),
        "partition_rows_max": max((m["rows"] for m in metrics), default=0),
        "worker_peak_rss_mb_max": round(max(rss), 1),
        "payload_bytes": sum(m["payload_bytes"] for m in metrics),
        "selected_parquet_bytes": sum(m["selected_parquet_bytes"] for m in metrics),
        "shipped_tables": sorted({name for m in metrics for name in m["shipped"]}),
        "added_rows": sum(m["added_rows"] for m in metrics),
        # what the partitions wrote to the scratch folder instead of shipping it, per table
        "written_parquet_bytes": {
            name: sum(m["written_parquet_bytes"].get(name, 0) for m in metrics) for name in PER_TRACE
        },
        "input_arrow_bytes": sum(m["input_arrow_bytes"] for m in metrics),
    }
