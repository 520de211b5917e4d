"""Deterministic token-Jaccard kNN edges (SPEC §4), as blocked sparse-matrix products.

Intersections come from X·Xᵀ on the binary node × token matrix, one block of rows at a time; blocks are
sized by an upper bound on the product's non-zeros so peak memory stays bounded on any library size.
There is no Python loop over pairs of skills. Within a block the product runs over chunks of nodes,
candidates are ranked on float32 Jaccard where that ranks exactly as float64 does, and only each row's
winners get their float64 weight (docs/algorithms.md, "Semantic edges").

Blocks are independent, so a large join runs them in a pool of spawned processes (one per CPU) that map
the join matrices from files instead of receiving copies; the result does not depend on the number of
workers (blocks are gathered in order). scipy's sparse product holds the GIL, so threads would not help.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import SEMANTIC, GraphConfig
from .edges import EDGE_SCHEMA

# Upper bound of candidate pairs held at once: the block's product (col + shared count, 8 bytes a pair)
# and its per-pair scratch (Jaccard, row, gathered size, masks: about 14 bytes).
_PAIRS_PER_BLOCK = 8_000_000
# Below this many candidate pairs in all a pool costs more than it saves: starting spawned workers takes
# seconds, as long as a whole 100k-skill join in one process (figures: docs/benchmarks.md, "Design
# measurements quoted from the code").
PARALLEL_MIN_PAIRS = 300_000_000
# Candidates are ranked on float32 Jaccard when no skill has more signature tokens than this. Two different
# Jaccards s/(a+b-s) with a, b <= 2048 differ by at least 1/4095² > 2⁻²⁴, wider than any interval of reals
# in (0, 1] that rounds to a single float32; rounding is monotone, so float32 orders and ties candidates
# exactly as float64 does (equal fractions round alike in both). Larger sets rank on float64.
_FLOAT32_EXACT_SIZE = 2048
# Nodes (columns of X·Xᵀ) one sparse product covers. The product kernel keeps a running sum and a link per
# column; over 2^18 columns (2 MB) they stay in cache, over a million they miss on most entries, so at a
# million skills a block runs faster as several narrower products than as one.
_CHUNK_COLUMNS = 1 << 18


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


def _row_topk(
    rows: np.ndarray, cols: np.ndarray, jac: np.ndarray, indptr: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k (row, col, Jaccard) of every row of CSR entries by Jaccard (> 0), ties to the smaller column,
    by row then column; `rows` gives each entry's row. (The incremental update's few rows; the cold-start
    join ranks its blocks with `_block_topk`, on the same passes.)"""
    pos, w = _top_positions(jac.copy(), cols, indptr, k)
    r, c = rows[pos], cols[pos]
    order = np.lexsort((c, r))
    return r[order], c[order], w[order]


# ------------------------------------------------------------------------------------ one block's join


@dataclass(frozen=True)
class _Join:
    """The join's inputs, shared by every block (memory-mapped in pool workers)."""

    x_join: sp.csr_matrix  # binary node × joined-token matrix, float32 data
    chunks: tuple[sp.csr_matrix, ...]  # Xᵀ of consecutive node ranges (see _CHUNK_COLUMNS), CSR
    firsts: tuple[int, ...]  # first node of each chunk
    sizes: np.ndarray  # float32 signature-set size of every node (capped tokens included)
    k: int
    rank_dtype: type  # float32 when it ranks exactly (see _FLOAT32_EXACT_SIZE), else float64


def _row_best(
    jac: np.ndarray, cols: np.ndarray, indptr: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(position, value) of each non-empty row's largest `jac`, ties to the smaller column.

    One pass finds each row's maximum and one marks the entries equal to it; the tie-break runs on the
    marked entries only (usually about one a row)."""
    best = np.maximum.reduceat(jac, starts)
    ties = np.flatnonzero(jac == np.repeat(best, lengths))
    tie_cols = cols[ties]
    first = np.flatnonzero(np.diff(np.searchsorted(indptr, ties, side="right"), prepend=-1))
    smallest = np.minimum.reduceat(tie_cols, first)
    winner = tie_cols == np.repeat(smallest, np.diff(first, append=len(ties)))  # unique columns in a row
    return ties[winner], best


def _top_positions(
    jac: np.ndarray, cols: np.ndarray, indptr: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """(position, value) of every row's k best entries by `jac` (> 0), ties to the smaller column: k passes
    of `_row_best`, each taking every row's best and zeroing it in `jac` (overwritten) for the next."""
    lengths = np.diff(indptr)
    nonempty = lengths > 0
    starts, seg_lengths = indptr[:-1][nonempty], lengths[nonempty]
    picked, values = [], []
    for i in range(k if len(starts) else 0):
        pos, best = _row_best(jac, cols, indptr, starts, seg_lengths)
        pos = pos[best > 0]
        if len(pos) == 0:
            break
        picked.append(pos)
        values.append(jac[pos])
        if i + 1 < k:
            jac[pos] = 0
    pos = np.concatenate(picked) if picked else np.empty(0, dtype=np.int64)
    return pos, np.concatenate(values) if values else np.empty(0, dtype=jac.dtype)


def _chunk_topk(join: _Join, c: int, a: int, b: int, block: sp.csr_matrix) -> tuple[np.ndarray, ...]:
    """(local row, node, rank Jaccard, shared count) of each row's top k among chunk c's nodes."""
    product = block @ join.chunks[c]
    indptr, cols, shared = product.indptr, product.indices, product.data
    first, width = join.firsts[c], join.chunks[c].shape[1]
    lengths = np.diff(indptr)
    jac = np.repeat(join.sizes[a:b], lengths).astype(join.rank_dtype, copy=False)  # |A|
    jac += np.take(join.sizes[first : first + width], cols, mode="clip")  # |B|
    jac -= shared
    np.divide(shared, jac, out=jac)
    if first < b and a < first + width:  # the block's own nodes are in this chunk: no self-pairs
        own = np.repeat(np.arange(a - first, b - first, dtype=cols.dtype), lengths)
        np.copyto(jac, 0, where=own == cols)
    pos, rank = _top_positions(jac, cols, indptr, join.k)
    rows = np.searchsorted(indptr, pos, side="right") - 1
    return rows, cols[pos].astype(np.int64) + first, rank, shared[pos]


def _block_topk(join: _Join, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k (src, dst, Jaccard) of rows [a, b): one block of X·Xᵀ, never the whole product.

    Each chunk of nodes gives its top k of every row; a row's top k over all nodes are among those
    (one order, Jaccard then smaller node, ranks both). Candidates are ranked in the rank dtype and only
    the winners get their float64 Jaccard, from the same integer counts."""
    block = join.x_join[a:b]
    parts = [_chunk_topk(join, c, a, b, block) for c in range(len(join.chunks))]
    rows, cols, rank, shared = (np.concatenate(p) for p in zip(*parts, strict=True))
    if len(join.chunks) > 1:  # keep each row's best k over the chunks
        order = np.lexsort((cols, -rank, rows))
        rows, cols, shared = rows[order], cols[order], shared[order]
        row_start = np.flatnonzero(np.diff(rows, prepend=-1))
        within = np.arange(len(rows)) - np.repeat(row_start, np.diff(row_start, append=len(rows)))
        keep = within < join.k
        rows, cols, shared = rows[keep], cols[keep], shared[keep]
    order = np.lexsort((cols, rows))  # by row, then column
    src, dst, s = rows[order].astype(np.int64) + a, cols[order], shared[order].astype(np.float64)
    return src, dst, s / (join.sizes[src] + join.sizes[dst] - s)  # the reference's float64 expression


# ----------------------------------------------------------------------------------- the process pool

_WORKER: dict[str, _Join] = {}  # a pool worker's join, set up once by `_init_worker`


def _save_csr(folder: Path, name: str, m: sp.csr_matrix) -> None:
    for part in ("data", "indices", "indptr"):
        np.save(folder / f"{name}.{part}.npy", getattr(m, part))
    np.save(folder / f"{name}.shape.npy", np.asarray(m.shape, dtype=np.int64))


def _load_csr(folder: Path, name: str) -> sp.csr_matrix:
    """A CSR matrix over read-only memory maps: workers share the pages instead of each holding a copy."""
    arrays = [np.load(folder / f"{name}.{p}.npy", mmap_mode="r") for p in ("data", "indices", "indptr")]
    shape = tuple(int(v) for v in np.load(folder / f"{name}.shape.npy"))
    m = sp.csr_matrix(shape, dtype=arrays[0].dtype)
    m.data, m.indices, m.indptr = arrays  # assigned, not passed: the constructor would copy and check them
    return m


def _save_join(folder: Path, join: _Join) -> None:
    _save_csr(folder, "x", join.x_join)
    for c, chunk in enumerate(join.chunks):
        _save_csr(folder, f"xt{c}", chunk)
    np.save(folder / "sizes.npy", join.sizes)


def _init_worker(folder: str, firsts: tuple[int, ...], k: int, rank_dtype: str) -> None:
    path = Path(folder)
    join = _Join(
        x_join=_load_csr(path, "x"),
        chunks=tuple(_load_csr(path, f"xt{c}") for c in range(len(firsts))),
        firsts=firsts,
        sizes=np.load(path / "sizes.npy"),
        k=k,
        rank_dtype=np.dtype(rank_dtype).type,
    )
    _WORKER["join"] = join


def _worker_block(block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _block_topk(_WORKER["join"], block[0], block[1])


def _pool_blocks(
    join: _Join, blocks: list[tuple[int, int]], workers: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Block results in block order from spawned workers (spawned, not forked: polars keeps thread pools
    that a forked child can deadlock on). Raises OSError/BrokenProcessPool when no pool can run here."""
    with tempfile.TemporaryDirectory(prefix="segos-join-") as tmp:
        _save_join(Path(tmp), join)
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(tmp, join.firsts, join.k, np.dtype(join.rank_dtype).name),
        ) as pool:
            yield from pool.map(_worker_block, blocks)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def topk_jaccard(
    signature: sp.csr_matrix,
    config: GraphConfig,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, SemanticStats]:
    """(src, dst, weight) of every node's top-k Jaccard neighbours, ties to the smaller index.

    `workers` (default: the CPUs this process may use) join blocks in parallel once the join holds at
    least `PARALLEL_MIN_PAIRS` candidate pairs; the result is the same for any number of workers."""
    n = signature.shape[0]
    x = signature.tocsr().astype(np.float32)
    x.data[:] = 1.0
    sizes = np.asarray(x.sum(axis=1)).ravel()
    df = np.asarray(x.sum(axis=0)).ravel()
    cap = df_cap(n, config)
    keep = df <= cap
    x_join = x[:, np.flatnonzero(keep)].tocsr()
    del x
    # upper bound of candidate neighbours per row, summed exactly (float64): it sizes the blocks
    cost = np.rint(x_join @ df[keep].astype(np.float64)).astype(np.int64)
    blocks = _row_blocks(cost, _PAIRS_PER_BLOCK, config.join_block_rows)
    join = _join(x_join, sizes, config.knn_k)
    workers = default_workers() if workers is None else workers
    results = None
    if workers > 1 and len(blocks) > 1 and int(cost.sum()) >= PARALLEL_MIN_PAIRS:
        try:
            results = _gather(_pool_blocks(join, blocks, workers), progress, len(blocks))
        except (BrokenProcessPool, OSError):
            results = None  # no pool here (e.g. no /dev/shm, spawn refused): join in this process
    if results is None:
        results = _gather((_block_topk(join, a, b) for a, b in blocks), progress, len(blocks))
    src_parts, dst_parts, w_parts = results
    src = np.concatenate(src_parts) if src_parts else np.empty(0, np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.empty(0, np.int64)
    weight = np.concatenate(w_parts) if w_parts else np.empty(0, np.float64)
    return src, dst, weight, _stats(n, src, dst, cap, int((~keep).sum()))


def _join(x_join: sp.csr_matrix, sizes: np.ndarray, k: int) -> _Join:
    """The join's inputs: Xᵀ in node chunks."""
    n = x_join.shape[0]
    firsts = tuple(range(0, max(n, 1), _CHUNK_COLUMNS))
    chunks = tuple(x_join[first : first + _CHUNK_COLUMNS].T.tocsr() for first in firsts)
    exact32 = n == 0 or float(sizes.max()) <= _FLOAT32_EXACT_SIZE
    return _Join(x_join, chunks, firsts, sizes, k, np.float32 if exact32 else np.float64)


def _gather(
    blocks: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]],
    progress: Callable[[int, int], None] | None,
    total: int,
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    src, dst, w = [], [], []
    for i, (s, d, x) in enumerate(blocks):
        src.append(s)
        dst.append(d)
        w.append(x)
        if progress is not None:
            progress(i + 1, total)
    return src, dst, w


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
    workers: int | None = None,
) -> tuple[pl.DataFrame, SemanticStats]:
    """The cold-start edge table: one `semantic` edge u→v per top-k neighbour v of u (round 0)."""
    config = config or GraphConfig()
    src, dst, weight, stats = topk_jaccard(signature, config, progress, workers)
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
