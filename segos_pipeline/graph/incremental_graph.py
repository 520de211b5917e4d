"""What one skill's change does to the graph (graph/incremental.py): its row of the signature, the top-k
Jaccard rows of the skills it can reach, the semantic edges they replace, and the operator rows of every
endpoint of a changed edge. Pure functions over the parent's matrices and tables."""

from __future__ import annotations

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import AVOID, SEMANTIC, TRAVERSABLE, TransitionConfig
from ..text.lexicon import SIGNATURE_FIELDS, Signature
from .edges import EDGE_SCHEMA, new_edges
from .semantic_edges import _row_topk
from .transition import transition_matrix


def shift_indices(old: np.ndarray, action: str, idx: int) -> np.ndarray:
    """New index of each old node index (−1 for the removed node)."""
    if action == "add":
        return old + (old >= idx)
    if action == "remove":
        out = old - (old > idx)
        out[old == idx] = -1
        return out
    return old.copy()


def patch_signature(
    sig: Signature, idx: int, present: bool, new_tokens: pl.DataFrame | None
) -> tuple[Signature, np.ndarray, np.ndarray]:
    """The child's signature (row idx replaced, inserted or deleted; unseen tokens appended to the
    vocabulary) and the skill's old and new token columns."""
    m = sig.matrix
    indptr, indices = m.indptr.astype(np.int64), m.indices.astype(np.int64)
    lo = int(indptr[idx])  # idx == n (appending) is indptr's last entry
    hi = int(indptr[idx + 1]) if present else lo
    old_cols = indices[lo:hi]
    vocab = sig.vocab
    new_cols = np.empty(0, dtype=np.int64)
    if new_tokens is not None:
        words = new_tokens.filter(pl.col("field").is_in(SIGNATURE_FIELDS))["token"].unique()
        known = (
            pl.DataFrame({"token": vocab})
            .with_row_index("col")
            .filter(pl.col("token").is_in(words.implode()))
        )
        unseen = words.filter(~words.is_in(known["token"].implode())).sort()
        new_cols = np.sort(
            np.concatenate(
                [
                    known["col"].to_numpy().astype(np.int64),
                    len(vocab) + np.arange(len(unseen), dtype=np.int64),
                ]
            )
        )
        if len(unseen):
            vocab = pl.concat([vocab, unseen.rename(vocab.name)])
    lengths = np.diff(indptr)
    head, tail = lengths[:idx], (lengths[idx + 1 :] if present else lengths[idx:])
    mid = [len(new_cols)] if new_tokens is not None else []
    new_lengths = np.concatenate([head, np.array(mid, dtype=np.int64), tail])
    new_indptr = np.concatenate([[0], np.cumsum(new_lengths)]).astype(np.int64)
    new_indices = np.concatenate([indices[:lo], new_cols, indices[hi:]])
    shape = (len(new_lengths), len(vocab))
    matrix = sp.csr_matrix(
        (np.ones(len(new_indices), dtype=np.float32), new_indices, new_indptr), shape=shape
    )
    return Signature(matrix, vocab), old_cols, new_cols


def topk_of_rows(
    join: sp.csr_matrix, sizes: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, sp.csr_matrix]:
    """Exact top-k (node, neighbour, Jaccard) of `rows` over the joined tokens, ties to the smaller index
    (the full build's rule, on the same integer arithmetic), and the rows' intersection counts.

    X·X_Eᵀ is one pass over X (X_E has a handful of columns), where X_E·Xᵀ would transpose all of X first.
    """
    inter = (join @ join[rows].T).T.tocsr()
    lengths = np.diff(inter.indptr)
    local = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
    node = rows[local]
    cols = inter.indices.astype(np.int64)
    shared = inter.data.astype(np.float64)
    jac = shared / (sizes[node] + sizes[cols] - shared)
    jac[cols == node] = 0.0
    r, c, w = _row_topk(local, cols, jac, inter.indptr, k)
    return rows[r], c, w, inter


def topk_rows(pairs: pl.DataFrame, k: int) -> pl.DataFrame:
    """Top-k of each `node` over (node, cand, jac), jac > 0, ties to the smaller candidate index."""
    return (
        pairs.filter((pl.col("jac") > 0) & (pl.col("node") != pl.col("cand")))
        .sort(["node", "jac", "cand"], descending=[False, True, False])
        .group_by("node", maintain_order=True)
        .head(k)
    )


def holders(m: sp.csr_matrix, cols: np.ndarray) -> np.ndarray:
    """Rows of `m` with a non-zero in any of `cols`."""
    hit = np.isin(m.indices, cols)
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    return np.unique(rows[hit])


def patch_edges(
    e: pl.DataFrame,
    recomputed: pl.DataFrame,
    ids_new: np.ndarray,
    sources: np.ndarray,
    skill_id: str,
    action: str,
    round_: int,
) -> tuple[pl.DataFrame, dict[str, int]]:
    """The parent's edges without the removed skill's, with the recomputed sources' semantic rows replaced.

    A row whose pair and Jaccard are unchanged is kept as it was (with any evolution state on it); trace-
    induced edges of existing skills are kept; a pair with an avoid edge gets no navigation edge (SPEC §8).
    """
    src_ids = ids_new[sources].tolist() if len(sources) else []
    edges = e
    if action == "remove":
        edges = edges.filter((pl.col("src") != skill_id) & (pl.col("dst") != skill_id))
    dropped_with_skill = e.height - edges.height
    is_sem_src = (pl.col("relation") == SEMANTIC) & pl.col("src").is_in(src_ids)
    old_sem_of_sources = edges.filter(is_sem_src)
    edges = edges.filter(~is_sem_src)
    fresh = pl.DataFrame(
        {
            "src": ids_new[recomputed["node"].to_numpy().astype(np.int64)] if recomputed.height else [],
            "dst": ids_new[recomputed["cand"].to_numpy().astype(np.int64)] if recomputed.height else [],
            "w0_new": recomputed["jac"],
        },
        schema={"src": pl.String, "dst": pl.String, "w0_new": pl.Float64},
    )
    kept = old_sem_of_sources.join(fresh, on=["src", "dst"], how="inner").filter(
        pl.col("w0") == pl.col("w0_new")
    )
    jaccard = pl.col("w0_new")
    unkept = fresh.join(kept.select("src", "dst"), on=["src", "dst"], how="anti")
    new_rows = new_edges(unkept, SEMANTIC, jaccard, jaccard, pl.lit(0), round_)
    avoid = edges.filter(pl.col("relation") == AVOID).select(lo="src", hi="dst")
    pair = new_rows.with_columns(lo=pl.min_horizontal("src", "dst"), hi=pl.max_horizontal("src", "dst"))
    blocked = pair.join(avoid, on=["lo", "hi"], how="semi").height
    new_rows = pair.join(avoid, on=["lo", "hi"], how="anti").drop("lo", "hi")
    edges = pl.concat([edges, kept.select(list(EDGE_SCHEMA)), new_rows.cast(EDGE_SCHEMA)], how="vertical")
    counts = {
        "semantic_rows_replaced": int(old_sem_of_sources.height - kept.height),
        "semantic_rows_added": int(new_rows.height),
        "semantic_blocked_by_avoid": int(blocked),
        "edges_dropped_with_skill": int(dropped_with_skill),
    }
    return edges.sort("src", "dst", "relation"), counts


def patch_operator_for(
    before_edges: pl.DataFrame,
    edges: pl.DataFrame,
    old: sp.csr_matrix,
    action: str,
    idx: int,
    n_new: int,
    node_ids: pl.Series,
    skill_id: str,
    new_u: int | None,
    tconf: TransitionConfig,
) -> tuple[sp.csr_matrix, int]:
    """The operator after the edge change: the parent's operator re-indexed for the new node set, with the
    rows of every endpoint of a changed traversable edge rebuilt; and how many rows that is.

    A row of T gets mass from a node's out-edges (A→) and in-edges (A←, reverse), so rebuilding the rows of
    every endpoint of a changed edge from all edges incident to them gives exactly the full operator's rows.
    """
    cols = ["src", "dst", "relation", "weight"]
    before = before_edges.filter(pl.col("relation").is_in(TRAVERSABLE)).select(cols)
    after = edges.filter(pl.col("relation").is_in(TRAVERSABLE)).select(cols)
    changed = pl.concat([before.join(after, on=cols, how="anti"), after.join(before, on=cols, how="anti")])
    touched_ids = set(changed["src"].to_list()) | set(changed["dst"].to_list())
    touched_ids.discard(skill_id if action == "remove" else "")
    if new_u is not None:
        touched_ids.add(skill_id)
    coo = old.tocoo()
    r, c = (
        shift_indices(coo.row.astype(np.int64), action, idx),
        shift_indices(coo.col.astype(np.int64), action, idx),
    )
    ok = (r >= 0) & (c >= 0)
    r, c, d = r[ok], c[ok], coo.data[ok]
    index = pl.DataFrame({"id": node_ids, "i": pl.int_range(len(node_ids), dtype=pl.Int64, eager=True)})
    touched = (
        np.sort(index.filter(pl.col("id").is_in(sorted(touched_ids)))["i"].to_numpy())
        if touched_ids
        else np.empty(0, np.int64)
    )
    keep = ~np.isin(r, touched)
    r, c, d = r[keep], c[keep], d[keep]
    if len(touched):
        tids = sorted(touched_ids)
        incident = edges.filter(pl.col("src").is_in(tids) | pl.col("dst").is_in(tids))
        sub = transition_matrix(incident, node_ids, tconf).tocsr()
        rows = sub[touched].tocoo()
        r = np.concatenate([r, touched[rows.row]])
        c = np.concatenate([c, rows.col.astype(np.int64)])
        d = np.concatenate([d, rows.data])
    out = sp.csr_matrix((d, (r, c)), shape=(n_new, n_new))
    out.sort_indices()
    return out, len(touched_ids)
