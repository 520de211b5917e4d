"""Inverted lists over unit vectors (IVF): a query reads a bounded number of rows, whatever the size.

The vectors are clustered once by spherical k-means (√n lists, trained on a fixed-seed sample, so the same
vectors always give the same lists); a query ranks the list centroids and reads the rows of the best lists
until it has read `min_rows`. Its cost is that of scoring √n centroids and `min_rows` rows: at a million
skills about 1,000 centroids and 33,000 rows instead of a million rows. Approximate: a row whose list is
not read is not seen (the semantic index measures what that costs against the exact pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

TRAIN_ROWS_PER_LIST = 64  # k-means sample: enough rows per centroid for stable clusters
TRAIN_ITERATIONS = 8
ASSIGN_CHUNK = 65_536  # rows scored against the centroids at once: bounds the (chunk × lists) matrix
SEED = 0


@dataclass(frozen=True)
class InvertedLists:
    centroids: np.ndarray  # float32 (lists, d), unit rows
    order: np.ndarray  # int64 row ids grouped by list (list 0's rows first, ascending within a list)
    offsets: np.ndarray  # int64 (lists + 1,): list l holds order[offsets[l]:offsets[l + 1]]

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def probe(self, q: np.ndarray, min_rows: int) -> np.ndarray:
        """Row ids of the lists whose centroids are most similar to `q`, taken best first until at least
        `min_rows` rows are in (all rows when there are fewer)."""
        scores = self.centroids @ q
        ranked = np.argsort(-scores, kind="stable")
        covered = np.cumsum(self.sizes[ranked])
        take = int(np.searchsorted(covered, min_rows)) + 1
        chosen = ranked[:take]
        starts, ends = self.offsets[chosen], self.offsets[chosen + 1]
        # One gather over the chosen ranges of `order`, without a Python loop over the lists.
        lengths = ends - starts
        pos = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        return self.order[pos + np.arange(int(lengths.sum()))]


def list_count(n: int) -> int:
    """√n lists, at least one (and never more lists than rows)."""
    return max(1, min(n, round(math.sqrt(n))))


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


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
        centroids = _unit(sums)
    return centroids


def build_lists(vectors: np.ndarray, lists: int | None = None, seed: int = SEED) -> InvertedLists:
    """Inverted lists over `vectors` (unit rows, float32)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    k = list_count(len(vectors)) if lists is None else lists
    centroids = train(vectors, k, seed)
    labels = assign(vectors, centroids)
    order = np.argsort(labels, kind="stable").astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(np.bincount(labels, minlength=k)))).astype(np.int64)
    return InvertedLists(centroids, order, offsets)
