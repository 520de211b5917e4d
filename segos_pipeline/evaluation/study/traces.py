"""The study's traces: read from files and ingested windows, filtered by task, plus simulated traffic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ...evolution.adapters import FORMATS, iter_records
from ...evolution.adapters.common import Rejected, Skipped
from ...evolution.ingest import TraceStore
from ...evolution.trace_names import NameLookup, resolve_frame
from ...evolution.traces import TRACE_SCHEMA, TraceRecord, trace_frame
from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot, SnapshotStore
from ...text.names import SkillNames
from ..simulate import SimulationConfig, simulate
from .config import StudyConfig
from .queries import StudyQuery


@dataclass
class TraceInputs:
    """Traces read from files and ingested windows (skill ids resolved), plus simulated volume."""

    frame: pl.DataFrame
    simulate: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.frame.is_empty() and self.simulate <= 0


def parse_trace_spec(spec: str) -> tuple[Path, str]:
    """`PATH[:FORMAT]`; a suffix that is not a known format is part of the path (paths may hold ':')."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail in FORMATS and head:
        return Path(head), tail
    return Path(spec), "native"


def load_traces(
    specs: Sequence[str],
    windows: Sequence[str],
    store: SnapshotStore,
    base: Snapshot,
    queries_path: Path | None,
    n_simulate: int = 0,
) -> TraceInputs:
    """Read every `PATH[:FORMAT]` source (skill names resolved against the base version, rejected inputs
    counted, never fatal) and every already-ingested window of the store."""
    lookup = NameLookup(SkillNames(base.nodes))
    frames, sources = [], []
    for spec in specs:
        path, fmt = parse_trace_spec(spec)
        accepted: list[TraceRecord] = []
        rejected, skipped = 0, 0
        for item in iter_records(path, fmt, queries=queries_path):
            if isinstance(item, Rejected):
                rejected += 1
            elif isinstance(item, Skipped):  # a link, or a torn last line: left unread, as ingest does
                skipped += 1
            else:
                accepted.append(item)
        frame = (
            resolve_frame(trace_frame(accepted), lookup)[0] if accepted else pl.DataFrame(schema=TRACE_SCHEMA)
        )
        frames.append(frame)
        sources.append(
            {
                "source": str(path),
                "format": fmt,
                "accepted": frame.height,
                "rejected": rejected,
                "skipped": skipped,
                "simulated": int(frame["simulated"].sum()) if frame.height else 0,
            }
        )
    trace_store = TraceStore(store)
    for w in windows:
        frame = trace_store.load(w)
        frames.append(frame)
        sources.append(
            {
                "source": f"window {w}",
                "format": "ingested",
                "accepted": frame.height,
                "rejected": 0,
                "simulated": int(frame["simulated"].sum()),
            }
        )
    frame = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=TRACE_SCHEMA)
    if frame.height:
        frame = frame.unique(subset="trace_id", keep="first", maintain_order=True)
    if n_simulate > 0:
        sources.append(
            {"source": "simulator (SIMULATED)", "format": "simulated", "per_evolution": n_simulate}
        )
    return TraceInputs(frame, n_simulate, sources)


def _task_of(task_id: str, known: set[str]) -> str | None:
    """The query task a trace belongs to: its task id, or `task` of a simulated instance `task@n`."""
    if task_id in known:
        return task_id
    head = task_id.rsplit("@", 1)[0]
    return head if head in known else None


class TraceSource:
    """The traces one evolution sees: the real ones of the given tasks, plus simulated traffic generated
    against the parent (a fresh seed per round and fold, so every round sees new simulated traffic)."""

    def __init__(self, inputs: TraceInputs, queries: Sequence[StudyQuery], config: StudyConfig):
        self.inputs, self.queries, self.config = inputs, list(queries), config
        known = {q.task for q in queries}
        ids = inputs.frame["task_id"].to_list() if inputs.frame.height else []
        self.task_col = pl.Series("_task", [_task_of(t, known) for t in ids], dtype=pl.String)
        self.unmatched = int(self.task_col.null_count())

    def frame(self, parent: Snapshot, tasks: set[str], salt: int) -> pl.DataFrame:
        parts = []
        if self.inputs.frame.height:
            keep = self.task_col.is_in(list(tasks)).fill_null(False)
            parts.append(self.inputs.frame.filter(keep))
        if self.inputs.simulate > 0:
            tasks_q = [q.eval_query() for q in self.queries if q.task in tasks]
            if tasks_q:
                sim = simulate(
                    Retriever(parent, self.config.retrieval),
                    tasks_q,
                    SimulationConfig(traces=self.inputs.simulate, seed=self.config.seed * 1000 + salt),
                )
                parts.append(trace_frame(sim))
        return pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=TRACE_SCHEMA)


def trace_counts(frame: pl.DataFrame) -> dict[str, int]:
    sim = int(frame["simulated"].sum()) if frame.height else 0
    return {"traces": frame.height, "real": frame.height - sim, "simulated": sim}
