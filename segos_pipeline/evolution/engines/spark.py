"""The Spark engine: the window read from Parquet by Spark, repartitioned by a hash of `task_id`, and the
kernels of `evolution/evidence.py` run on each partition (`mapInArrow`: Arrow batches straight into
polars). Executors ship back each partition's partial tables (Arrow IPC) and write its selected traces as
Parquet beside the store (read back only for a window given as a table in memory: a window read from
files is referenced by the version, with the `added` table the partitions shipped); the driver sums the
partial tables with the same functions as the local engine (`sum_partials`, `finish`). No rule is
written here.

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
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from ...config import EngineConfig, EvolutionConfig, RetrievalConfig
from ...retrieval.ranker import Retriever
from ...store.remote import RemoteStore
from ...store.snapshot import Snapshot, SnapshotStore
from ...store.uri import is_uri
from ..evidence import Partial, finish, partition_evidence, sum_partials
from .base import EngineResult, TraceInput, parquet_files
from .replay import Replay

INSTALL_HINT = (
    "the Spark engine needs PySpark and Java 17: pip install 'segos[spark]' (and a JDK 17 on PATH or "
    "JAVA_HOME)"
)
OUT_SCHEMA = "part INT, name STRING, payload BINARY"
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


def parent_store(parent: Snapshot) -> str:
    """Where executors open the parent's store: its URI when it was loaded from one (each executor then
    downloads the version itself), else the local store folder (one machine, or a shared filesystem)."""
    if parent.store_uri is not None:
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


def _ipc(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_ipc(buf)
    return buf.getvalue()


def _from_ipc(payload: bytes) -> pl.DataFrame:
    return pl.read_ipc(io.BytesIO(payload))


def partition_kernel(
    store: str,
    cache: str | None,
    version: str,
    retrieval: dict[str, Any],
    pool: bool,
    threshold: float,
    scratch: str,
):
    """The function `mapInArrow` runs once per partition: all its batches → one polars frame → kernels.

    The partial evidence tables go back to the driver (small); the partition's selected traces (as large
    as the window) are written to `scratch` (when given) as one Parquet file per partition, not sent
    through the driver.
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
        partial = partition_evidence(traces, replay, pool, threshold, RetrievalConfig(**retrieval).top_n)
        part = TaskContext.get().partitionId()
        selected_bytes = 0
        if scratch:  # the driver needs the traces back only when the version cannot reference them
            selected_file = Path(scratch) / f"selected-{part:05d}.parquet"
            partial.selected.write_parquet(selected_file)
            selected_bytes = selected_file.stat().st_size
        names = [n for n in Partial.table_names() if n != "selected"]
        payloads = [_ipc(getattr(partial, name)) for name in names]
        metrics = {
            "rows": rows,
            "selected": partial.selected.height,
            "seconds": time.perf_counter() - t,
            **partial.seconds,
            "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "payload_bytes": sum(len(p) for p in payloads),
            "input_arrow_bytes": input_bytes,
            "selected_parquet_bytes": selected_bytes,
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


@dataclass
class SparkEngine:
    config: EngineConfig = field(default_factory=EngineConfig)
    session: Any = None  # an existing SparkSession (tests share one); None: made from `config`
    name: str = "spark"

    def partitions(self, rows: int) -> int:
        return max(self.config.spark_min_partitions, math.ceil(rows / self.config.spark_partition_rows))

    def window_evidence(
        self, parent: Snapshot, traces: TraceInput, config: EvolutionConfig, retrieval: RetrievalConfig
    ) -> EngineResult:
        if parent.path is None:
            raise ValueError("the Spark engine reads the parent version from its store: commit it first")
        t0 = time.perf_counter()
        spark = self.session or spark_session(self.config)
        session_s = time.perf_counter() - t0
        frame = read_window(spark, traces)
        # A window of local files is referenced by the version; one in memory or at a URI is stored whole.
        in_files = not isinstance(traces, pl.DataFrame) and "://" not in str(traces)
        local_files = parquet_files(traces) if in_files else None
        # Counting the window is a job of its own: only done when the partition count depends on it.
        n = self.config.partitions or self.partitions(frame.count())
        store_root = parent.path.parent.parent  # STORE/versions/<id> → STORE
        scratch = store_root / ".spark" / uuid.uuid4().hex  # on the store: executors must reach it
        scratch.mkdir(parents=True)
        try:
            kernel = partition_kernel(
                parent_store(parent),
                self.config.executor_cache,
                parent.version,
                asdict(retrieval),
                config.pool_attempts,
                config.success_threshold,
                str(scratch) if local_files is None else "",
            )
            mapped = frame.repartition(n, "task_id").mapInArrow(kernel, OUT_SCHEMA)
            t_job = time.perf_counter()
            by_part: dict[int, dict[str, bytes]] = {}
            for row in mapped.collect():  # one job; what comes back is the partial tables and metrics
                by_part.setdefault(row["part"], {})[row["name"]] = bytes(row["payload"])
            job_s = time.perf_counter() - t_job

            t = time.perf_counter()
            metrics = []
            running: list[Partial] = []
            for part in sorted(by_part):
                tables = by_part.pop(part)
                metrics.append({"part": part, **json.loads(tables.pop("metrics"))})
                selected = pl.DataFrame()  # read below, all partitions at once
                running.append(Partial(selected=selected, **{k: _from_ipc(v) for k, v in tables.items()}))
                if len(running) >= SUM_EVERY:
                    running = [sum_partials(running)]
            files = sorted(scratch.glob("selected-*.parquet"))
            if not running:  # an empty window: the kernels on an empty table give the empty tables
                empty = pl.from_arrow(read_window(spark, traces).limit(0).toArrow())
                assert isinstance(empty, pl.DataFrame)
                running.append(partition_evidence(empty, lambda _t: [], False, 1.0, retrieval.top_n))
                table = running[0].selected if local_files is None else None
            elif local_files is None:  # no local files the version could reference: keep the traces
                table = pl.concat([pl.read_parquet(f) for f in files], how="vertical")
                table = table.sort("trace_id", maintain_order=True)
            else:
                table = None
            evidence = finish(sum_partials(running), config.surfaced_min)
            combine_s = time.perf_counter() - t
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        total = time.perf_counter() - t0
        summary = summarize(metrics, sum(m["rows"] for m in metrics), n, job_s, combine_s, spark)
        summary["session_s"] = round(session_s, 3)
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
        )


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
        "input_arrow_bytes": sum(m["input_arrow_bytes"] for m in metrics),
    }
