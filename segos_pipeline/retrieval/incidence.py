"""Every edge that touches a skill, for the per-skill questions a served version answers: why a bundle
member is there, the edges among a bundle's members, a skill's typed neighbours and degrees.

Held as index arrays, CSR over skills (`indptr`, then the edge rows touching each skill in edge-table order),
built with polars joins and numpy sorts. A version is loaded on a background thread while requests go on
(api.SegosService); a Python loop or one large `to_list()` over the edge table would hold the GIL for
tens of milliseconds at a time, and every request waiting meanwhile would stall for as long.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ..config import RELATIONS
from ..graph.transition import edge_indices

Edge = tuple[str, str, str, float]  # (src, dst, relation, weight)


class Incidence:
    def __init__(self, edges: pl.DataFrame, node_ids: pl.Series, ids: Sequence[str]):
        """`edges`: the version's edge table; `node_ids`: its node ids in row order, `ids` the same as a
        Python sequence (the names index's, shared rather than converted again)."""
        self.ids = ids
        # edge_indices joins (order not kept), so the edge table's row order is carried along and restored
        e = edge_indices(edges.with_row_index("row"), node_ids).sort("row")
        self.edges = edges
        self.row = e["row"].to_numpy()  # edge-table row of each indexed edge
        self.u = e["u"].to_numpy()
        self.v = e["v"].to_numpy()
        self.weight = e["weight"].to_numpy()
        names = e["relation"].unique().to_list()
        self.relations = sorted(
            names, key=lambda r: (RELATIONS.index(r) if r in RELATIONS else len(RELATIONS), r)
        )
        self.relation = (
            e["relation"].replace_strict(self.relations, range(len(self.relations)), return_dtype=pl.UInt8)
        ).to_numpy()
        # each edge is incident to its source, and to its destination unless it is a self-loop
        k = np.arange(len(self.u))
        other_end = self.u != self.v
        node = np.concatenate([self.u, self.v[other_end]])
        edge = np.concatenate([k, k[other_end]])
        order = np.lexsort((edge, node))
        self.edge_at = edge[order]
        self.indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(node, minlength=len(ids)), out=self.indptr[1:])

    def _touching(self, i: int) -> np.ndarray:
        return self.edge_at[self.indptr[i] : self.indptr[i + 1]]

    def of(self, i: int) -> list[Edge]:
        """Every edge touching the skill in row `i`, in edge-table order."""
        ks = self._touching(i)
        ids, rel = self.ids, self.relations
        columns = [a[ks].tolist() for a in (self.u, self.v, self.relation, self.weight)]
        return [(ids[u], ids[v], rel[r], w) for u, v, r, w in zip(*columns, strict=True)]

    def rows_of(self, i: int) -> pl.DataFrame:
        """The edge-table rows (every column) touching the skill in row `i`, in edge-table order."""
        return self.edges[self.row[self._touching(i)]]
