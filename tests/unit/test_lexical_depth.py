"""Rankings cut at a depth: the lexical sums' paths agree bit for bit, a cut ranking's head is the full
ranking's, and the two-phase answer for queries past the postings budget scores what it holds exactly."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.evaluation.synthetic import generate_library, generate_queries
from segos_pipeline.retrieval import lexical, postings
from segos_pipeline.retrieval.postings import column_sums, high_tier, sums_at

from ..conftest import dense_graph, dense_rho, dense_semantic

DEPTH = 5


def _random_csc(rng: np.random.Generator, rows: int, cols: int, density: float) -> sp.csc_matrix:
    m = sp.random(rows, cols, density=density, format="csc", random_state=rng, dtype=np.float64)
    m.data = rng.uniform(0.1, 5.0, len(m.data))
    m.sort_indices()
    return m


def test_accumulated_sums_equal_the_sorted_sums_and_the_lookups_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(3)
    m = _random_csc(rng, 700, 60, 0.2)
    for _ in range(20):
        cols = np.sort(rng.choice(60, size=int(rng.integers(1, 12)), replace=False))
        weights = [1.0 + np.log(rng.integers(1, 4, len(cols))), rng.uniform(0.5, 3.0, len(cols))]
        pattern = [False, True]
        monkeypatch.setattr(postings, "_SORT_SHARE", 1e9)
        sorted_nodes, sorted_sums = column_sums(m, cols, weights, pattern)
        monkeypatch.setattr(postings, "_SORT_SHARE", 0.0)
        monkeypatch.setattr(postings, "_NODE_RANGE", int(rng.integers(1, 300)))  # many node ranges
        acc_nodes, acc_sums = column_sums(m, cols, weights, pattern)
        # a scipy without the private kernel `_accumulated` calls: the public bincount path
        monkeypatch.setattr(postings, "_csc_matvec", None)
        counted_nodes, counted_sums = column_sums(m, cols, weights, pattern)
        monkeypatch.undo()
        looked_up = sums_at(m, cols, weights, pattern, sorted_nodes)
        assert np.array_equal(sorted_nodes, acc_nodes) and np.array_equal(sorted_nodes, counted_nodes)
        for a, b, c, d in zip(sorted_sums, acc_sums, looked_up, counted_sums, strict=True):
            assert a.tobytes() == b.tobytes() == c.tobytes() == d.tobytes()
        dense = np.asarray(m[:, cols] @ weights[0]).ravel()
        assert np.allclose(dense[sorted_nodes], sorted_sums[0])
        assert not dense[np.setdiff1d(range(700), sorted_nodes)].any()


def test_high_tier_keeps_the_highest_share_of_frequent_columns_only():
    rng = np.random.default_rng(5)
    m = _random_csc(rng, 2_000, 40, 0.05)
    m = m[:, 1:]  # column 0 of what is left gets no postings below
    m = sp.hstack([sp.csc_matrix((2_000, 1)), m], format="csc")
    m.sort_indices()
    lengths = np.diff(m.indptr)
    high = high_tier(m, 90, 0.25)
    for j in range(40):
        kept = high.data[high.indptr[j] : high.indptr[j + 1]]
        rows = high.indices[high.indptr[j] : high.indptr[j + 1]]
        values = m.data[m.indptr[j] : m.indptr[j + 1]]
        if lengths[j] < 90:
            assert len(kept) == 0
            continue
        assert len(kept) >= int(0.25 * lengths[j]) and len(kept) < lengths[j]
        dropped = ~np.isin(m.indices[m.indptr[j] : m.indptr[j + 1]], rows)
        assert kept.min() >= values.max(initial=0.0, where=dropped)
        assert np.array_equal(np.asarray(m[rows, j].todense()).ravel(), kept)  # values kept at their rows


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[SnapshotStore, list[str]]:
    root = tmp_path_factory.mktemp("depth")
    generate_library(root / "lib", 600, seed=11)
    store = SnapshotStore(root / "store")
    build_cold_start(root / "lib", store)
    queries = [q["query"] for q in generate_queries(root / "lib", 40, seed=2)]
    return store, queries


def _real_or_synthetic(request: pytest.FixtureRequest, which: str) -> tuple[SnapshotStore, list[str]]:
    if which == "synthetic":
        return request.getfixturevalue("synthetic")
    shared: Path = request.getfixturevalue("shared_data")
    store = SnapshotStore(request.getfixturevalue("tmp_path") / "store")
    build_cold_start(shared / "skills", store)
    import json

    lines = (shared / "eval" / "skillsbench-dev-keywords.jsonl").read_text().splitlines()
    texts = (shared / "eval" / "skillsbench-dev.jsonl").read_text().splitlines()
    return store, [json.loads(x)["query"] for x in lines] + [json.loads(x)["instruction"] for x in texts]


@pytest.mark.parametrize("which", ["synthetic", "real"])
def test_a_ranking_cut_at_a_depth_has_the_full_rankings_head(request, monkeypatch, which):
    store, queries = _real_or_synthetic(request, which)
    monkeypatch.setattr(lexical, "_KEEP_ALL", 3)  # cut even the real library's few candidates
    r = Retriever(store.load())
    cut_any = False
    for q in queries:
        full, cut = r.rank(q), r.rank(q, depth=DEPTH)
        cut_any |= not cut.complete
        assert cut.top(DEPTH).tolist() == full.top(DEPTH).tolist()
        assert cut.seeds.tolist() == full.seeds.tolist()
        assert cut.evidence.coverage == full.evidence.coverage and not cut.evidence.approximate
        assert set(cut.candidates.tolist()) <= set(full.candidates.tolist())
        full_rho, full_semantic = dense_rho(full), dense_semantic(full)
        for i in cut.top(DEPTH).tolist():  # what a bundle shows of each skill, bit for bit
            assert cut.score_of(i) == full_rho[i] == dense_rho(cut)[i]
            assert cut.graph_of(i) == dense_graph(full)[i]
            assert cut.evidence.at(i) == full.evidence.at(i)
            assert cut.semantic_of(i) == (full_semantic[i] if full_semantic is not None else 0.0)
        # every skill the cut left out ranks below its DEPTH best
        left_out = np.setdiff1d(full.candidates, cut.candidates)
        if len(left_out) and len(cut.top(DEPTH)) == DEPTH:
            assert full_rho[left_out].max() < min(cut.score_of(i) for i in cut.top(DEPTH).tolist())
        assert r.retrieve(q).to_dict() == r.retrieve(q).to_dict()
        assert r.ranked_ids(q, DEPTH) == [str(r.ids[i]) for i in r.select(full, DEPTH)[0]]
    assert cut_any


def test_lexical_evidence_cut_at_a_depth_is_exact_where_it_holds(synthetic, monkeypatch):
    store, queries = synthetic
    monkeypatch.setattr(lexical, "_KEEP_ALL", 3)
    index = Retriever(store.load(), RetrievalConfig(semantic="none")).lexical
    for q in queries:
        full, cut = index.evidence(q), index.evidence(q, depth=DEPTH)
        held = np.searchsorted(full.nodes, cut.nodes)
        assert np.array_equal(full.nodes[held], cut.nodes)
        assert full.node_evidence[held].tobytes() == cut.node_evidence.tobytes()
        assert np.isin(full.nodes[full.node_name_match], cut.nodes).all()  # every named skill is held
        kth = np.sort(full.node_score)[::-1][min(DEPTH, len(full.nodes)) - 1] if len(full.nodes) else 0
        assert np.isin(full.nodes[full.node_score >= kth], cut.nodes).all()
        assert (full.coverage, full.top) == (cut.coverage, cut.top)
        extended = index.extend(cut, full.nodes)  # adding every skill back gives the full evidence
        assert extended.nodes.tolist() == full.nodes.tolist()
        assert extended.node_evidence.tobytes() == full.node_evidence.tobytes()


def test_two_phase_answers_score_what_they_hold_exactly(synthetic, monkeypatch):
    store, queries = synthetic
    monkeypatch.setattr(lexical, "_TIER_MIN_POSTINGS", 40)
    monkeypatch.setattr(lexical, "_TIER_SHARE", 0.25)
    monkeypatch.setattr(lexical, "_CANDIDATES", 30)
    config = RetrievalConfig(semantic="none", lexical_postings_budget=0)
    exact = Retriever(store.load(), replace(config, lexical_postings_budget=10**9)).lexical
    index = Retriever(store.load(), config).lexical
    agree = 0
    for q in queries:
        full, two = exact.evidence(q), index.evidence(q, depth=DEPTH)
        if not len(full.nodes):
            continue
        assert two.approximate and not two.complete
        held = np.searchsorted(full.nodes, two.nodes)
        assert np.array_equal(full.nodes[held], two.nodes)
        assert full.node_score[held].tobytes() == two.node_score.tobytes()  # held skills: exact scores
        assert two.top <= full.top and two.coverage <= full.coverage
        agree += two.top == full.top
    assert agree >= len(queries) // 2  # the first phase finds the best skill of most queries


def test_two_phase_reads_every_posting_when_no_token_is_frequent(synthetic, monkeypatch):
    store, queries = synthetic
    monkeypatch.setattr(lexical, "_TIER_MIN_POSTINGS", 10**9)  # no high tier: phase one reads everything
    monkeypatch.setattr(lexical, "_CANDIDATES", 10**6)
    config = RetrievalConfig(semantic="none", lexical_postings_budget=0)
    exact = Retriever(store.load(), replace(config, lexical_postings_budget=10**9))
    two = Retriever(store.load(), config)
    for q in queries:
        assert two.ranked_ids(q, DEPTH) == exact.ranked_ids(q, DEPTH)
        a, b = two.lexical.evidence(q, depth=DEPTH), exact.lexical.evidence(q)
        assert (a.coverage, a.top) == (b.coverage, b.top)
