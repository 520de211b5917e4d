"""Inverted lists (retrieval/ann.py) over the full skill vectors, stored in list order, and the semantic
search through them (the only one): one list up to IVF_SCAN_ROWS skills, which is the exact search bit for
bit (against a numpy argsort of every cosine); past it deterministic lists, sparse evidence equal to the
dense evidence with and without patches, a bounded read, and a cache entry that is rebuilt when damaged or
foreign."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore
from segos_pipeline.retrieval import semantic as semantic_mod
from segos_pipeline.retrieval.ann import InvertedLists, build_lists, check_lists, list_count, ranges
from segos_pipeline.retrieval.semantic import IVF_SCAN_ROWS, SemanticIndex, SkillVectors

from ..conftest import dense_semantic_evidence, head_scores, semantic_evidence


def _clustered(n: int, d: int = 32, clusters: int = 60, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + 0.7 * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _index(x: np.ndarray, lists: InvertedLists, scan_rows: int, m: int = 20) -> SemanticIndex:
    """A semantic index over given vectors; queries are given as vectors, so no embedding backend."""
    vectors = SkillVectors("test", [str(i) for i in range(len(x))], x, 0, "k")
    return SemanticIndex(vectors, None, m, 0.1, lists, scan_rows)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- the lists


def test_every_row_is_in_exactly_one_list_and_lists_are_deterministic_bit_for_bit():
    x = _clustered(5_000)
    a, b = build_lists(x), build_lists(x.copy())
    assert len(a.centroids) == list_count(5_000) == 141
    assert np.array_equal(np.sort(a.order), np.arange(5_000))
    assert a.offsets[0] == 0 and a.offsets[-1] == 5_000 and (a.sizes > 0).all()
    for field in ("centroids", "order", "offsets", "vectors"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), field
    assert np.array_equal(a.vectors, x[a.order])  # the rows themselves, in list order
    assert a.vectors.flags.c_contiguous and a.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a.centroids, axis=1), 1.0, rtol=1e-5)
    assert check_lists(a, x) is None


def test_a_scan_reads_the_nearest_lists_whole_until_it_has_enough_rows():
    x = _clustered(5_000)
    lists = build_lists(x)
    q = x[17]
    chosen = lists.choose(q, 600)
    ranked = np.argsort(-(lists.centroids @ q), kind="stable")
    take = int(np.searchsorted(np.cumsum(lists.sizes[ranked]), 600)) + 1
    assert np.array_equal(chosen, ranked[:take])
    rows, sims = lists.scan(q, 600)
    bounds = lists.offsets
    expected = np.concatenate([lists.order[bounds[li] : bounds[li + 1]] for li in np.sort(chosen)])
    assert np.array_equal(rows, expected)
    np.testing.assert_allclose(sims, x[rows] @ q, rtol=1e-5, atol=1e-6)
    assert 600 <= len(rows) < 600 + lists.sizes.max()
    assert np.array_equal(np.sort(lists.scan(q, 10**9)[0]), np.arange(5_000))  # more than there are: all
    every, sims = lists.scan(q, 5_000)  # every row: every list, in list order, one product
    assert np.array_equal(every, lists.order) and np.array_equal(sims, lists.vectors @ q)
    starts, ends = lists.spans(lists.choose(q, 5_000))  # what the general path would read: the same span
    assert starts.tolist() == [0] and ends.tolist() == [5_000]


def test_a_stack_of_vectors_reads_the_union_of_their_lists_once_and_scores_every_row_for_each():
    x = _clustered(5_000)
    lists = build_lists(x)
    q = x[[17, 400, 2_500, 4_321]]
    union = lists.choose(q, 300)
    own = [lists.choose(v, 300) for v in q]
    assert np.array_equal(union, np.unique(np.concatenate(own)))  # each vector's lists, no other
    starts, ends = lists.spans(union)
    assert (starts[1:] > ends[:-1]).all()  # ascending spans, adjacent lists merged
    positions = np.concatenate([np.arange(lists.offsets[li], lists.offsets[li + 1]) for li in union])
    assert np.array_equal(ranges(starts, ends), positions)  # the spans cover the chosen lists, once
    rows, sims = lists.scan(q, 300)
    assert np.array_equal(rows, lists.order[positions])
    assert len(np.unique(rows)) == len(rows) and sims.shape == (len(q), len(rows))
    for v, s in zip(q, sims, strict=True):
        np.testing.assert_allclose(s, x[rows] @ v, rtol=1e-5, atol=1e-6)  # every vector, every row read
        assert np.isin(lists.scan(v, 300)[0], rows).all()  # a vector read alone sees no row the stack misses
    every_rows, every = lists.scan(q, 5_000)  # the whole library: one product for the stack
    assert np.array_equal(every_rows, lists.order)
    np.testing.assert_allclose(every, q @ lists.vectors.T, rtol=1e-5, atol=1e-6)
    assert ranges(np.array([3, 10]), np.array([5, 13])).tolist() == [3, 4, 10, 11, 12]


def test_adjacent_chosen_lists_are_read_as_one_span():
    offsets = np.array([0, 3, 3, 7, 10, 12])  # list 1 is empty
    vectors = np.zeros((12, 2), np.float32)
    lists = InvertedLists(np.eye(5, 2, dtype=np.float32), np.arange(12), offsets, vectors)
    starts, ends = lists.spans(np.array([3, 0, 1, 2]))
    assert starts.tolist() == [0] and ends.tolist() == [10]
    starts, ends = lists.spans(np.array([4, 0]))
    assert starts.tolist() == [0, 10] and ends.tolist() == [3, 12]
    assert [len(a) for a in lists.spans(np.array([1]))] == [0, 0]


def test_the_rows_read_hold_the_exact_nearest_neighbours():
    """Recall of the exact top 20 among the rows a scan reads (a tenth of the library)."""
    x = _clustered(20_000)
    lists = build_lists(x)
    rng = np.random.default_rng(0)
    recall = []
    for i in rng.integers(0, len(x), 40):
        exact = np.argpartition(-(x @ x[i]), 20)[:20]
        recall.append(np.isin(exact, lists.scan(x[i], 2_000)[0]).mean())
    assert np.mean(recall) >= 0.95


# ---------------------------------------------------------------------------- reading budget, sparse


class _CountingRows(np.ndarray):
    """List-ordered vectors that record how many rows each slice reads."""

    reads: ClassVar[list[int]] = []

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(key, slice):
            _CountingRows.reads.append(len(out))
        else:  # a gather (fancy index or single row) would bypass the contiguous reads measured here
            raise AssertionError(f"list-ordered vectors read by {type(key).__name__}, not by a slice")
        return out


class _Untouchable(np.ndarray):
    """A skill matrix the lists path must not read: any arithmetic or indexing on it fails."""

    def __getitem__(self, key):
        raise AssertionError("the full matrix was indexed")

    def __array_ufunc__(self, *args, **kwargs):
        raise AssertionError("the full matrix was computed on")


def test_the_reading_budget_bounds_the_rows_read_and_nothing_else_is_touched():
    x = _clustered(20_000)
    built = build_lists(x)
    counted = InvertedLists(built.centroids, built.order, built.offsets, built.vectors.view(_CountingRows))
    sem = _index(x.view(_Untouchable), counted, scan_rows=1_500)
    rng = np.random.default_rng(1)
    for i in rng.integers(0, len(x), 25):
        _CountingRows.reads = []
        nodes, z = semantic_evidence(sem, x[i])
        read = sum(_CountingRows.reads)
        assert 1_500 <= read < 1_500 + built.sizes.max()
        assert len(_CountingRows.reads) <= len(built.choose(x[i], 1_500))  # a span per run of lists
        assert read == len(built.scan(x[i], 1_500)[0])
        assert 0 < len(nodes) <= sem.candidates and (np.diff(nodes) > 0).all() and (z > 0).all()
        assert int(i) in nodes.tolist() and z[nodes.tolist().index(int(i))] == pytest.approx(1.0)


def test_a_requests_sentences_share_one_search_of_the_skills():
    """`nearest_each`: past one list, the sentences of a request read the union of their nearest lists once,
    within one search's budget; each gets the m best of the rows read, at their exact cosines, and those
    rows hold every row its own share of the budget reads. With one list, each is `nearest` bit for bit."""
    x = _clustered(4_000)
    sem = _index(x, build_lists(x), scan_rows=600, m=7)
    rng = np.random.default_rng(5)
    vectors = [
        v / np.linalg.norm(v) for v in x[rng.integers(0, len(x), 3)] + 0.3 * rng.standard_normal((3, 32))
    ]
    vectors = [v.astype(np.float32) for v in vectors]
    rows, _ = sem.lists.scan(np.stack(vectors), 600 // 3)
    assert len(rows) < 1_000  # about one search's budget, not three
    for v, (nodes, cos) in zip(vectors, sem.nearest_each(vectors, None, 7), strict=True):
        assert np.isin(sem.lists.scan(v, 600 // 3)[0], rows).all()
        exact = (x[rows] @ v).astype(np.float64)
        assert len(nodes) == 7 and np.isin(nodes, rows).all()
        np.testing.assert_allclose(np.sort(cos), np.sort(exact)[-7:], rtol=0, atol=1e-6)
        np.testing.assert_allclose(cos, x[nodes] @ v, rtol=0, atol=1e-6)
    # a patched skill is scored with its new vector wherever it is
    outside = int(np.setdiff1d(np.arange(len(x)), rows)[0])
    nodes, cos = sem.nearest_each(vectors, {outside: vectors[1]}, 7)[1]
    assert outside in nodes.tolist() and cos[nodes.tolist().index(outside)] == pytest.approx(1.0)
    one = _index(x[:500], build_lists(x[:500], lists=1), scan_rows=600, m=7)
    for (a, b), v in zip(one.nearest_each(vectors, None, 7), vectors, strict=True):
        c, d = one.nearest(v, None, 7)
        assert a.tobytes() == c.tobytes() and b.tobytes() == d.tobytes()


def _oracle(x: np.ndarray, q: np.ndarray, m: int, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact evidence restated from a full sort: every cosine, the top m by numpy argsort, rescaled
    against the (m+1)-th or the floor; (sorted nodes, z > 0)."""
    sims = (x @ q).astype(np.float64)
    order = np.argsort(-sims, kind="stable")
    head, ref = order[:m], max(float(sims[order[m]]) if m < len(sims) else float(sims.min()), floor)
    z = (sims[head] - ref) / (float(sims[head[0]]) - ref)
    keep = z > 0
    ranked = np.argsort(head[keep])
    return head[keep][ranked], z[keep][ranked]


def _tied(n: int, seed: int = 3) -> np.ndarray:
    """Clustered vectors with every tenth row a copy of another: cosines tie, inside the head and at its
    edge."""
    x = _clustered(n, seed=seed)
    x[::10] = x[1::10][: len(x[::10])]
    return x


def test_a_library_of_one_list_is_the_exact_search_bit_for_bit():
    """Up to IVF_SCAN_ROWS skills there is one list, the vectors themselves (no copy, no training), read
    whole: the evidence, the nearest skills and their cosines are those of one product with the whole
    matrix, bit for bit, ties included, and the evidence is the argsort oracle's."""
    x = _tied(6_000)
    assert semantic_mod.lists_count(len(x)) == 1 and semantic_mod.lists_count(IVF_SCAN_ROWS + 1) > 1
    sem = _index(x, build_lists(x, 1), scan_rows=IVF_SCAN_ROWS)
    assert sem.lists.vectors is x and len(sem.lists.centroids) == 1
    for i in (0, 1, 11, 4_321):
        q = x[i]
        sims = (x @ q).astype(np.float64)  # what the exact search computed
        pos, z = semantic_mod.head_of(sims, sem.candidates, sem.min_cosine)
        ranked = np.argsort(pos, kind="stable")
        nodes, zn, near, cos = sem.evidence_and_nearest(q, None, 40)
        assert np.array_equal(nodes, pos[ranked]) and np.array_equal(zn, z[ranked])
        want = np.argpartition(-sims, 39)[:40]
        assert np.array_equal(near, want) and np.array_equal(cos, sims[want])
        onodes, oz = _oracle(x, q, sem.candidates, sem.min_cosine)
        assert np.array_equal(np.sort(sims[nodes]), np.sort(sims[onodes]))  # ties may swap equal skills
        np.testing.assert_array_equal(np.sort(zn), np.sort(oz))
        # a patch replaces the skill's cosine in place, as the exact search did
        patch = {int(nodes[0]): -q, 5: q}
        sims[list(patch)] = [float(v @ q) for v in patch.values()]
        pos, z = semantic_mod.head_of(sims, sem.candidates, sem.min_cosine)
        ranked = np.argsort(pos, kind="stable")
        got = semantic_evidence(sem, q, patch)
        assert np.array_equal(got[0], pos[ranked]) and np.array_equal(got[1], z[ranked])


def test_many_lists_read_whole_are_the_exact_search_and_read_in_part_hold_most_of_it():
    """Past one list, a budget of every row gives the oracle's evidence; the default budget over a tenth
    of the rows keeps most of the exact head (the price of a bounded read)."""
    x = _clustered(20_000)
    lists = build_lists(x, semantic_mod.lists_count(len(x)))
    assert len(lists.centroids) == list_count(20_000) > 1
    everything, part = _index(x, lists, scan_rows=len(x)), _index(x, lists, scan_rows=2_000)
    rng = np.random.default_rng(0)
    recall = []
    for i in rng.integers(0, len(x), 20):
        q = x[i]
        want = _oracle(x, q, 20, 0.1)
        got = semantic_evidence(everything, q)
        assert np.array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-6)  # block products round apart
        recall.append(np.isin(want[0], semantic_evidence(part, q)[0]).mean())
    assert np.mean(recall) >= 0.9


def _paths(x: np.ndarray) -> dict[str, SemanticIndex]:
    return {"one list": _index(x, build_lists(x, 1), IVF_SCAN_ROWS), "lists": _index(x, build_lists(x), 700)}


def _reference(sem: SemanticIndex, q: np.ndarray, patch: dict[int, np.ndarray]) -> np.ndarray:
    """The evidence restated: exact similarities (patched) over the skills the search scores, -inf for the
    rest, one head over them."""
    n = sem.matrix.shape[0]
    rows = sem.lists.scan(q, sem.scan_rows)[0]
    scored = np.zeros(n, dtype=bool)
    scored[rows] = True
    scored[list(patch)] = True
    sims = (np.asarray(sem.matrix) @ q).astype(np.float64)
    for node, vec in patch.items():
        sims[node] = float(vec @ q)
    return head_scores(np.where(scored, sims, -np.inf), sem.candidates, sem.min_cosine)


@pytest.mark.parametrize("path", ["one list", "lists"])
def test_evidence_nodes_equals_the_dense_evidence_with_and_without_patch(path):
    x = _clustered(4_000, d=32, clusters=40, seed=5)
    sem = _paths(x)[path]
    n = sem.matrix.shape[0]
    rng = np.random.default_rng(2)
    for i in rng.integers(0, n, 8):
        q = x[i]
        scored = np.flatnonzero(_reference(sem, q, {}) > 0)
        unseen = np.setdiff1d(np.arange(n), scored)
        patches = [
            {},
            {int(unseen[-1]): q},  # given the query's own vector: first, whatever list it is in
            {int(scored[0]): -q, int(unseen[0]): x[(i + 1) % n]},  # a skill of the head loses its place
        ]
        for patch in patches:
            nodes, z = semantic_evidence(sem, q, patch)
            dense = dense_semantic_evidence(sem, q, patch)
            assert (np.diff(nodes) > 0).all() and (z > 0).all()
            assert np.array_equal(nodes, np.flatnonzero(dense)) and np.array_equal(z, dense[nodes])
            # float32 products over blocks of rows round apart from those over the whole matrix
            np.testing.assert_allclose(dense, _reference(sem, q, patch), rtol=0, atol=1e-5)
            if patch:
                first = next(iter(patch))
                assert (dense[first] == pytest.approx(1.0)) == (patch[first] is q)


# ------------------------------------------------------------------------------------ the demo store


@pytest.fixture
def ivf_everywhere(monkeypatch):
    """The large-library path on the 60-skill demo: past 30 skills, 15 lists, and a query reads about half
    of the rows."""
    monkeypatch.setattr(semantic_mod, "IVF_SCAN_ROWS", 30)


LISTS = RetrievalConfig()
QUERIES = ("convert a pdf to text", "train a model on tabular data", "deploy a container", "resize photos")


def _entry(store: Path) -> Path:
    entries = [p for p in (store / "cache" / "semantic-lists").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "complete").is_file()
    return entries[0]


def test_semantic_evidence_through_inverted_lists_is_the_exact_pass_over_the_rows_read(
    demo_store, ivf_everywhere
):
    snap = SnapshotStore(demo_store).load()
    ivf = Retriever(snap, LISTS).semantic
    assert ivf is not None and ivf.lists is not None and ivf.scan_rows == 30
    entry = _entry(demo_store)
    assert {p.name for p in entry.iterdir()} >= {"centroids.npy", "order.npy", "offsets.npy", "vectors.npy"}
    for q in QUERIES:
        rows, _ = ivf.lists.scan(ivf.query_vector(q), ivf.scan_rows)
        assert 30 <= len(rows) < 60
        sims = np.full(60, -np.inf)
        sims[rows] = (ivf.matrix[rows] @ ivf.query_vector(q)).astype(np.float64)  # the rest get nothing
        z_ivf = dense_semantic_evidence(ivf, q)
        assert np.count_nonzero(z_ivf) > 0
        np.testing.assert_allclose(
            z_ivf, head_scores(sims, ivf.candidates, ivf.min_cosine), rtol=0, atol=1e-6
        )
        nodes, z = semantic_evidence(ivf, q)
        assert np.array_equal(nodes, np.flatnonzero(z_ivf)) and np.array_equal(z, z_ivf[nodes])
    # A second process-level load reads the cached lists, memory-mapped, instead of building them again.
    semantic_mod._RECENT_LISTS.clear()
    again = Retriever(SnapshotStore(demo_store).load(), LISTS).semantic
    assert np.array_equal(again.lists.order, ivf.lists.order)
    assert isinstance(again.lists.vectors.base, np.memmap)


def test_a_patched_vector_is_scored_even_off_the_probed_lists(demo_store, ivf_everywhere):
    snap = SnapshotStore(demo_store).load()
    sem = Retriever(snap, LISTS).semantic
    q = QUERIES[0]
    qv = sem.query_vector(q)
    rows, _ = sem.lists.scan(qv, sem.scan_rows)
    outside = int(np.setdiff1d(np.arange(sem.matrix.shape[0]), rows)[0])
    z = dense_semantic_evidence(sem, q, {outside: qv})  # give it the query's own vector: it must come first
    assert z[outside] == pytest.approx(1.0)
    nodes, zn = semantic_evidence(sem, q, {outside: qv})
    assert outside in nodes.tolist() and np.array_equal(zn, z[nodes])


# Damage replaces a file (unlink, then write) instead of rewriting it in place: an earlier test's lists
# still map the old file, and truncating a mapped file under a reader is a bus error, not a cache miss
# (the cache's own writer also stages a new folder and renames it into place).
def _replace(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _damage_order(entry: Path) -> None:
    order = np.load(entry / "order.npy")
    _replace(entry / "order.npy", _npy(order[::-1].copy()))  # a permutation, but not of these lists


def _truncate_vectors(entry: Path) -> None:
    data = (entry / "vectors.npy").read_bytes()
    _replace(entry / "vectors.npy", data[: len(data) // 2])


def _old_format(entry: Path) -> None:
    meta = json.loads((entry / "complete").read_text())
    _replace(entry / "complete", json.dumps({**meta, "format": 1}).encode())


def _foreign_vectors(entry: Path) -> None:
    v = np.load(entry / "vectors.npy")
    _replace(entry / "vectors.npy", _npy(np.roll(v, 1, axis=0)))  # same shape, other rows


@pytest.mark.parametrize("damage", [_damage_order, _truncate_vectors, _old_format, _foreign_vectors])
def test_a_damaged_or_foreign_lists_cache_entry_is_rebuilt(demo_store, ivf_everywhere, damage):
    snap = SnapshotStore(demo_store).load()
    lists = Retriever(snap, LISTS).semantic.lists
    good = {f: np.array(getattr(lists, f)) for f in ("centroids", "order", "offsets", "vectors")}
    entry = _entry(demo_store)
    damage(entry)
    semantic_mod._RECENT_LISTS.clear()
    again = Retriever(SnapshotStore(demo_store).load(), LISTS).semantic
    for field in ("centroids", "order", "offsets", "vectors"):
        assert np.array_equal(getattr(again.lists, field), good[field]), field
    assert check_lists(again.lists, again.matrix) is None
    # The rebuilt entry replaced the damaged one on disk: the next load takes it as it is.
    semantic_mod._RECENT_LISTS.clear()
    assert semantic_mod._load_lists(_entry(demo_store), again.matrix) is not None


def test_the_demo_is_one_list_with_the_exact_evidence_and_nothing_cached(demo_store):
    """At the default budget the 60-skill demo is one list: no k-means, no list cache entry, and every
    query's evidence is the argsort oracle's over all its cosines, bit for bit."""
    cache = demo_store / "cache" / "semantic-lists"
    before = sorted(cache.iterdir()) if cache.is_dir() else []  # other tests' lists of 30 rows
    semantic_mod._RECENT_LISTS.clear()
    snap = SnapshotStore(demo_store).load()
    sem = Retriever(snap).semantic
    assert sem is not None and len(sem.lists.centroids) == 1 and sem.lists.vectors is sem.matrix
    assert (sorted(cache.iterdir()) if cache.is_dir() else []) == before
    for q in QUERIES:
        qv = sem.query_vector(q)
        nodes, z = semantic_evidence(sem, q)
        want, wz = _oracle(sem.matrix, qv, sem.candidates, sem.min_cosine)
        assert len(nodes) > 0 and np.array_equal(nodes, want) and np.array_equal(z, wz)
