"""Deterministic token-Jaccard kNN edges (SPEC §4), as blocked sparse-matrix products.

Intersections come from X·Xᵀ on the binary node × token matrix, one block of rows at a time; blocks are
sized by an upper bound on the product's non-zeros so peak memory stays bounded on any library size.
There is no Python loop over pairs of skills.

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

# Upper bound of candidate pairs held at once (~16 bytes each in the block's product and its Jaccard).
_PAIRS_PER_BLOCK = 8_000_000
# Below this many candidate pairs in all (about a second of work) a pool costs more than it saves: the
# real library and every test library join in this process.
PARALLEL_MIN_PAIRS = 20_000_000


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


def _block_topk(
    x_join: sp.csr_matrix, xt: sp.csr_matrix, sizes: np.ndarray, a: int, b: int, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k (src, dst, Jaccard) of rows [a, b): one block of X·Xᵀ, never the whole product."""
    inter = (x_join[a:b] @ xt).tocsr()
    rows, cols, jac = _block_jaccard(inter, a, sizes)
    keep_rows, keep_cols, keep_w = _row_topk(rows, cols, jac, inter.indptr, k)
    return keep_rows + a, keep_cols, keep_w


# ----------------------------------------------------------------------------------- the process pool

_WORKER: dict[str, object] = {}  # a pool worker's join matrices, mapped once by `_init_worker`


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


def _init_worker(folder: str, k: int) -> None:
    path = Path(folder)
    _WORKER.update(
        x_join=_load_csr(path, "x"), xt=_load_csr(path, "xt"), sizes=np.load(path / "sizes.npy"), k=k
    )


def _worker_block(block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = _WORKER
    return _block_topk(w["x_join"], w["xt"], w["sizes"], block[0], block[1], w["k"])  # type: ignore[arg-type]


def _pool_blocks(
    x_join: sp.csr_matrix,
    xt: sp.csr_matrix,
    sizes: np.ndarray,
    blocks: list[tuple[int, int]],
    k: int,
    workers: int,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Block results in block order from spawned workers (spawned, not forked: polars keeps thread pools
    that a forked child can deadlock on). Raises OSError/BrokenProcessPool when no pool can run here."""
    with tempfile.TemporaryDirectory(prefix="segos-join-") as tmp:
        folder = Path(tmp)
        _save_csr(folder, "x", x_join)
        _save_csr(folder, "xt", xt)
        np.save(folder / "sizes.npy", sizes)
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(tmp, k),
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
    xt = x_join.T.tocsr()
    cost = (x_join @ df[keep]).astype(np.int64)  # upper bound of candidate neighbours per row
    blocks = _row_blocks(cost, _PAIRS_PER_BLOCK, config.join_block_rows)
    workers = default_workers() if workers is None else workers
    results = None
    if workers > 1 and len(blocks) > 1 and int(cost.sum()) >= PARALLEL_MIN_PAIRS:
        try:
            results = _gather(
                _pool_blocks(x_join, xt, sizes, blocks, config.knn_k, workers), progress, len(blocks)
            )
        except (BrokenProcessPool, OSError):
            results = None  # no pool here (e.g. no /dev/shm, spawn refused): join in this process
    if results is None:
        serial = (_block_topk(x_join, xt, sizes, a, b, config.knn_k) for a, b in blocks)
        results = _gather(serial, progress, len(blocks))
    src_parts, dst_parts, w_parts = results
    src = np.concatenate(src_parts) if src_parts else np.empty(0, np.int64)
    dst = np.concatenate(dst_parts) if dst_parts else np.empty(0, np.int64)
    weight = np.concatenate(w_parts) if w_parts else np.empty(0, np.float64)
    return src, dst, weight, _stats(n, src, dst, cap, int((~keep).sum()))


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
