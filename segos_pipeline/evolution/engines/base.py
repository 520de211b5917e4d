"""What every engine takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from ...config import EvolutionConfig, RetrievalConfig
from ...store.snapshot import Snapshot
from ..evidence import WindowEvidence

# A window's traces: a table in memory, or a Parquet file or folder of Parquet parts (path or URI).
TraceInput = pl.DataFrame | str | Path


@dataclass
class EngineResult:
    selected: pl.DataFrame  # the round's traces after attempt selection and retrieval reconstruction
    evidence: WindowEvidence
    timings: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # what the engine measured (recorded in manifests)


class Engine(Protocol):
    name: str

    def window_evidence(
        self, parent: Snapshot, traces: TraceInput, config: EvolutionConfig, retrieval: RetrievalConfig
    ) -> EngineResult: ...
