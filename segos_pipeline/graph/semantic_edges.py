"""Deterministic token-Jaccard kNN edges (SPEC §4), as blocked sparse-matrix products.

Intersections come from X·Xᵀ on the binary node × token matrix, one block of rows at a time; blocks are
sized by an upper bound on the product's non-zeros so peak memory stays bounded on any library size.
There is no Python loop over pairs of skills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import SEMANTIC, GraphConfig
from .edges import EDGE_SCHEMA

# Upper bound of candidate pairs held at once (~16 bytes each in the block's product and its Jaccard).
_PAIRS_PER_BLOCK = 8_000_000


@dataclass(frozen=True)
class SemanticStats:
    directed_edges: int
    unordered_pairs: int
    mutual_pairs: int
    max_degree: int  # in the undirected pair graph, as the paper reports it
    isolated: int  # skills with no semantic neighbour (no shared signature token)
    df_cap: int
    capped_tokens: int  # tokens skipped in the join because their document frequency exceeds df_cap

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def df_cap(n_nodes: int, config: GraphConfig) -> int:
    return max(config.df_cap_min, int(config.df_cap_fraction * n_nodes))


def _row_blocks(cost: np.ndarray, budget: int, max_rows: int) -> list[tuple[int, int]]:
    """Split rows into consecutive blocks whose summed cost stays under budget (a row alone may exceed)."""
    blocks, start, n = [], 0, len(cost)
    cum = np.concatenate([[0], np.cumsum(cost, dtype=np.int64)])
    while start < n:
        stop = int(np.searchsorted(cum, cum[start] + budget, side="right")) - 1
        stop = min(max(stop, start + 1), start + max_rows, n)
        blocks.append((start, stop))
        start = stop
    return blocks


def _block_jaccard(inter: sp.csr_matrix, offset: int, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Entries of one block of X·Xᵀ as (local row, col, Jaccard), self-pairs zeroed, in CSR order."""
    lengths = np.diff(inter.indptr)
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    cols = inter.indices.astype(np.int64)
    shared = inter.data.astype(np.float64)
    jac = shared / (sizes[rows + offset] + sizes[cols] - shared)
    jac[cols == rows + offset] = 0.0  # a skill is not its own neighbour
    return rows, cols, jac


def _row_topk(
    rows: np.ndarray, cols: np.ndarray, jac: np.ndarray, indptr: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k entries of every row by Jaccard (> 0), ties to the smaller column, without sorting.

    k passes of segmented max / min over the CSR data: linear in the block's entries per pass.
    """
    starts = indptr[:-1][np.diff(indptr) > 0]
    empty = np.empty(0, dtype=np.int64)
    if len(starts) == 0:
        return empty, empty, np.empty(0)
    segment = np.zeros(len(rows), dtype=np.int64)
    segment[starts[1:] - starts[0]] = 1
    segment = np.cumsum(segment)  # index of each entry's non-empty row among `starts`
    values = jac.copy()
    big = np.iinfo(np.int64).max
    out_r, out_c, out_w = [], [], []
    for _ in range(k):
        best = np.maximum.reduceat(values, starts - starts[0])
        is_best = (values == best[segment]) & (values > 0)
        first_col = np.minimum.reduceat(np.where(is_best, cols, big), starts - starts[0])
        chosen = is_best & (cols == first_col[segment])
        if not chosen.any():
            break
        out_r.append(rows[chosen])
        out_c.append(cols[chosen])
        out_w.append(jac[chosen])
        values[chosen] = 0.0
    if not out_r:
        return empty, empty, np.empty(0)
    r, c, w = np.concatenate(out_r), np.concatenate(out_c), np.concatenate(out_w)
    order = np.lexsort((c, r))  # deterministic output order: by row, then column
    return r[order], c[order], w[order]


def topk_jaccard(
    signature: sp.csr_matrix, config: GraphConfig, progress: Callable[[int, int], None] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, SemanticStats]:
    """(src, dst, weight) of every node's top-k Jaccard neighbours, ties to the smaller index."""
    n = signature.shape[0]
    x = signature.tocsr().astype(np.float32)
    x.data[:] = 1.0
    sizes = np.asarray(x.sum(axis=1)).ravel()
    df = np.asarray(x.sum(axis=0)).ravel()
    cap = df_cap(n, config)
    keep = df <= cap
    x_join = x[:, np.flatnonzero(keep)].tocsr()
    xt = x_join.T.tocsr()
    cost = x_join @ df[keep]  # upper bound of candidate neighbours per row
    src_parts, dst_parts, w_parts = [], [], []
    blocks = _row_blocks(cost.astype(np.int64), _PAIRS_PER_BLOCK, config.join_block_rows)
    for bi, (a, b) in enumerate(blocks):
        inter = (x_join[a:b] @ xt).tocsr()
        rows, cols, jac = _block_jaccard(inter, a, sizes)
        keep_rows, keep_cols, keep_w = _row_topk(rows, cols, jac, inter.indptr, config.knn_k)
        src_parts.append(keep_rows + a)
        dst_parts.append(keep_cols)
        w_parts.append(keep_w)
        if progress is not None:
            progress(bi + 1, len(blocks))
    src = np.concatenate(src_parts) if src_parts else np.empty(0, np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.empty(0, np.int64)
    weight = np.concatenate(w_parts) if w_parts else np.empty(0, np.float64)
    return src, dst, weight, _stats(n, src, dst, cap, int((~keep).sum()))


def _stats(n: int, src: np.ndarray, dst: np.ndarray, cap: int, capped: int) -> SemanticStats:
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pairs = np.unique(lo * n + hi) if len(src) else np.empty(0, np.int64)
    mutual = len(src) - len(pairs)  # a pair present in both directions is counted twice above
    degree = np.bincount(np.concatenate([pairs // n, pairs % n]), minlength=n) if n else np.zeros(0)
    return SemanticStats(
        directed_edges=len(src),
        unordered_pairs=len(pairs),
        mutual_pairs=int(mutual),
        max_degree=int(degree.max()) if n else 0,
        isolated=int((degree == 0).sum()) if n else 0,
        df_cap=cap,
        capped_tokens=capped,
    )


def semantic_edges(
    node_ids: pl.Series,
    signature: sp.csr_matrix,
    config: GraphConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[pl.DataFrame, SemanticStats]:
    """The cold-start edge table: one `semantic` edge u→v per top-k neighbour v of u (round 0)."""
    config = config or GraphConfig()
    src, dst, weight, stats = topk_jaccard(signature, config, progress)
    ids = node_ids.to_numpy()
    edges = pl.DataFrame(
        {
            "src": ids[src] if len(src) else np.empty(0, dtype=object),
            "dst": ids[dst] if len(dst) else np.empty(0, dtype=object),
            "relation": SEMANTIC,
            "weight": weight,
            "w0": weight,
            "n_e": 0,
            "round_created": 0,
            "round_updated": 0,
            "w_raw": weight,
        },
        schema=EDGE_SCHEMA,
    )
    return edges.sort("src", "dst", "relation"), stats
