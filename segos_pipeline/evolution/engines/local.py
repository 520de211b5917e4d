"""The local engine: the window cut into partitions by task hash, each run through the kernels in this
process, the partial tables summed. The same kernels the Spark engine runs on its executors."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ...config import EngineConfig, EvolutionConfig, RetrievalConfig
from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot
from ..evidence import Partial, combine, partition_evidence, split_by_task
from .base import EngineResult, TraceInput
from .replay import Replay


def read_traces(traces: TraceInput) -> pl.DataFrame:
    """A trace table from memory, a Parquet file, or a folder of Parquet parts (read in name order)."""
    if isinstance(traces, pl.DataFrame):
        return traces
    path = Path(traces)
    if path.is_dir():
        return pl.read_parquet(str(path / "**" / "*.parquet"))
    return pl.read_parquet(str(traces))


def partition_count(rows: int, config: EngineConfig) -> int:
    if config.partitions is not None:
        return max(1, config.partitions)
    return max(1, math.ceil(rows / max(1, config.local_partition_rows)))


@dataclass
class LocalEngine:
    config: EngineConfig = field(default_factory=EngineConfig)
    name: str = "local"

    def window_evidence(
        self, parent: Snapshot, traces: TraceInput, config: EvolutionConfig, retrieval: RetrievalConfig
    ) -> EngineResult:
        t0 = time.perf_counter()
        table = read_traces(traces)
        replay = Replay(lambda: Retriever(parent, retrieval))
        parts = split_by_task(table, partition_count(table.height, self.config))
        partials: list[Partial] = [
            partition_evidence(part, replay, config.pool_attempts, config.success_threshold) for part in parts
        ]
        t = time.perf_counter()
        selected = pl.concat([p.selected for p in partials], how="vertical").sort(
            "trace_id", maintain_order=True
        )
        evidence = combine(partials, config.surfaced_min)
        combine_s = time.perf_counter() - t
        return EngineResult(
            selected=selected,
            evidence=evidence,
            timings={
                "select_and_reconstruct": sum(p.seconds["select_and_reconstruct"] for p in partials),
                "evidence": sum(p.seconds["evidence"] for p in partials) + combine_s,
                "total": time.perf_counter() - t0,
            },
            metrics={"engine": "local", "partitions": len(parts)},
        )
