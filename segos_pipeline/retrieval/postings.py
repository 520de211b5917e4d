"""Postings kernels of the lexical index (SPEC §6.7): sums of a query's columns over a sparse skill × token
matrix, read column by column from its postings, never over all skills; and idf."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

try:  # y += A·x for a CSC A: one column's postings added into an accumulator without temporaries
    from scipy.sparse._sparsetools import csc_matvec as _csc_matvec
except ImportError:  # pragma: no cover - a scipy that moved it: bincount gives the same sums, slower
    _csc_matvec = None

from ..arrays import ranges, unique


def gather(m: sp.csc_matrix, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored entries of the selected columns, column after column: (rows, positions in m.data, each
    column's length)."""
    starts = m.indptr[cols].astype(np.int64)
    ends = m.indptr[cols + 1].astype(np.int64)
    pos = ranges(starts, ends)
    return m.indices[pos], pos, ends - starts


# Below this share of the skills, a query's postings are grouped by skill with a sort (cost follows the
# postings); above it, they are added into length-n accumulators, which measured faster than sorting them.
_SORT_SHARE = 1 / 16


# The accumulators are filled a node range at a time, every column's postings in that range in turn: the
# range's slice of an accumulator (1 MB) stays in cache while the scattered adds land in it, which at a
# million skills beat one pass over the whole accumulator (docs/benchmarks.md).
_NODE_RANGE = 131_072


def column_sums(
    m: sp.csc_matrix, cols: np.ndarray, weights: list[np.ndarray], pattern: list[bool]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Σ_j c_j · m[:, j] over the selected columns, for each (positive) weight vector c, on the rows that
    hold any of them only: (rows, [sums]). With `pattern` every stored entry counts as 1 (the sum is then
    the weights of the columns a row holds). Within a row the entries are summed in column order, starting
    from 0, on every path (and in `sums_at`), so all give the same floating-point sums."""
    n = m.shape[0]
    postings = int((m.indptr[cols + 1] - m.indptr[cols]).sum()) if len(cols) else 0
    if postings == 0:
        return np.zeros(0, dtype=np.int64), [np.zeros(0) for _ in weights]
    if postings > _SORT_SHARE * n and _csc_matvec is not None:
        return _accumulated(m, cols, weights, pattern)
    rows, pos, lengths = gather(m, cols)
    per_entry = [
        np.repeat(c, lengths) if flat else m.data[pos] * np.repeat(c, lengths)
        for c, flat in zip(weights, pattern, strict=True)
    ]
    if postings > _SORT_SHARE * n:  # a scipy without the kernel (tested): one bincount each
        nodes = unique(rows)
        return nodes, [np.bincount(rows, weights=w, minlength=n)[nodes] for w in per_entry]
    order = np.argsort(rows)  # groups only: bincount below still adds each row's entries in column order
    sorted_rows = rows[order]
    first = np.empty(len(rows), dtype=bool)
    first[0] = True
    np.not_equal(sorted_rows[1:], sorted_rows[:-1], out=first[1:])
    nodes = sorted_rows[first]
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return nodes, [np.bincount(inverse, weights=w, minlength=len(nodes)) for w in per_entry]


def _accumulated(
    m: sp.csc_matrix, cols: np.ndarray, weights: list[np.ndarray], pattern: list[bool]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """`column_sums` into length-n accumulators, one node range at a time. Each add is scipy's own
    `csc_matvec` kernel over one column's postings in the range (y[row] += value·c): no array the size of
    the postings is built, and a row's adds still come in column order."""
    n = m.shape[0]
    sums = [np.zeros(n) for _ in weights]
    ones = np.ones(int((m.indptr[cols + 1] - m.indptr[cols]).max()))
    # same dtype as the rows: numpy would otherwise copy each column's rows to compare them
    bounds = np.arange(0, n + _NODE_RANGE, _NODE_RANGE).astype(m.indices.dtype)
    spans = []
    for k, j in enumerate(cols.tolist()):
        start, end = int(m.indptr[j]), int(m.indptr[j + 1])
        if start < end:
            cuts = start + np.searchsorted(m.indices[start:end], bounds)
            spans.append((k, cuts.tolist()))
    ptr = np.zeros(2, dtype=m.indices.dtype)
    for r in range(len(bounds) - 1):
        for k, cuts in spans:
            a, b = cuts[r], cuts[r + 1]
            if a == b:
                continue
            ptr[1] = b - a
            rows = m.indices[a:b]
            for acc, c, flat in zip(sums, weights, pattern, strict=True):
                _csc_matvec(n, 1, ptr, rows, ones[: b - a] if flat else m.data[a:b], c[k : k + 1], acc)
    nodes = np.flatnonzero(sums[0])  # positive weights: a row with any posting has a positive sum
    return nodes, [acc[nodes] for acc in sums]


def sums_at(
    m: sp.csc_matrix, cols: np.ndarray, weights: list[np.ndarray], pattern: list[bool], nodes: np.ndarray
) -> list[np.ndarray]:
    """`column_sums` for the given sorted rows only, by binary search in each column's postings: the
    same products added in the same (column) order, so the same floating-point sums. Its cost follows
    the rows asked about, not the postings."""
    sums = [np.zeros(len(nodes)) for _ in weights]
    if not len(nodes):
        return sums
    nodes = nodes.astype(m.indices.dtype)  # the rows' dtype: numpy would otherwise copy each column's rows
    for k, j in enumerate(cols.tolist()):
        start, end = int(m.indptr[j]), int(m.indptr[j + 1])
        if start == end:
            continue
        seg = m.indices[start:end]
        pos = np.minimum(np.searchsorted(seg, nodes), end - start - 1)
        hit = seg[pos] == nodes
        values = m.data[start + pos[hit]]
        for acc, c, flat in zip(sums, weights, pattern, strict=True):
            acc[hit] += c[k] if flat else values * c[k]
    return sums


def high_tier(m: sp.csc_matrix, min_postings: int, share: float) -> sp.csc_matrix:
    """The highest-valued `share` of the postings of every column holding at least `min_postings` (ties
    at the cut kept), nothing of the other columns: what a frequent token adds to the skills it matters
    most to."""
    lengths = np.diff(m.indptr)
    keep = np.zeros(m.nnz, dtype=bool)
    kept = np.zeros(m.shape[1], dtype=np.int64)
    for j in np.flatnonzero(lengths >= max(min_postings, 1)).tolist():
        start, end = int(m.indptr[j]), int(m.indptr[j + 1])
        values = m.data[start:end]
        k = max(1, int(share * (end - start)))
        high = values >= np.partition(values, len(values) - k)[len(values) - k]
        keep[start:end] = high
        kept[j] = int(high.sum())
    indptr = np.concatenate(([0], np.cumsum(kept))).astype(m.indptr.dtype)
    return sp.csc_matrix((m.data[keep], m.indices[keep], indptr), shape=m.shape)


def bm25_idf(n: int, df: np.ndarray) -> np.ndarray:
    """BM25 idf of document frequencies among n skills (a token no skill has gets the highest)."""
    return np.log(1 + (n - df + 0.5) / (df + 0.5))
