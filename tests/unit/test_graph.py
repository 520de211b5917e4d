"""Semantic kNN edges (SPEC §4) and the transition operator (SPEC §5)."""

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from segos_pipeline.config import GraphConfig, TransitionConfig
from segos_pipeline.graph.edges import EDGE_SCHEMA, violations
from segos_pipeline.graph.semantic_edges import semantic_edges, topk_jaccard
from segos_pipeline.graph.transition import transition_matrix


def _sig(sets: list[set[int]], vocab: int) -> sp.csr_matrix:
    rows = [i for i, s in enumerate(sets) for _ in s]
    cols = [t for s in sets for t in sorted(s)]
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(sets), vocab))


def _brute_topk(sets: list[set[int]], k: int) -> set[tuple[int, int]]:
    out = set()
    for u, a in enumerate(sets):
        scored = []
        for v, b in enumerate(sets):
            if u != v and a & b:
                scored.append((-len(a & b) / len(a | b), v))
        out |= {(u, v) for _, v in sorted(scored)[:k]}
    return out


def test_top1_with_ties_to_smaller_id_and_no_zero_overlap_edges():
    sets = [{0, 1}, {0, 1}, {0, 2}, {5}]  # 0↔1 identical; 2 ties between 0 and 1 (1/3 each); 3 isolated
    src, dst, w, stats = topk_jaccard(_sig(sets, 6), GraphConfig(knn_k=1))
    edges = dict(zip(src.tolist(), zip(dst.tolist(), w.tolist(), strict=True), strict=True))
    assert edges[0] == (1, 1.0) and edges[1] == (0, 1.0)
    assert edges[2] == (0, pytest.approx(1 / 3))  # tie broken to the smaller id
    assert 3 not in edges
    assert stats.unordered_pairs == 2 and stats.mutual_pairs == 1 and stats.isolated == 1
    assert stats.max_degree == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sets(st.integers(0, 14), min_size=1, max_size=6), min_size=2, max_size=25),
    st.integers(1, 3),
)
def test_join_equals_brute_force(sets, k):
    src, dst, _, _ = topk_jaccard(_sig(sets, 15), GraphConfig(knn_k=k))
    assert set(zip(src.tolist(), dst.tolist(), strict=True)) == _brute_topk(sets, k)


def test_blocked_join_equals_single_block(monkeypatch):
    rng = np.random.default_rng(0)
    sets = [set(rng.choice(40, size=rng.integers(1, 8), replace=False).tolist()) for _ in range(300)]
    full = topk_jaccard(_sig(sets, 40), GraphConfig(knn_k=2))
    monkeypatch.setattr("segos_pipeline.graph.semantic_edges._PAIRS_PER_BLOCK", 50)
    blocked = topk_jaccard(_sig(sets, 40), GraphConfig(knn_k=2, join_block_rows=7))
    for a, b in zip(full[:3], blocked[:3], strict=True):
        np.testing.assert_array_equal(a, b)


def test_frequent_tokens_skipped_only_above_cap():
    # token 0 is in every set; with the cap above the library size it still counts (one edge per skill)
    sets = [{0, i} for i in range(1, 6)]
    src, _, _, stats = topk_jaccard(_sig(sets, 6), GraphConfig(knn_k=1, df_cap_min=1000))
    assert len(src) == 5 and stats.capped_tokens == 0
    src, _, _, stats = topk_jaccard(_sig(sets, 6), GraphConfig(df_cap_min=2, df_cap_fraction=0.0))
    assert len(src) == 0 and stats.capped_tokens == 1


def test_edge_table_schema_and_invariants():
    ids = pl.Series(["a", "b", "c"])
    edges, _ = semantic_edges(ids, _sig([{0, 1}, {0, 1, 2}, {2}], 3))
    assert edges.schema == pl.Schema(EDGE_SCHEMA)
    assert set(edges["relation"]) == {"semantic"}
    assert (edges["w0"] == edges["weight"]).all() and (edges["round_created"] == 0).all()
    assert not any(violations(edges, ids).values())


def _edges(rows):
    return pl.DataFrame(
        [(s, d, r, w, w, 0, 0, 0, w) for s, d, r, w in rows], schema=EDGE_SCHEMA, orient="row"
    )


def test_reverse_coefficients_and_avoid_ignored():
    ids = pl.Series(["a", "b", "c"])
    edges = _edges([("a", "b", "dependency", 2.0), ("b", "c", "semantic", 0.5), ("a", "c", "avoid", 0.0)])
    t = transition_matrix(edges, ids, TransitionConfig()).toarray()
    # a: only a→b (2.0). b: b→c 0.5 and reverse dependency b→a 1.0·2.0. c: reverse semantic c→b 0.2·0.5
    np.testing.assert_allclose(t[0], [0, 1, 0])
    np.testing.assert_allclose(t[1], [2.0 / 2.5, 0, 0.5 / 2.5])
    np.testing.assert_allclose(t[2], [0, 1, 0])
    fwd = transition_matrix(edges, ids, TransitionConfig(), reverse=False).toarray()
    np.testing.assert_allclose(fwd, [[0, 1, 0], [0, 0, 1], [0, 0, 0]])  # c has no out-mass: empty row


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 9),
            st.integers(0, 9),
            st.sampled_from(["semantic", "workflow", "dependency", "alternative", "avoid"]),
            st.one_of(st.just(0.0), st.floats(1e-9, 5)),
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_transition_rows_are_stochastic_or_empty(rows, reverse):
    ids = pl.Series([f"s{i}" for i in range(10)])
    seen, clean = set(), []
    for s, d, r, w in rows:
        if s != d and (s, d, r) not in seen:
            seen.add((s, d, r))
            clean.append((f"s{s}", f"s{d}", r, 0.0 if r == "avoid" else w))
    t = transition_matrix(_edges(clean), ids, reverse=reverse)
    sums = np.asarray(t.sum(axis=1)).ravel()
    assert np.all((np.abs(sums - 1) < 1e-9) | (sums == 0))
    assert (t.data > 0).all()
    for s, d, r, w in clean:  # every traversable positive edge is present in the operator
        if r != "avoid" and w > 0:
            assert t[int(s[1:]), int(d[1:])] > 0


def test_violations_detect_each_invariant():
    ids = pl.Series(["a", "b", "c"])
    bad = _edges(
        [
            ("a", "a", "semantic", 1.0),
            ("a", "b", "semantic", -1.0),
            ("a", "b", "avoid", 1.0),
            ("c", "b", "avoid", 0.0),
            ("a", "zz", "workflow", 1.0),
            ("a", "c", "weird", 1.0),
        ]
    )
    v = violations(bad, ids)
    assert v["self_loops"] == 1 and v["negative_weights"] == 1 and v["avoid_nonzero_weight"] == 1
    assert v["avoid_not_canonical"] == 1 and v["unknown_endpoint"] == 1 and v["unknown_relation"] == 1
    assert v["avoid_on_navigation_pair"] == 1  # (a, b) has a semantic edge and an avoid edge
