"""In-memory evolution of the factorial cells from one trace frame, as draft snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ...evolution.round import RoundState, draft_snapshot, evolve_round
from ...store.snapshot import Snapshot
from .config import StudyConfig, cell_name
from .traces import trace_counts


def _draft(parent: Snapshot, state: RoundState, label: str) -> Snapshot:
    snap = draft_snapshot(parent, state.nodes, state.tokens, state.edges, state.experience)
    snap.version = label
    snap.manifest = {**snap.manifest, "round": state.round}  # so a next round numbers itself right
    return snap


def _counters_summary(state: RoundState) -> dict[str, Any]:
    c = state.counters
    return {
        "traces": c.get("traces", {}),
        "induced": {r: v.get("induced", 0) for r, v in c.get("l1", {}).items() if isinstance(v, dict)},
        "l2": {k: v for k, v in c.get("l2", {}).items() if isinstance(v, int | float)},
        "descriptions_committed": c.get("l3", {}).get("committed", 0),
    }


@dataclass
class Evolved:
    snapshot: Snapshot
    counters: dict[str, Any]
    traces: dict[str, int]


def evolve_cells(
    parent: Snapshot,
    traces: pl.DataFrame,
    config: StudyConfig,
    cells: Sequence[tuple[bool, bool, bool]],
    label: str,
) -> dict[str, Evolved]:
    """One in-memory round per factorial cell from the same traces (the static cell is the parent)."""
    out = {}
    counts = trace_counts(traces)
    for cell in cells:
        name = cell_name(cell)
        if not any(cell):
            out[name] = Evolved(parent, {}, counts)
            continue
        layers = config.evolution.with_overrides(
            l1_topology=cell[0], l2_weights=cell[1], l3_descriptions=cell[2]
        )
        state = evolve_round(parent, traces, layers, config.retrieval)
        out[name] = Evolved(_draft(parent, state, f"{label}:{name}"), _counters_summary(state), counts)
    return out
