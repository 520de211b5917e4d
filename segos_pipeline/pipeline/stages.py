"""Pipeline stages as separate functions, for orchestrators that run one SPEC §2 stage per step.

`build_cold_start` and `evolve` run a whole cold start / round in one call; an orchestrator (the Dagster
code location in `assets/`) wants each stage's output on its own so it can be stored, checked and shown.
The round's stage functions are `evolve`'s own (re-exported below); the cold-start ones compose the same
pieces as `build_cold_start`, so a version committed stage by stage is the version `segos build` /
`segos evolve` would have written (`tests/test_dagster.py` asserts this for a round). Never imports Dagster.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import BuildConfig, RetrievalConfig
from ..evaluation.replay import load_queries, replay

# The round's stages live with the round itself; re-exported here for orchestrators.
from ..evolution.round import (
    RoundState,
    commit_round,
    experience_stage,
    l1_stage,
    l2_stage,
    l3_stage,
    prepare_round,
)
from ..graph import build
from ..graph.build import GraphTables
from ..graph.parsing import ParsedLibrary
from ..graph.semantic_edges import SemanticStats, semantic_edges
from ..graph.transition import row_sums
from ..retrieval.ranker import Retriever, warm_caches
from ..store.snapshot import Snapshot, SnapshotStore
from ..text.lexicon import Signature

# ------------------------------------------------------------------------------------------- cold start


def semantic_stage(
    nodes: pl.DataFrame, tokens: pl.DataFrame, config: BuildConfig
) -> tuple[pl.DataFrame, SemanticStats]:
    """Semantic kNN edges of a tokenised node table (the middle of `build.graph_tables`)."""
    return semantic_edges(nodes["id"], Signature.of(tokens, nodes.height).matrix, config.graph)


def stats_frame(stats: SemanticStats) -> pl.DataFrame:
    """SemanticStats as a one-row table, so it can travel next to the edge table as Parquet."""
    return pl.DataFrame([stats.as_dict()])


def stats_from_frame(frame: pl.DataFrame) -> SemanticStats:
    return SemanticStats(**{k: int(v) for k, v in frame.row(0, named=True).items()})


def commit_cold_start(
    store: SnapshotStore,
    *,
    library_root: Path,
    nodes: pl.DataFrame,
    tokens: pl.DataFrame,
    report: pl.DataFrame,
    edges: pl.DataFrame,
    stats: SemanticStats,
    transition: sp.csr_matrix,
    config: BuildConfig,
    timings: dict[str, float] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Commit a cold-start version from stage outputs, exactly as `build_cold_start` writes one."""
    parsed = ParsedLibrary(nodes=nodes, report=report, root=Path(library_root))
    tables = GraphTables(nodes, tokens, edges, transition, stats)
    manifest = build.commit_cold_start(store, parsed, tables, config, timings or {}, extra)
    warm_caches(store.load(manifest["version"]))  # as `segos build` does: the first query pays nothing
    return manifest


# ----------------------------------------------------------------------------------------- inspection


def transition_health(transition: sp.csr_matrix, tol: float = 1e-9) -> dict[str, int]:
    """Rows of the operator that are neither stochastic (sum 1) nor empty (teleporting rows)."""
    sums = row_sums(transition)
    empty = np.isclose(sums, 0.0, atol=tol)
    stochastic = np.isclose(sums, 1.0, atol=1e-6)
    return {
        "rows": int(transition.shape[0]),
        "rows_empty": int(empty.sum()),
        "rows_stochastic": int(stochastic.sum()),
        "rows_bad": int((~(empty | stochastic)).sum()),
        "negative_entries": int((transition.data < 0).sum()),
        "nnz": int(transition.nnz),
    }


def duplicate_ids(nodes: pl.DataFrame) -> list[str]:
    return nodes.group_by("id").len().filter(pl.col("len") > 1)["id"].sort().to_list()


def replay_metrics(
    snapshot: Snapshot, queries: Path, k: int = 5, retrieval: RetrievalConfig | None = None
) -> dict[str, Any]:
    """Replay a query file against a version (the numbers `segos replay --json` prints)."""
    return replay(Retriever(snapshot, retrieval or RetrievalConfig()), load_queries(queries), k=k)


def content_hash(obj: Any) -> str:
    """A stable content hash of a table, a sparse matrix or JSON-able data (for data versions)."""
    digest = hashlib.sha256()
    if isinstance(obj, pl.DataFrame):
        digest.update(json.dumps([(n, str(t)) for n, t in obj.schema.items()]).encode())
        if obj.height:
            # Row hashes are stable for one polars version; order-sensitive on purpose (tables are sorted).
            digest.update(obj.hash_rows(seed=0).to_numpy().tobytes())
    elif sp.issparse(obj):
        csr = sp.csr_matrix(obj)
        csr.sort_indices()
        digest.update(repr(csr.shape).encode())
        for part in (csr.indptr, csr.indices, csr.data):
            digest.update(np.ascontiguousarray(part).tobytes())
    elif isinstance(obj, dict) and obj and all(isinstance(v, pl.DataFrame) for v in obj.values()):
        for name in sorted(obj):
            digest.update(name.encode())
            digest.update(content_hash(obj[name]).encode())
    else:
        digest.update(json.dumps(obj, sort_keys=True, default=str).encode())
    return digest.hexdigest()


__all__ = [
    "RoundState",
    "commit_cold_start",
    "commit_round",
    "content_hash",
    "duplicate_ids",
    "experience_stage",
    "l1_stage",
    "l2_stage",
    "l3_stage",
    "prepare_round",
    "replay_metrics",
    "semantic_stage",
    "stats_frame",
    "stats_from_frame",
    "transition_health",
]
