"""Exact Personalized PageRank by power iteration over the seeds' components (SPEC §5): what a query runs
while the union of its seeds' weakly connected components is small; larger ones run by local push
(push.py)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

try:  # the kernel behind `csr @ vector`: PPR calls it up to 50 times a query, and on a few hundred skills
    # scipy's per-call dispatch around it costs more than the product itself
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - a scipy that moved it: the public operator gives the same numbers
    _csr_matvec = None


def closed_submatrix(m: sp.csr_matrix, sub: np.ndarray) -> sp.csr_matrix:
    """`m[sub][:, sub]` for a sorted `sub` that no row of it leaves (a union of weakly connected
    components): the selected rows already hold only columns in `sub`, which are renumbered by binary
    search. Entries keep their order within each row, so products over it round exactly like the fancy
    index (test); it skips two general fancy-index passes per query."""
    starts, ends = m.indptr[sub].astype(np.int64), m.indptr[sub + 1].astype(np.int64)
    lengths = ends - starts
    indptr = np.zeros(len(sub) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    take = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1], dtype=np.int64)
    indices = np.searchsorted(sub, m.indices[take]).astype(m.indices.dtype)
    return sp.csr_matrix((m.data[take], indices, indptr.astype(m.indices.dtype)), shape=(len(sub), len(sub)))


def power_iteration(
    tt: sp.csr_matrix, p: np.ndarray, dangling: np.ndarray, alpha: float, tol: float, max_iter: int
) -> np.ndarray:
    """s ← α·p + (1−α)·(Tᵀs + (mass on dangling rows)·p) from s = p, until the L1 change < tol or
    max_iter steps (SPEC §5). In-place steps over two buffers: the same floating-point operations as the
    textbook expression, without its temporaries."""
    s, nxt, diff = p.copy(), np.empty_like(p), np.empty_like(p)
    ap = alpha * p
    for _ in range(max_iter):
        if _csr_matvec is not None:
            nxt.fill(0.0)
            _csr_matvec(tt.shape[0], tt.shape[1], tt.indptr, tt.indices, tt.data, s, nxt)
        else:
            nxt[:] = tt @ s
        if len(dangling):  # most query subgraphs have none; adding 0·p would change no bit
            nxt += s[dangling].sum() * p
        nxt *= 1 - alpha
        nxt += ap
        np.subtract(nxt, s, out=diff)
        delta = np.abs(diff, out=diff).sum()
        s, nxt = nxt, s
        if delta < tol:
            break
    return s
