"""Inverted lists over unit vectors (IVF): a query reads a bounded number of rows, whatever the size.

The vectors are clustered once by spherical k-means (2√n lists, trained on a fixed-seed sample, so the same
vectors always give the same lists, bit for bit) and stored again in list order: list l is the contiguous
block `vectors[offsets[l]:offsets[l + 1]]`. A query ranks the list centroids and scores the rows of the best
lists, best first, until it has read `min_rows`: one matrix-vector product per run of adjacent chosen lists,
reading contiguous memory, with no gather of scattered rows and nothing the size of the library. Its cost
is that of scoring 2√n centroids and about `min_rows` rows: at a million skills 2,000 centroids and some
ten thousand rows instead of a million. Approximate: a row whose list is not read is not seen (the
semantic index measures what that costs against the exact pass). A stack of query vectors (a request and
its sentences) reads the union of their lists once, one matrix product a span for all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..arrays import ranges

TRAIN_ROWS_PER_LIST = 64  # k-means sample: enough rows per centroid for stable clusters
TRAIN_ITERATIONS = 8
ASSIGN_CHUNK = 65_536  # rows scored against the centroids at once: bounds the (chunk × lists) matrix
SEED = 0
# Lists per √n rows. Smaller lists let a query's row budget cover more of the nearest clusters: on the
# synthetic million-skill library recall of the exact top 20 rose a little with each doubling of the lists
# per √n, while the build took several times longer (and every version whose texts changed builds its
# own) and a query's time grew with the centroids and the matrix-vector products it makes
# (benchmarks/results/semantic.md, docs/benchmarks.md). 2: most of the recall of 4 at a fraction of its build.
LISTS_PER_ROOT = 2


@dataclass(frozen=True)
class InvertedLists:
    centroids: np.ndarray  # float32 (lists, d), unit rows
    order: np.ndarray  # int64 row ids grouped by list (list 0's rows first, ascending within a list)
    offsets: np.ndarray  # int64 (lists + 1,): list l holds order[offsets[l]:offsets[l + 1]]
    vectors: np.ndarray  # float32 (rows, d): vectors[i] is the source row order[i] (list order)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def choose(self, q: np.ndarray, min_rows: int) -> np.ndarray:
        """The lists each query vector (`q`: one, or a (k, d) stack) needs: its lists by centroid similarity,
        best first, until they hold at least `min_rows` rows (all lists when there are fewer rows). One
        vector's lists best first; the union of several vectors' lists ascending."""
        # one product with the centroids as stored on the left (transposed, they are copied first): a
        # matrix-vector product for one vector
        ranked = np.argsort(-(self.centroids @ q.T).T, axis=-1, kind="stable")  # (lists,) or (k, lists)
        take = np.count_nonzero(np.cumsum(self.sizes[ranked], axis=-1) < min_rows, axis=-1) + 1
        if ranked.ndim == 1:
            return ranked[:take]
        return np.unique(np.concatenate([lists[:t] for lists, t in zip(ranked, take.tolist(), strict=True)]))

    def spans(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[start, end) positions (in list order) of the chosen lists, ascending, adjacent lists merged
        into one span so each span is one contiguous read."""
        lists = np.sort(chosen)
        starts, ends = self.offsets[lists], self.offsets[lists + 1]
        keep = ends > starts  # an empty list reads nothing
        starts, ends = starts[keep], ends[keep]
        if len(starts) == 0:
            return starts, ends
        new = np.concatenate(([True], starts[1:] != ends[:-1]))  # a span starts where the last one stopped
        last = np.concatenate((np.flatnonzero(new)[1:] - 1, [len(ends) - 1]))
        return starts[new], ends[last]

    def scan(self, q: np.ndarray, min_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, their similarity to `q`) over the rows of the lists `choose` picks, read span by span
        (row ids ascending by list position, not by id): (rows,) for one vector; for a (k, d) stack of
        vectors a (k, rows) matrix over the union of their lists, each read once (a vector is also scored
        on the other vectors' lists, so it sees at least its own lists' rows)."""
        q = np.asarray(q, dtype=self.vectors.dtype)
        # (rows,) or (rows, k): the rows as stored on the left (transposed, they are copied first); the
        # (k, rows) result is a transposed view
        qt = q.T
        if min_rows >= len(self.order):  # every list, one span: what the spans below come to, without them
            return self.order, (self.vectors @ qt).T
        starts, ends = self.spans(self.choose(q, min_rows))
        sims = [self.vectors[s:e] @ qt for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
        if not sims:
            return self.order[:0], np.zeros((*q.shape[:-1], 0), dtype=self.vectors.dtype)
        return self.order[ranges(starts, ends)], np.concatenate(sims).T


def list_count(n: int) -> int:
    """LISTS_PER_ROOT·√n lists, at least one (and never more lists than rows)."""
    return max(1, min(n, round(LISTS_PER_ROOT * math.sqrt(n))))


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as float32 (semantic.py's vectors and queries too)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def assign(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The most similar centroid of every row (ties to the smaller list), in chunks."""
    out = np.empty(len(vectors), dtype=np.int64)
    ct = np.ascontiguousarray(centroids.T)
    for start in range(0, len(vectors), ASSIGN_CHUNK):
        out[start : start + ASSIGN_CHUNK] = np.argmax(vectors[start : start + ASSIGN_CHUNK] @ ct, axis=1)
    return out


def train(
    vectors: np.ndarray, lists: int, seed: int = SEED, iterations: int = TRAIN_ITERATIONS
) -> np.ndarray:
    """Spherical k-means centroids of `vectors` (unit rows), trained on a seeded sample."""
    n = len(vectors)
    rng = np.random.default_rng(seed)
    rows = min(n, TRAIN_ROWS_PER_LIST * lists)
    sample = vectors[np.sort(rng.choice(n, size=rows, replace=False))] if rows < n else vectors
    centroids = sample[np.sort(rng.choice(len(sample), size=lists, replace=False))].copy()
    for _ in range(iterations):
        labels = assign(sample, centroids)
        members = sp.csr_matrix(
            (np.ones(len(sample), dtype=np.float32), (labels, np.arange(len(sample)))),
            shape=(lists, len(sample)),
        )
        sums = np.asarray(members @ sample, dtype=np.float32)
        empty = np.flatnonzero(np.asarray(members.sum(axis=1)).ravel() == 0)
        if len(empty):  # an empty list restarts at a sample row, so every list ends up holding rows
            sums[empty] = sample[rng.choice(len(sample), size=len(empty), replace=False)]
        centroids = unit_rows(sums)
    return centroids


def build_lists(vectors: np.ndarray, lists: int | None = None, seed: int = SEED) -> InvertedLists:
    """Inverted lists over `vectors` (unit rows, float32), with a copy of the vectors in list order. One
    list needs no training and no copy: it is the vectors as they are, read whole (an exact search)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    k = list_count(len(vectors)) if lists is None else lists
    if k == 1:
        n = len(vectors)
        centroid = unit_rows(vectors.sum(axis=0, keepdims=True))
        return InvertedLists(
            centroid, np.arange(n, dtype=np.int64), np.array([0, n], dtype=np.int64), vectors
        )
    centroids = train(vectors, k, seed)
    labels = assign(vectors, centroids)
    order = np.argsort(labels, kind="stable").astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(np.bincount(labels, minlength=k)))).astype(np.int64)
    return InvertedLists(centroids, order, offsets, vectors[order])


def check_lists(lists: InvertedLists, source: np.ndarray, spot_rows: int = 64) -> str | None:
    """Why `lists` cannot be the lists of `source` (None when they can): shapes, offsets, a permutation
    for `order`, and a seeded sample of rows compared bit for bit with the source rows they claim to be
    (a full comparison would read every vector; a foreign entry of the same shape fails the sample)."""
    n, d = source.shape
    c, order, offsets, vectors = lists.centroids, lists.order, lists.offsets, lists.vectors
    if c.ndim != 2 or c.shape[1] != d or len(c) == 0:
        return "centroids do not match the vectors' dimension"
    if vectors.shape != (n, d) or vectors.dtype != np.float32:
        return "list-ordered vectors have the wrong shape or type"
    if offsets.shape != (len(c) + 1,) or offsets[0] != 0 or offsets[-1] != n or (np.diff(offsets) < 0).any():
        return "offsets do not cover the rows"
    if order.shape != (n,) or (n and (order.min() < 0 or order.max() >= n)):
        return "order is not a permutation of the rows"
    if n and not (np.bincount(order, minlength=n) == 1).all():
        return "order is not a permutation of the rows"
    if n:
        pos = np.random.default_rng(SEED).choice(n, size=min(n, spot_rows), replace=False)
        if not np.array_equal(np.asarray(vectors[pos]), source[order[pos]]):
            return "list-ordered vectors are not the source rows"
    return None
