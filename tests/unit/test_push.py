"""Local push PPR against a dense linear solve, and postings-based lexical evidence against the dense
computation it replaced."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from segos_pipeline import Retriever, SnapshotStore, build_cold_start
from segos_pipeline.config import retrieval_for
from segos_pipeline.graph.transition import row_normalize
from segos_pipeline.retrieval.push import PushOperator
from segos_pipeline.retrieval.sets import scattered, top_k

from ..conftest import dense_graph, dense_ppr, dense_rho, dense_semantic, simple_library

ALPHA = 0.2


def _exact(t: sp.csr_matrix, seeds: np.ndarray, weights: np.ndarray) -> np.ndarray:
    p = np.zeros(t.shape[0])
    p[seeds] = weights / weights.sum()
    return dense_ppr(t, p, ALPHA)


@st.composite
def graphs(draw):
    """A row-stochastic operator with forward and γ-weighted reverse entries, dangling rows and several
    components, plus seeds and their weights."""
    n = draw(st.integers(2, 60))
    m = draw(st.integers(0, 3 * n))
    u = np.array(draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)), dtype=np.int64)
    v = np.array(draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)), dtype=np.int64)
    w = np.array(draw(st.lists(st.floats(0.05, 3.0), min_size=m, max_size=m)))
    gamma = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    keep = u != v
    rows = np.concatenate([u[keep], v[keep]])
    cols = np.concatenate([v[keep], u[keep]])
    data = np.concatenate([w[keep], gamma * w[keep]])
    a = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
    a.sum_duplicates()
    a.eliminate_zeros()
    seeds = np.array(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=4))), dtype=np.int64)
    weights = np.array(draw(st.lists(st.floats(0.01, 2.0), min_size=len(seeds), max_size=len(seeds))))
    return row_normalize(a), seeds, weights


@settings(max_examples=150, deadline=None)
@given(graphs(), st.sampled_from([1e-2, 1e-3, 1e-4, 1e-6]))
def test_push_is_within_its_reported_residual_of_the_exact_ppr(case, epsilon):
    t, seeds, weights = case
    exact = _exact(t, seeds, weights)
    result = PushOperator(t).ppr(seeds, weights, ALPHA, epsilon)
    approx = np.zeros(t.shape[0])
    approx[result.nodes] = result.mass
    # Σr is exactly the L1 distance (M is column-stochastic), and every entry is an underestimate
    assert np.abs(exact - approx).sum() == pytest.approx(result.residual, abs=1e-9)
    assert np.all(approx <= exact + 1e-12)
    assert np.all(np.diff(result.nodes) > 0) and np.all(result.mass > 0)
    # the Andersen–Chung–Lang bound: edges read ≤ 1/(α·ε), however the graph looks
    assert result.work <= 1.0 / (ALPHA * epsilon) + 1e-9
    # every node left unpushed holds less than ε·(its out-degree, at least 1), so the residual is small
    # wherever the push went
    degree = np.maximum(np.diff(t.indptr), 1)
    reached = np.union1d(t[result.nodes].indices, seeds)
    assert result.residual <= epsilon * degree[reached].sum() + 1e-12


def test_push_converges_to_the_exact_vector_as_epsilon_falls():
    rng = np.random.default_rng(0)
    n = 1_500
    u, v = rng.integers(0, n, 6_000), rng.integers(0, n, 6_000)
    a = sp.csr_matrix((rng.random(6_000) + 0.1, (u, v)), shape=(n, n))
    a = row_normalize(a + 0.2 * a.T)
    seeds, weights = np.array([5, 17, 900]), np.array([1.0, 0.5, 0.25])
    exact = _exact(a, seeds, weights)
    errors, works = [], []
    for eps in (1e-3, 1e-4, 1e-5, 1e-6):
        r = PushOperator(a).ppr(seeds, weights, ALPHA, eps)
        approx = np.zeros(n)
        approx[r.nodes] = r.mass
        errors.append(np.abs(exact - approx).sum())
        works.append(r.work)
        assert len(r.nodes) < n or eps < 1e-4  # a coarse push stays local on a connected graph
    assert errors == sorted(errors, reverse=True) and errors[-1] < errors[0] / 10
    assert works == sorted(works)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(3, 40),
    st.floats(0.15, 1.0),
    st.booleans(),
    st.sampled_from([1e-3, 1e-5, 1e-7]),
    st.integers(0, 2**31),
)
def test_dense_rounds_push_the_same_bits_as_sparse_rounds(n, density, dangling, epsilon, seed):
    """A small dense graph (an evolved library's induced edges) finishes its push on the dense operator
    once every node has a slot: the result is the sparse push's, bit for bit, with its accounting."""
    rng = np.random.default_rng(seed)
    a = sp.csr_matrix(rng.random((n, n)) * (rng.random((n, n)) < density))
    a.setdiag(0.0)
    a.eliminate_zeros()
    if dangling:  # rows without out-edges teleport back to the seeds
        a = sp.csr_matrix(a.multiply((np.arange(n) % 5 != 0)[:, None]))
        a.eliminate_zeros()
    t = row_normalize(a)
    dense = PushOperator(t)
    sparse = PushOperator(t)
    sparse.dense = False
    if not dense.dense:  # too sparse to switch: nothing to compare
        return
    seeds = np.sort(rng.choice(n, size=min(n, 3), replace=False))
    weights = rng.random(len(seeds)) + 0.1
    x, y = dense.ppr(seeds, weights, ALPHA, epsilon), sparse.ppr(seeds, weights, ALPHA, epsilon)
    assert np.array_equal(x.nodes, y.nodes) and x.mass.tobytes() == y.mass.tobytes()
    assert (x.residual, x.pushes, x.work, x.rounds) == (y.residual, y.pushes, y.work, y.rounds)


def test_a_graph_too_sparse_or_too_large_is_pushed_sparsely():
    ring = sp.csr_matrix((np.ones(50), (np.arange(50), (np.arange(50) + 1) % 50)), shape=(50, 50))
    assert not PushOperator(row_normalize(ring)).dense
    assert PushOperator(row_normalize(sp.csr_matrix(np.ones((50, 50))))).dense
    assert not PushOperator(row_normalize(sp.csr_matrix(np.ones((1_100, 1_100))))).dense


def test_push_rejects_a_zero_threshold():
    with pytest.raises(ValueError, match="ε > 0"):
        PushOperator(sp.csr_matrix((2, 2))).ppr(np.array([0]), np.array([1.0]), ALPHA, 0.0)


# --------------------------------------------------------------------------------- through Retriever

CHAIN = {f"step-{i}": f"stage {i} of a pipeline, shared words alpha beta gamma {i}" for i in range(40)}


def test_retriever_ppr_is_the_push_within_its_residual(tmp_path):
    """The Retriever's PPR is the local push at the configured ε, on a small component as on any: within
    the residual it reports of the dense solve, and closer as ε falls."""
    st_ = SnapshotStore(tmp_path / "store")
    build_cold_start(simple_library(tmp_path / "lib", CHAIN), st_)
    snap = st_.load()
    base = retrieval_for(snap.manifest)
    seeds, weights = np.array([1, 7]), np.array([1.0, 0.5])
    exact = _exact(snap.transition.tocsr(), seeds, weights)
    errors = []
    for eps in (base.ppr_epsilon, 1e-9):
        r = Retriever(snap, base.with_overrides(ppr_epsilon=eps))
        error = np.abs(r.ppr(seeds, weights) - exact).sum()
        assert error == pytest.approx(r.push(seeds, weights).residual, abs=1e-12)
        errors.append(error)
    assert errors[1] < errors[0] / 100 and errors[1] < 1e-7


def test_a_zero_threshold_is_a_clear_error(tmp_path):
    st_ = SnapshotStore(tmp_path / "store")
    build_cold_start(simple_library(tmp_path / "lib", CHAIN), st_)
    snap = st_.load()
    r = Retriever(snap, retrieval_for(snap.manifest).with_overrides(ppr_epsilon=0.0))
    with pytest.raises(ValueError, match="ε > 0"):
        r.ppr(np.array([1]), np.array([1.0]))


# ------------------------------------------------------------------------- the real library (shared)


def _queries(shared_data, *names):
    out = []
    for name in names:
        for line in (shared_data / "eval" / name).read_text().splitlines():
            if line.strip():
                q = json.loads(line)
                out.append(q.get("instruction") or q.get("query"))
    return out


@pytest.fixture(scope="module")
def real_snapshot(tmp_path_factory):
    from ..conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available: {SHARED_DATA} is absent")
    st_ = SnapshotStore(tmp_path_factory.mktemp("real") / "store")
    build_cold_start(SHARED_DATA / "skills", st_)
    return st_.load()


def test_push_ranks_the_real_queries_as_a_near_exact_push(real_snapshot, shared_data):
    """The default ε ranks the real queries (top 10) as a push to ε = 1e-10 does: the residual it leaves
    (about 1e-3) moves no skill across a neighbour."""
    base = retrieval_for(real_snapshot.manifest)
    fine = Retriever(real_snapshot, base.with_overrides(ppr_epsilon=1e-10))
    push = Retriever(real_snapshot, base)
    queries = _queries(shared_data, "skillsbench-dev.jsonl", "skillsbench-dev-keywords.jsonl")
    assert len(queries) >= 80
    for q in queries:
        a, b = fine.rank(q), push.rank(q)
        np.testing.assert_array_equal(a.seeds, b.seeds)
        np.testing.assert_array_equal(a.top(10), b.top(10))
        m = _fused(push, b)
        pushed, exact = push.push(b.seeds, m[b.seeds]), fine.push(b.seeds, m[b.seeds])
        assert np.abs(dense_graph(a) - dense_graph(b)).sum() <= pushed.residual + exact.residual + 1e-12


def _fused(r, ranking):
    """m over all skills: lexical evidence fused with the semantic one when the query was embedded."""
    m = scattered(ranking.n, ranking.evidence.nodes, ranking.evidence.node_evidence)
    if dense_semantic(ranking) is None:
        return m
    lam = r.fusion_weight(ranking.evidence)
    return (1.0 - lam) * m + lam * dense_semantic(ranking)


def _dense_evidence(index, query):
    """The lexical evidence as it was computed before postings: dense arrays over every skill."""
    n = index.n

    def column_sum(m, cols, col_weights=None, pattern=False):
        if len(cols) == 0:
            return np.zeros(n)
        starts, stops = m.indptr[cols], m.indptr[cols + 1]
        lengths = stops - starts
        if lengths.sum() == 0:
            return np.zeros(n)
        offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        pos = np.arange(lengths.sum()) + offsets
        values = np.ones(len(pos)) if pattern else m.data[pos]
        if col_weights is not None:
            values = values * np.repeat(col_weights, lengths)
        return np.bincount(m.indices[pos], weights=values, minlength=n)

    cols, weights, known, _, _ = index.query_columns(query)
    score = column_sum(index.matrix, cols, weights)
    matched = column_sum(index.name_matrix, known)
    name_match = (index.name_len > 0) & (matched >= index.name_len)
    top = score.max() if n else 0.0
    evidence = (score / top if top > 0 else np.zeros(n)) + index.config.name_bonus * name_match
    idf = lambda df: np.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731
    coverage = 0.0
    if top > 0 and len(cols):
        covered = column_sum(index.matrix, cols, idf(index.df[cols]), pattern=True)
        coverage = float(covered.max() / idf(index.df[known]).sum())
    return score, name_match, evidence, coverage


@pytest.mark.parametrize("grouping", ["by size", "sort", "sparse product"])
def test_postings_evidence_equals_the_dense_computation_on_real_queries(
    real_snapshot, shared_data, monkeypatch, grouping
):
    share = {"by size": None, "sort": float("inf"), "sparse product": 0.0}[grouping]
    if share is not None:  # force one way of summing the postings for every query
        monkeypatch.setattr("segos_pipeline.retrieval.postings._SORT_SHARE", share)
    index = Retriever(real_snapshot).lexical
    queries = _queries(
        shared_data, "skillsbench-dev.jsonl", "skillsbench-dev-keywords.jsonl", "metatool-dev/dev.jsonl"
    )
    assert len(queries) > 1_000
    for q in [*queries, "", "zzzz unknownword", "pdf"]:
        ev = index.evidence(q)
        score, name_match, evidence, coverage = _dense_evidence(index, q)
        np.testing.assert_array_equal(scattered(ev.n, ev.nodes, ev.node_score), score)
        np.testing.assert_array_equal(scattered(ev.n, ev.nodes, ev.node_name_match), name_match)
        np.testing.assert_array_equal(scattered(ev.n, ev.nodes, ev.node_evidence), evidence)
        assert ev.coverage == coverage
        assert set(ev.nodes.tolist()) == set(np.flatnonzero(evidence > 0).tolist())


def test_ranking_equals_the_dense_ranking_on_real_queries(real_snapshot, shared_data):
    """rank() over sparse evidence gives the ρ, candidates and seeds of the dense formulation."""
    r = Retriever(real_snapshot)
    cfg = r.config
    for q in _queries(shared_data, "skillsbench-dev.jsonl", "skillsbench-dev-keywords.jsonl"):
        ranking = r.rank(q)
        m = scattered(ranking.n, ranking.evidence.nodes, ranking.evidence.node_evidence)
        if dense_semantic(ranking) is not None:
            m = (1.0 - r.fusion_weight(ranking.evidence)) * m + r.fusion_weight(
                ranking.evidence
            ) * dense_semantic(ranking)
        seeds = np.sort(top_k(m, np.flatnonzero(m > 0), cfg.seed_k))
        graph = r.ppr(seeds, m[seeds]) if len(seeds) else np.zeros(r.n)
        np.testing.assert_array_equal(ranking.seeds, seeds)
        np.testing.assert_array_equal(dense_rho(ranking), graph + cfg.rerank_mu * m)
        np.testing.assert_array_equal(ranking.candidates, np.flatnonzero((graph > 0) | (m > 0)))


# ------------------------------------------------------------------------------------- sorted sets

_sets = st.lists(st.integers(0, 50), max_size=30).map(lambda v: np.unique(np.array(v, dtype=np.int64)))


@settings(max_examples=300, deadline=None)
@given(_sets, _sets, st.lists(st.integers(0, 50), max_size=30))
def test_sorted_sets_equal_numpy(a, b, raw):
    from segos_pipeline.arrays import unique
    from segos_pipeline.retrieval.sets import union_positions

    raw = np.array(raw, dtype=np.int64)
    np.testing.assert_array_equal(unique(raw), np.unique(raw))
    u, ia, ib = union_positions(a, b)
    np.testing.assert_array_equal(u, np.union1d(a, b))
    np.testing.assert_array_equal(u[ia], a)
    np.testing.assert_array_equal(u[ib], b)
