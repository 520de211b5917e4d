"""Pipeline stages as separate functions, for orchestrators that run one SPEC §2 stage per step.

`build_cold_start` and `evolve` run a whole cold start / round in one call; an orchestrator (the Dagster
code location in `assets/`) wants each stage's output on its own so it can be checked and shown. The
stage functions are `build_cold_start`'s and `evolve`'s own (re-exported below), so a version committed
stage by stage is the version `segos build` / `segos evolve` would have written
(`tests/integration/test_dagster.py` asserts this, same version id for a cold start). Never imports Dagster.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

# The stages live with the cold start and the round themselves; re-exported here for orchestrators.
from ..evolution.round import (
    RoundState,
    commit_round,
    experience_stage,
    l1_stage,
    l2_stage,
    l3_stage,
    prepare_round,
)
from ..graph.build import (
    GraphTables,
    commit_cold_start,
    library_fingerprint,
    parse_stage,
    require_skills,
    semantic_stage,
)
from ..graph.transition import row_sums, transition_matrix
from ..retrieval.ranker import warm_caches

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
    "GraphTables",
    "RoundState",
    "commit_cold_start",
    "commit_round",
    "content_hash",
    "duplicate_ids",
    "experience_stage",
    "l1_stage",
    "l2_stage",
    "l3_stage",
    "library_fingerprint",
    "parse_stage",
    "prepare_round",
    "require_skills",
    "semantic_stage",
    "transition_health",
    "transition_matrix",
    "warm_caches",
]
