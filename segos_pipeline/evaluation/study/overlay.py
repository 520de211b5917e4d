"""The overlay test: does the induced navigation layer add reach over the semantic backbone."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ...config import SEMANTIC, TRAVERSABLE
from ...graph.transition import edge_indices


def overlay_test(node_ids: pl.Series, backbone: pl.DataFrame, evolved: pl.DataFrame) -> dict[str, Any]:
    """Add the evolved graph's induced navigation edges (workflow, dependency, alternative; `avoid` is
    never traversed, so it cannot add reach) to the backbone's semantic edges, undirected.

    - merged_components: connected components before minus after;
    - newly_connected_nodes: nodes with no semantic edge that gain an induced one;
    - nodes_gaining_reach: nodes whose component grew (they can now reach a node they could not);
    - induced_pairs_within_component: induced pairs whose ends were already connected (no new reach).
    """
    n = len(node_ids)
    sem = edge_indices(backbone.filter(pl.col("relation") == SEMANTIC), node_ids)
    induced_rel = [r for r in TRAVERSABLE if r != SEMANTIC]
    ind = edge_indices(evolved.filter(pl.col("relation").is_in(induced_rel)), node_ids)

    def adjacency(u: np.ndarray, v: np.ndarray) -> sp.csr_matrix:
        data = np.ones(len(u), dtype=np.int8)
        return sp.csr_matrix((data, (u, v)), shape=(n, n))

    su, sv = sem["u"].to_numpy(), sem["v"].to_numpy()
    iu, iv = ind["u"].to_numpy(), ind["v"].to_numpy()
    before = adjacency(su, sv)
    after = adjacency(np.concatenate([su, iu]), np.concatenate([sv, iv]))
    c_before, lab_before = connected_components(before, directed=False)
    c_after, lab_after = connected_components(after, directed=False)
    size_before = np.bincount(lab_before, minlength=c_before)[lab_before]
    size_after = np.bincount(lab_after, minlength=c_after)[lab_after]
    sem_degree = np.asarray((before + before.T).astype(bool).sum(axis=1)).ravel()
    touched = np.zeros(n, dtype=bool)
    touched[iu] = True
    touched[iv] = True
    pairs = {(min(a, b), max(a, b)) for a, b in zip(iu.tolist(), iv.tolist(), strict=True)}
    return {
        "induced_edges": len(iu),
        "induced_pairs": len(pairs),
        "induced_by_relation": {r: int(evolved.filter(pl.col("relation") == r).height) for r in induced_rel},
        "components_before": int(c_before),
        "components_after": int(c_after),
        "merged_components": int(c_before - c_after),
        "newly_connected_nodes": int(((sem_degree == 0) & touched).sum()),
        "nodes_gaining_reach": int((size_after > size_before).sum()),
        "induced_pairs_within_component": int(sum(lab_before[a] == lab_before[b] for a, b in pairs)),
    }
