"""What every engine takes and returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from ...config import EvolutionConfig, RetrievalConfig
from ...progress import Progress
from ...store.snapshot import Snapshot
from .. import trace_parts
from ..evidence import WindowEvidence
from .round_parts import RoundParts
from .store_window import StoreWindow

# A window's traces: a table in memory, a Parquet file or folder of Parquet parts (path or URI), the list
# of Parquet files that make up the window (what `evolve` passes: the files it records by hash), or the
# files of a window in a store on a URI (`StoreWindow`, what `evolve` passes for a `RemoteStore`).
TraceInput = pl.DataFrame | str | Path | Sequence[Path] | StoreWindow


@dataclass
class EngineResult:
    # The round's traces after attempt selection and retrieval reconstruction, for a window given as a
    # table in memory; None for a window read from files (the engine then keeps no trace past its
    # partition: the round stores `round_parts` and references the files in `files`).
    selected: pl.DataFrame | None
    evidence: WindowEvidence
    timings: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # what the engine measured (recorded in manifests)
    files: list[Path] | None = None  # the Parquet files the window was read from (None: a table in memory)
    # The window's files as the version references them (path relative to the store, bytes, sha256), when
    # the engine read them at a URI and hashed them itself; None: the round hashes `files`.
    window_refs: list[dict[str, Any]] | None = None
    # What the round adds per selected trace, as the version's bucket files already written (a window read
    # from files); None: the version stores `selected` whole (or `evidence.added`, bucketed at the commit).
    round_parts: RoundParts | None = None


class Engine(Protocol):
    name: str

    def window_evidence(
        self,
        parent: Snapshot,
        traces: TraceInput,
        config: EvolutionConfig,
        retrieval: RetrievalConfig,
        progress: Progress | None = None,
    ) -> EngineResult:
        """`progress` hears what the engine can report from this process (the local engine: the query
        texts replayed against the parent; Spark's executors report to the Spark UI instead)."""
        ...


def parquet_files(traces: str | Path | Sequence[Path] | StoreWindow) -> list[Path]:
    """The Parquet files of a window given as a file, a folder (its `*.parquet` files at any depth, in name
    order: other files such as the quarantine are not traces), a list of files, or a window at a URI
    (downloaded into its store's cache); every file whose name carries its hash is checked against it."""
    files = _listed_files(traces)
    trace_parts.check(files)
    return files


def _listed_files(traces: str | Path | Sequence[Path] | StoreWindow) -> list[Path]:
    if isinstance(traces, StoreWindow):
        return traces.local_files()
    if isinstance(traces, str | Path):
        path = Path(traces)
        if path.is_dir():
            files = sorted(path.glob("**/*.parquet"))
            if not files:
                raise FileNotFoundError(f"no Parquet trace files in {path}")
            return files
        if not path.is_file():
            raise FileNotFoundError(f"no trace table at {path}")
        return [path]
    files = [Path(f) for f in traces]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"trace files not found: {', '.join(missing[:5])}")
    return files
