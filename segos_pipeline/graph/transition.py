"""The reverse-aware transition operator (SPEC §5) as a row-stochastic CSR matrix.

A→[u,v] += w(u→v) and A←[v,u] += γ_r·w(u→v) for every traversable relation r; T = RowNorm(A→ + A←).
Rows without out-mass stay empty; PPR sends their mass back to the personalisation vector (teleport).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import TRAVERSABLE, TransitionConfig


def edge_indices(edges: pl.DataFrame, node_ids: pl.Series) -> pl.DataFrame:
    """The edge table with integer endpoints (row order of the node table); unknown endpoints dropped."""
    index = pl.DataFrame({"id": node_ids, "i": pl.int_range(len(node_ids), dtype=pl.Int64, eager=True)})
    return edges.join(index.rename({"id": "src", "i": "u"}), on="src", how="inner").join(
        index.rename({"id": "dst", "i": "v"}), on="dst", how="inner"
    )


def transition_matrix(
    edges: pl.DataFrame, node_ids: pl.Series, config: TransitionConfig | None = None, reverse: bool = True
) -> sp.csr_matrix:
    """Row-normalised operator over all traversable relations; `reverse=False` gives forward-only."""
    config = config or TransitionConfig()
    n = len(node_ids)
    gamma = pl.DataFrame({"relation": list(config.gamma), "gamma": list(config.gamma.values())})
    e = (
        edge_indices(edges.filter(pl.col("relation").is_in(TRAVERSABLE) & (pl.col("weight") > 0)), node_ids)
        .join(gamma, on="relation", how="left")
        .with_columns(pl.col("gamma").fill_null(0.0))
    )
    u, v = e["u"].to_numpy(), e["v"].to_numpy()
    w = e["weight"].to_numpy().astype(np.float64)
    if reverse:
        rows = np.concatenate([u, v])
        cols = np.concatenate([v, u])
        data = np.concatenate([w, e["gamma"].to_numpy() * w])
    else:
        rows, cols, data = u, v, w
    keep = data > 0
    a = sp.csr_matrix((data[keep], (rows[keep], cols[keep])), shape=(n, n), dtype=np.float64)
    a.sum_duplicates()
    return row_normalize(a)


def recorded_transition(edges: pl.DataFrame, node_ids: pl.Series, manifest: dict[str, Any]) -> sp.csr_matrix:
    """`transition_matrix` with the γ a version's manifest records (the defaults where it records none)."""
    return transition_matrix(
        edges, node_ids, TransitionConfig(**manifest.get("config", {}).get("transition", {}))
    )


def row_normalize(a: sp.csr_matrix) -> sp.csr_matrix:
    out = a.tocsr(copy=True)
    sums = np.asarray(out.sum(axis=1)).ravel()
    # Divide rather than multiply by a reciprocal: 1/sum overflows for subnormal row sums.
    out.data /= np.repeat(sums, np.diff(out.indptr))
    out.eliminate_zeros()
    out.sort_indices()
    return out


def row_sums(t: sp.csr_matrix) -> np.ndarray:
    return np.asarray(t.sum(axis=1)).ravel()
