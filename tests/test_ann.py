"""Inverted lists (retrieval/ann.py) and the semantic index's use of them past `semantic_lists_min_skills`."""

from __future__ import annotations

import numpy as np
import pytest

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore
from segos_pipeline.retrieval import semantic as semantic_mod
from segos_pipeline.retrieval.ann import build_lists, list_count


def _clustered(n: int, d: int = 32, clusters: int = 60, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + 0.7 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_every_row_is_in_exactly_one_list_and_lists_are_deterministic():
    x = _clustered(5_000)
    a, b = build_lists(x), build_lists(x)
    assert len(a.centroids) == list_count(5_000) == 71
    assert np.array_equal(np.sort(a.order), np.arange(5_000))
    assert a.offsets[0] == 0 and a.offsets[-1] == 5_000 and (a.sizes > 0).all()
    assert np.array_equal(a.order, b.order) and np.array_equal(a.centroids, b.centroids)
    np.testing.assert_allclose(np.linalg.norm(a.centroids, axis=1), 1.0, rtol=1e-5)


def test_a_probe_reads_the_nearest_lists_whole_until_it_has_enough_rows():
    x = _clustered(5_000)
    lists = build_lists(x)
    q = x[17]
    rows = lists.probe(q, 600)
    ranked = np.argsort(-(lists.centroids @ q), kind="stable")
    covered = np.cumsum(lists.sizes[ranked])
    take = int(np.searchsorted(covered, 600)) + 1
    bounds = lists.offsets
    expected = np.concatenate([lists.order[bounds[li] : bounds[li + 1]] for li in ranked[:take]])
    assert np.array_equal(rows, expected)
    assert 600 <= len(rows) < 600 + lists.sizes.max()
    assert np.array_equal(np.sort(lists.probe(q, 10**9)), np.arange(5_000))  # more than there are: all


def test_the_rows_read_hold_the_exact_nearest_neighbours():
    """Recall of the exact top 20 among the rows a probe reads (a tenth of the library)."""
    x = _clustered(20_000)
    lists = build_lists(x)
    rng = np.random.default_rng(0)
    recall = []
    for i in rng.integers(0, len(x), 40):
        exact = np.argpartition(-(x @ x[i]), 20)[:20]
        recall.append(np.isin(exact, lists.probe(x[i], 2_000)).mean())
    assert np.mean(recall) >= 0.95


@pytest.fixture
def ivf_everywhere(monkeypatch):
    """The large-library path on the 69-skill demo (with `LISTS`: lists from 20 skills): a probe reads
    about half of them, and every row it reads is scored exactly (the shortlist is larger than the probe)."""
    monkeypatch.setattr(semantic_mod, "FUNNEL_MIN_SKILLS", 10)
    monkeypatch.setattr(semantic_mod, "FUNNEL_MIN_SHORTLIST", 100)
    monkeypatch.setattr(semantic_mod, "IVF_SCAN_ROWS", 30)


LISTS = RetrievalConfig(semantic_lists_min_skills=20)
QUERIES = ("convert a pdf to text", "train a model on tabular data", "deploy a container", "resize photos")


def test_semantic_evidence_through_inverted_lists_is_the_exact_pass_over_the_rows_read(
    demo_store, ivf_everywhere
):
    snap = SnapshotStore(demo_store).load()
    ivf = Retriever(snap, LISTS).semantic
    assert ivf is not None and ivf.lists is not None
    cached = list((demo_store / "cache" / "semantic-lists").iterdir())
    assert len(cached) == 1 and (cached[0] / "complete").is_file()
    for q in QUERIES:
        rows = ivf.shortlist(ivf.query_vector(q))
        assert rows is not None and 30 <= len(rows) < 69
        sims = np.full(69, -np.inf)
        sims[rows] = ivf.similarities(q)[rows]  # skills the probe did not read get nothing
        z_ivf = ivf.evidence(q)
        assert np.count_nonzero(z_ivf) > 0
        np.testing.assert_allclose(
            z_ivf, semantic_mod.head_scores(sims, ivf.candidates, ivf.min_cosine), rtol=0, atol=1e-6
        )
    # A second process-level load reads the cached lists instead of building them again.
    semantic_mod._RECENT_LISTS.clear()
    again = Retriever(SnapshotStore(demo_store).load(), LISTS).semantic
    assert np.array_equal(again.lists.order, ivf.lists.order)


def test_a_patched_vector_is_scored_even_off_the_probed_lists(demo_store, ivf_everywhere):
    snap = SnapshotStore(demo_store).load()
    sem = Retriever(snap, LISTS).semantic
    q = QUERIES[0]
    qv = sem.query_vector(q)
    rows = sem.shortlist(qv)
    outside = int(np.setdiff1d(np.arange(sem.matrix.shape[0]), rows)[0])
    z = sem.evidence(q, {outside: qv})  # give it the query's own vector: it must come first
    assert z[outside] == pytest.approx(1.0)


def test_lists_are_off_when_the_setting_is_zero_or_the_library_smaller(demo_store, ivf_everywhere):
    snap = SnapshotStore(demo_store).load()
    assert Retriever(snap, RetrievalConfig(semantic_lists_min_skills=0)).semantic.lists is None
    assert Retriever(snap, RetrievalConfig(semantic_lists_min_skills=69)).semantic.lists is None
    assert Retriever(snap, RetrievalConfig(semantic_lists_min_skills=68)).semantic.lists is not None
