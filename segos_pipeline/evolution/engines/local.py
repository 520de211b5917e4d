"""The local engine: the window cut into partitions by task hash, each run through the kernels in this
process, the partial tables summed. The same kernels the Spark engine runs on its executors.

A window in memory is split in memory. A window in Parquet files is never held whole: one pass reads it
file by file and spills each file's rows to their partition (uncompressed Arrow IPC in a scratch folder:
lz4 cost more time to write and read back than its smaller scratch disk was worth), then each partition
is read back and run alone, so the peak follows one partition (`local_partition_rows`) and the partial
tables, not the window. What the round adds to each selected trace is spilled per bucket as
each partition finishes and written as the version's bucket files at the end (`round_parts.py`), a bucket
at a time.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ...config import EngineConfig, EvolutionConfig, RetrievalConfig
from ...progress import Progress
from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot
from .. import trace_parts
from ..evidence import Partial, finish, partition_evidence, partition_ids, split_by_task, sum_partials
from ..traces import TRACE_SCHEMA
from .base import EngineResult, TraceInput, parquet_files
from .replay import Replay
from .round_parts import BucketSpill, RoundParts, bucket_count, round_scratch

SUM_EVERY = 16  # partial tables summed in groups of this many while partitions are run (associative)


def partition_count(rows: int, config: EngineConfig) -> int:
    if config.partitions is not None:
        return max(1, config.partitions)
    return max(1, math.ceil(rows / max(1, config.local_partition_rows)))


def window_rows(files: list[Path]) -> int:
    """Rows of a window's files, from their Parquet footers (no data read)."""
    with trace_parts.reading(files):
        return int(pl.scan_parquet(files, schema=TRACE_SCHEMA).select(pl.len()).collect().item())


def spilled_partitions(files: list[Path], partitions: int, scratch: Path) -> Iterator[pl.DataFrame]:
    """The window's partitions one at a time: one pass over the files writes every file's rows to their
    partition's folder, then each partition is read back whole (it is one partition, not the window)."""
    for i, f in enumerate(files):
        with trace_parts.reading([f]):
            table = pl.read_parquet(f, schema=TRACE_SCHEMA)
        for piece in table.with_columns(partition_ids(partitions)).partition_by("_part", as_dict=False):
            part = int(piece["_part"][0])
            folder = scratch / f"{part:05d}"
            folder.mkdir(exist_ok=True)
            piece.drop("_part").write_ipc(folder / f"{i:06d}.arrow", compression="uncompressed")
        del table
    for folder in sorted(scratch.iterdir()):
        pieces = sorted(folder.glob("*.arrow"))
        yield pl.concat([pl.read_ipc(p) for p in pieces], how="vertical", rechunk=True)
        for p in pieces:
            p.unlink()


@dataclass
class LocalEngine:
    config: EngineConfig = field(default_factory=EngineConfig)
    name: str = "local"

    def window_evidence(
        self,
        parent: Snapshot,
        traces: TraceInput,
        config: EvolutionConfig,
        retrieval: RetrievalConfig,
        progress: Progress | None = None,
    ) -> EngineResult:
        t0 = time.perf_counter()
        replay = Replay(lambda: Retriever(parent, retrieval), progress)

        def run(part: pl.DataFrame) -> Partial:
            return partition_evidence(
                part,
                replay,
                config.pool_attempts,
                config.success_threshold,
                retrieval.top_n,
                config.experience_holdout,
                config.experience_chars,
            )

        parts: RoundParts | None = None
        if isinstance(traces, pl.DataFrame):
            pieces = split_by_task(traces, partition_count(traces.height, self.config))
            partials = [run(piece) for piece in pieces]
            n, files = len(partials), None
            selected = pl.concat([p.selected for p in partials], how="vertical").sort(
                "trace_id", maintain_order=True
            )
            total, seconds = sum_partials(partials), [p.seconds for p in partials]
        else:
            files = parquet_files(traces)
            rows = window_rows(files)
            n = partition_count(rows, self.config)
            spill = BucketSpill(bucket_count(rows))
            total, seconds = self._streamed(files, n, run, spill)
            parts = spill.finish(round_scratch(parent))
            selected = None
        t = time.perf_counter()
        evidence = finish(total, config.surfaced_min)
        select_s = sum(s["select_and_reconstruct"] for s in seconds)
        evidence_s = sum(s["evidence"] for s in seconds) + time.perf_counter() - t
        total_s = time.perf_counter() - t0
        return EngineResult(
            selected=selected,
            evidence=evidence,
            timings={
                "select_and_reconstruct": select_s,
                "evidence": evidence_s,
                # reading the window: counting its rows, the spill pass and reading partitions back
                "read": max(0.0, total_s - select_s - evidence_s),
                "total": total_s,
            },
            metrics={"engine": "local", "partitions": n, **({"files": len(files)} if files else {})},
            files=files,
            round_parts=parts,
        )

    def _streamed(
        self, files: list[Path], n: int, run, spill: BucketSpill
    ) -> tuple[Partial, list[dict[str, float]]]:
        """Run the partitions of a window in files one by one, keeping only their partial tables; what
        each adds per selected trace goes to `spill`."""
        seconds: list[dict[str, float]] = []
        running: list[Partial] = []

        def keep(partial: Partial) -> None:
            nonlocal running
            partial.selected = partial.selected.clear()  # the traces are done with: `added` holds the rest
            spill.add(partial.added)
            partial.added = partial.added.clear()  # in the spill: the bucket files are written from there
            seconds.append(partial.seconds)
            running.append(partial)
            if len(running) >= SUM_EVERY:
                running = [sum_partials(running)]

        if n == 1:  # the window is one partition: read whole (its files were checked by `parquet_files`)
            with trace_parts.reading(files):
                window = pl.scan_parquet(files, schema=TRACE_SCHEMA).collect()
            keep(run(window))
        else:
            with tempfile.TemporaryDirectory(prefix="segos-partitions-") as tmp:
                for part in spilled_partitions(files, n, Path(tmp)):
                    keep(run(part))
        if not running:  # a window of empty files: the kernels on an empty table give the empty tables
            keep(run(pl.DataFrame(schema=TRACE_SCHEMA)))
        return sum_partials(running), seconds
