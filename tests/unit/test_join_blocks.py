"""The blocked join against a dense reference: same edges, same float64 weights, same order, same stats.

The reference is the definition written out densely: Jaccard of every pair in float64 over the joined tokens
(set sizes count every token), no self-pairs, each row's top k by Jaccard then smaller column, Jaccard > 0,
output by row then column. Equality is exact (`array_equal`), so a wrong tie-break or a weight computed
another way fails.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from segos_pipeline.config import GraphConfig
from segos_pipeline.graph import semantic_edges as join


def _reference(x: np.ndarray, k: int, cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    binary = (x != 0).astype(np.float64)
    sizes = binary.sum(axis=1)
    joined = binary[:, binary.sum(axis=0) <= cap]
    shared = joined @ joined.T
    union = sizes[:, None] + sizes[None, :] - shared
    jac = np.divide(shared, union, out=np.zeros_like(shared), where=union > 0)  # empty sets: no overlap
    np.fill_diagonal(jac, 0.0)
    src, dst = [], []
    for row in range(len(x)):
        cols = np.flatnonzero(jac[row] > 0)
        order = np.lexsort((cols, -jac[row, cols]))  # Jaccard descending, then the smaller column
        src += [row] * min(k, len(cols))
        dst += sorted(cols[order[:k]].tolist())
    src_a, dst_a = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    s = shared[src_a, dst_a]
    return src_a, dst_a, s / (sizes[src_a] + sizes[dst_a] - s)


def _random_sets(seed: int) -> np.ndarray:
    """Small vocabularies and duplicated rows, so ties (equal Jaccard, identical sets) are frequent."""
    rng = np.random.default_rng(seed)
    n, vocab = int(rng.integers(2, 120)), int(rng.integers(2, 30))
    x = (rng.random((n, vocab)) < rng.uniform(0.05, 0.5)).astype(np.float64)
    dupes = rng.integers(0, n, size=n // 4)
    return np.vstack([x, x[dupes]])


def _assert_same(got: tuple, want: tuple) -> None:
    for g, w in zip(got[:3], want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("seed", range(25))
def test_join_equals_dense_reference(seed, k, monkeypatch):
    x = _random_sets(seed)
    rng = np.random.default_rng(1000 + seed)
    cap = int(rng.integers(1, len(x) + 2))  # some seeds skip frequent tokens, some skip none
    # several blocks and several node chunks, so the per-chunk top k and their merge are exercised
    monkeypatch.setattr(join, "_CHUNK_COLUMNS", int(rng.integers(1, len(x) + 1)))
    config = GraphConfig(knn_k=k, df_cap_min=cap, join_block_rows=int(rng.integers(1, 40)))
    _assert_same(join.topk_jaccard(sp.csr_matrix(x), config, workers=1), _reference(x, k, cap))


@pytest.mark.parametrize("k", [1, 2, 5])
def test_float64_ranking_equals_float32_ranking(k, monkeypatch):
    x = _random_sets(7)
    config = GraphConfig(knn_k=k)
    fast = join.topk_jaccard(sp.csr_matrix(x), config, workers=1)
    monkeypatch.setattr(join, "_FLOAT32_EXACT_SIZE", 0)  # every library ranks on float64
    exact = join.topk_jaccard(sp.csr_matrix(x), config, workers=1)
    _assert_same(fast, exact[:3])
    assert fast[3] == exact[3]
    _assert_same(exact, _reference(x, k, config.df_cap_min))


def _near_tie() -> np.ndarray:
    """Row 0 (3,000 tokens) and two neighbours whose Jaccards differ by less than float32 resolution:
    node 1 shares 2,904 of its 5,711 tokens (J = 2904/5807), node 2 shares 2,903 of 5,708 (J = 2903/5805,
    larger by 3e-8); both round to one float32, so a float32 ranking would give node 1."""
    a, b1, s1, b2, s2 = 3000, 5711, 2904, 5708, 2903
    assert np.float32(s1) / np.float32(a + b1 - s1) == np.float32(s2) / np.float32(a + b2 - s2)
    assert s1 / (a + b1 - s1) < s2 / (a + b2 - s2)
    rows, cols = [], []
    rows += [0] * a
    cols += list(range(a))
    rows += [1] * b1
    cols += list(range(s1)) + list(range(10_000, 10_000 + b1 - s1))
    rows += [2] * b2
    cols += list(range(s2)) + list(range(20_000, 20_000 + b2 - s2))
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(3, 30_000))


def test_large_sets_rank_on_float64(monkeypatch):
    sig = _near_tie()
    src, dst, w, _ = join.topk_jaccard(sig, GraphConfig(knn_k=1), workers=1)
    assert dst[src == 0].tolist() == [2]  # the larger Jaccard, not the float32 tie's smaller column
    _assert_same((src, dst, w), _reference(sig.toarray(), 1, 1000))
    monkeypatch.setattr(join, "_FLOAT32_EXACT_SIZE", 10_000)  # what the size guard prevents
    src, dst, _, _ = join.topk_jaccard(sig, GraphConfig(knn_k=1), workers=1)
    assert dst[src == 0].tolist() == [1]


def test_pool_with_several_chunks_equals_reference(monkeypatch):
    x = _random_sets(11)
    monkeypatch.setattr(join, "_CHUNK_COLUMNS", 17)  # several chunk files mapped by every worker
    monkeypatch.setattr(join, "PARALLEL_MIN_PAIRS", 0)  # force the pool on this small join
    pooled_blocks = []
    real_pool = join._pool_blocks

    def counted(*args, **kwargs):  # the real pool, its blocks counted: the test fails if none ran there
        for result in real_pool(*args, **kwargs):
            pooled_blocks.append(result)
            yield result

    monkeypatch.setattr(join, "_pool_blocks", counted)
    config = GraphConfig(knn_k=2, join_block_rows=9)
    pooled = join.topk_jaccard(sp.csr_matrix(x), config, workers=2)
    _assert_same(pooled, _reference(x, 2, config.df_cap_min))
    assert len(pooled_blocks) == 3  # 21 rows in blocks of 9, each block over two chunks of nodes
