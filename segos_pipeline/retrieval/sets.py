"""Sorted sets of node indices (int arrays), the way a query holds the few skills it reaches.

`np.union1d` takes a hash-table path in numpy 2.x that is slow on the arrays a query holds (tens of
thousands of indices); binary searches into the larger of two sorted sets do the same work in a fraction
of it (`arrays.unique` is the same remedy for `np.unique`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def union_positions(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, ia, ib): the union of two sorted sets and where each one's values sit in it (u[ia] = a,
    u[ib] = b), in time linear in the larger set and without binary searches over it."""
    swapped = len(a) < len(b)
    if swapped:
        a, b = b, a
    at = np.searchsorted(a, b)
    present = at < len(a)
    present[present] = a[at[present]] == b[present]
    missing = ~present
    ia = np.arange(len(a))
    ib = np.empty(len(b), dtype=np.int64)
    if missing.any():
        at_missing = at[missing]
        u = np.insert(a, at_missing, b[missing])
        # a[i] moves right by the number of inserted values placed before it (insertion points ≤ i)
        ia = ia + np.cumsum(np.bincount(at_missing, minlength=len(a) + 1))[: len(a)]
        ib[missing] = at_missing + np.arange(len(at_missing))
    else:
        u = a
    ib[present] = ia[at[present]]
    return (u, ib, ia) if swapped else (u, ia, ib)


def contains(sorted_set: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether each of `values` is in `sorted_set` (a bool per value), by binary search."""
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def value_at(nodes: np.ndarray, values: np.ndarray, node: int) -> float:
    """The value a sorted set `nodes` carries for `node` (0 when it does not hold it), by binary search."""
    i = int(np.searchsorted(nodes, node))
    return float(values[i]) if i < len(nodes) and nodes[i] == node else 0.0


def scattered(n: int, nodes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The dense length-n view of values held over `nodes` (zero elsewhere)."""
    out = np.zeros(n, dtype=values.dtype)
    out[nodes] = values
    return out


def merged_columns(
    a: np.ndarray, b: np.ndarray, columns: Sequence[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The union of two disjoint sorted sets with the value columns each carries, in union order."""
    u, at_a, at_b = union_positions(a, b)
    out = []
    for a_values, b_values in columns:
        values = np.zeros(len(u), dtype=np.result_type(a_values, b_values))
        values[at_a], values[at_b] = a_values, b_values
        out.append(values)
    return u, out


def top_k(values: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """The k candidates with the largest values, best first, ties to the smaller index.

    A partial selection plus a sort of the (few) survivors: linear in the candidates, so a query that
    matches half of a 100k-skill library does not pay for sorting all of them.
    """
    if k <= 0 or len(candidates) == 0:
        return candidates[:0]
    if len(candidates) > k:
        vals = values[candidates]
        threshold = vals[np.argpartition(-vals, k - 1)[:k]].min()
        candidates = candidates[vals >= threshold]  # keeps every tie at the threshold
    return candidates[np.lexsort((candidates, -values[candidates]))][:k]
