import math

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.graph.build import commit_derived
from segos_pipeline.graph.edges import EDGE_SCHEMA
from segos_pipeline.retrieval.sets import scattered

from ..conftest import dense_ppr, simple_library, write_skill

SKILLS = {
    "csv-loader": "Load comma separated csv files into a dataframe with typed columns.",
    "csv-profiler": "Profile csv columns of a dataframe: null counts, distinct values, histograms.",
    "chart-plotter": "Plot line and bar charts from a dataframe and save them as png images.",
    "pdf-reporter": "Assemble png images and tables into a pdf report.",
    "feature-builder": "Engineer lagged and rolling window features for forecasting models.",
    "booster-trainer": "Train a gradient boosting regressor on engineered features.",
    "audio-extractor": "Extract the audio track of a video with ffmpeg.",
    "speech-transcriber": "Transcribe speech audio into timestamped text segments.",
}


def _edge(src, dst, relation, weight):
    return (src, dst, relation, weight, weight, 1, 1, 1, weight)


@pytest.fixture
def store(tmp_path):
    st_ = SnapshotStore(tmp_path / "store")
    build_cold_start(simple_library(tmp_path / "lib", SKILLS), st_)
    return st_


def _with_edges(store, rows):
    parent = store.load()
    extra = pl.DataFrame(rows, schema=EDGE_SCHEMA, orient="row")
    m = commit_derived(store, parent, pl.concat([parent.edges, extra]), kind="test")
    return store.load(m["version"])


def test_bundle_is_deterministic(store):
    q = "load the csv export and chart monthly revenue as png"
    a = Retriever(store.load()).retrieve(q).to_dict()
    b = Retriever(store.load()).retrieve(q).to_dict()
    assert a == b
    assert a["skills"][0]["id"] in {"csv-loader", "chart-plotter"}
    assert [s["rank"] for s in a["skills"]] == list(range(1, len(a["skills"]) + 1))
    scores = [s["score"] for s in a["skills"]]
    assert scores == sorted(scores, reverse=True)


def test_no_skill_without_evidence(store):
    bundle = Retriever(store.load()).retrieve("transcribe speech")
    assert bundle.skills  # speech-transcriber at least
    assert all(s.lexical > 0 or s.graph > 0 for s in bundle.skills)
    assert "booster-trainer" not in bundle.ids
    assert Retriever(store.load()).retrieve("the of and").skills == []  # only stopwords: empty bundle


def test_prerequisite_pulled_in_by_reverse_dependency(tmp_path):
    # producer → consumer (dependency) with no shared vocabulary, so no semantic edge joins them: a query
    # about the consumer alone reaches the producer only by walking the dependency backwards.
    skills = {
        **SKILLS,
        "quux-producer": "Frobnicate widgets into quux blobs.",
        "zorble-consumer": "Zorble gadgets.",
    }
    st_ = SnapshotStore(tmp_path / "store")
    build_cold_start(simple_library(tmp_path / "lib", skills), st_)
    snap = _with_edges(st_, [_edge("quux-producer", "zorble-consumer", "dependency", 1.0)])
    bundle = Retriever(snap).retrieve("zorble the gadgets")
    assert bundle.ids == ["zorble-consumer", "quux-producer"]
    assert bundle.skills[1].lexical == 0 and bundle.skills[1].graph > 0 and not bundle.skills[1].seed
    forward = Retriever(snap, RetrievalConfig(reverse=False)).retrieve("zorble the gadgets")
    assert forward.ids == ["zorble-consumer"]


def test_avoid_pruning_drops_without_backfill(store):
    q = "load csv into a dataframe, profile the columns and plot charts"
    base = Retriever(store.load()).retrieve(q, top_n=3)
    assert len(base.skills) == 3
    first, second = base.ids[0], base.ids[1]
    lo, hi = sorted([first, second])
    snap = _with_edges(store, [_edge(lo, hi, "avoid", 0.0)])
    pruned = Retriever(snap).retrieve(q, top_n=3)
    assert pruned.ids == [first, base.ids[2]]  # the lower-ranked partner is dropped, nothing backfilled
    assert pruned.pruned == [{"id": second, "avoided_with": first}]
    # avoid carries no diffusion mass: scores of the others are unchanged
    assert pruned.skills[0].score == pytest.approx(base.skills[0].score)


def test_budgets_bound_every_bundle(tmp_path):
    lib = tmp_path / "lib"
    for i in range(8):
        write_skill(lib, f"s{i}", f"name: s{i}\ndescription: parse invoices number {i}", "invoice " * 2000)
    st_ = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, st_)
    r = Retriever(st_.load())
    bundle = r.retrieve("parse invoices")
    assert len(bundle.skills) == 5
    assert all(s.chars <= 1800 for s in bundle.skills) and bundle.chars <= 9000
    assert bundle.chars == sum(len(s.text) for s in bundle.skills)
    small = Retriever(st_.load(), RetrievalConfig(total_chars=2500)).retrieve("parse invoices")
    assert small.chars <= 2500 and len(small.skills) == 2 and len(small.over_budget) == 3
    text = bundle.skills[0].text
    assert text.startswith("### s") and "Source: s" in text


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, len(SKILLS) - 1), min_size=1, max_size=4, unique=True))
def test_retriever_ppr_equals_the_dense_solve(tmp_path_factory, seeds):
    tmp = tmp_path_factory.mktemp("ppr")
    st_ = SnapshotStore(tmp / "store")
    build_cold_start(simple_library(tmp / "lib", SKILLS), st_)
    snap = _with_edges(st_, [_edge("feature-builder", "booster-trainer", "workflow", 2.0)])
    r = Retriever(snap, RetrievalConfig(ppr_epsilon=1e-13))
    seeds_arr = np.array(sorted(seeds))
    weights = np.arange(1, len(seeds_arr) + 1, dtype=float)
    p = np.zeros(r.n)
    p[seeds_arr] = weights / weights.sum()
    expected = dense_ppr(r.operator, p, r.config.alpha)
    np.testing.assert_allclose(r.ppr(seeds_arr, weights), expected, atol=1e-9)
    assert r.ppr(seeds_arr, weights).sum() == pytest.approx(1.0)


def test_baselines_lexical_only_and_forward(store):
    q = "plot charts from a dataframe"
    lexical = Retriever(store.load(), RetrievalConfig(propagate=False)).retrieve(q)
    assert all(s.graph == 0 for s in lexical.skills)
    assert Retriever(store.load(), RetrievalConfig(reverse=False)).retrieve(q).skills


def test_unknown_setting_rejected():
    with pytest.raises(ValueError, match="unknown setting"):
        RetrievalConfig().with_overrides(top_k=3)


_WORDS = sorted({w for d in SKILLS.values() for w in d.lower().replace(",", " ").replace(".", " ").split()})


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("det")
    st_ = SnapshotStore(tmp / "store")
    build_cold_start(simple_library(tmp / "lib", SKILLS), st_)
    return st_


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([*_WORDS, "unrelated", "zzz"]), min_size=0, max_size=12))
def test_retrieval_is_deterministic_and_bounded(shared_store, words):
    query = " ".join(words)
    a = Retriever(shared_store.load()).retrieve(query)
    b = Retriever(shared_store.load()).retrieve(query)
    assert a.to_dict() == b.to_dict()
    assert len(a.skills) <= 5 and a.chars <= 9000
    assert len(set(a.ids)) == len(a.ids)
    assert all(s.lexical > 0 or s.semantic > 0 or s.graph > 0 for s in a.skills)  # no zero-evidence fill


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.5, 1.0, 2.0]), min_size=0, max_size=40), st.integers(0, 12))
def test_top_k_equals_a_full_sort_with_ties_to_the_smaller_index(values, k):
    from segos_pipeline.retrieval.sets import top_k

    v = np.array(values, dtype=float)
    cand = np.flatnonzero(v > 0)
    full = cand[np.lexsort((cand, -v[cand]))][:k]
    np.testing.assert_array_equal(top_k(v, cand, k), full)


def test_lexical_index_cache_is_used_equal_and_self_healing(store):
    from segos_pipeline.retrieval.lexical import LexicalIndex, index_for

    snap = store.load()
    cfg = RetrievalConfig()
    first = index_for(snap, cfg)  # builds and caches
    cache = store.root / "cache" / "lexical"
    [entry] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert (entry / "complete").is_file()
    loaded = LexicalIndex.load(entry, snap.nodes.height, cfg)
    fresh = LexicalIndex(snap.tokens, snap.nodes.height, cfg)

    def dense(index: LexicalIndex, q: str) -> np.ndarray:  # m_i(q) of every skill
        ev = index.evidence(q)
        return scattered(ev.n, ev.nodes, ev.node_evidence)

    for q in ("load csv files into a dataframe", "plot charts", "transcribe speech audio"):
        np.testing.assert_array_equal(dense(loaded, q), dense(fresh, q))
        np.testing.assert_array_equal(dense(first, q), dense(fresh, q))
    (entry / "matrix.npz").write_bytes(b"damaged")
    healed = index_for(snap, cfg)
    np.testing.assert_array_equal(dense(healed, "plot charts"), dense(fresh, "plot charts"))
    assert LexicalIndex.load(entry, snap.nodes.height, cfg).matrix.nnz == fresh.matrix.nnz  # rewritten
    other = index_for(snap, RetrievalConfig(bm25_k1=2.0))  # other settings: another entry
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2
    assert other.matrix.nnz == fresh.matrix.nnz


def test_push_is_within_its_residual_of_a_dense_linear_solve():
    """The one PPR solver against an independent oracle (np.linalg.solve) on small random graphs, with and
    without dangling rows: the L1 distance is the residual the push reports, which ε bounds."""
    from segos_pipeline.retrieval.push import PushOperator

    rng = np.random.default_rng(7)
    seen_dangling = set()
    for n, density in ((1, 1.0), (5, 0.8), (40, 0.1), (40, 1.0), (300, 4 / 300)):
        a = sp.random(n, n, density=density, random_state=rng, format="csr")
        a.data[:] = rng.random(a.nnz)
        sums = np.asarray(a.sum(axis=1)).ravel()
        t = (sp.diags(np.divide(1.0, sums, out=np.zeros(n), where=sums > 0)) @ a).tocsr()  # or empty rows
        seeds = np.sort(rng.choice(n, size=min(n, 3), replace=False))
        weights = rng.random(len(seeds))
        p = np.zeros(n)
        p[seeds] = weights / weights.sum()
        exact = dense_ppr(t, p, 0.2)
        residuals = []
        for eps in (1e-3, 3e-5, 1e-9):
            got = PushOperator(t).ppr(seeds, weights, 0.2, eps)
            s = np.zeros(n)
            s[got.nodes] = got.mass
            assert np.abs(s - exact).sum() == pytest.approx(got.residual, abs=1e-12)
            assert got.residual <= eps * np.maximum(np.diff(t.indptr), 1).sum() + 1e-12
            residuals.append(got.residual)
        assert residuals == sorted(residuals, reverse=True) and residuals[-1] < 1e-5
        seen_dangling.add(bool((sums == 0).any()))
    assert seen_dangling == {True, False}  # both paths: with dangling rows and without


def test_per_field_bm25_matrix_equals_the_formula_row_by_row():
    """The vectorised index against SPEC §6.7 written out per (skill, field, token): saturation and length
    normalisation per field (average over the skills that have the field), then the field weight, then
    the sum over fields, times idf. Includes a field without a weight (it counts for df but adds no term)
    and a skill that lacks a field."""
    from segos_pipeline.retrieval.lexical import LexicalIndex

    rows = [  # node, field, token, tf
        (0, "name", "csv", 1),
        (0, "description", "csv", 2),
        (0, "body", "chart", 3),
        (0, "unweighted", "csv", 5),
        (1, "description", "chart", 1),
        (1, "body", "csv", 1),
        (1, "body", "plot", 4),
        (2, "unweighted", "plot", 2),
        (2, "name", "plot", 1),
    ]
    tokens = pl.DataFrame(rows, schema=["node", "field", "token", "tf"], orient="row").with_columns(
        pl.col("node").cast(pl.UInt32), pl.col("tf").cast(pl.UInt32)
    )
    cfg = RetrievalConfig(field_weights={"name": 3.0, "description": 2.0, "body": 1.0})
    n, k1, b = 3, cfg.bm25_k1, cfg.bm25_b
    index = LexicalIndex(tokens, n, cfg)

    flen: dict[tuple[int, str], int] = {}
    for node, field, _, tf in rows:
        flen[node, field] = flen.get((node, field), 0) + tf
    fields = {f for _, f, _, _ in rows}
    avg = {f: np.mean([v for (_, g), v in flen.items() if g == f]) for f in fields}
    # by hand: body lengths 3 and 5 → 4.0; description 2 and 1 → 1.5; name 1 and 1 → 1.0
    assert (avg["body"], avg["description"], avg["name"]) == (4.0, 1.5, 1.0)
    df = {t: len({node for node, _, tok, _ in rows if tok == t}) for t in {r[2] for r in rows}}
    expected: dict[tuple[int, str], float] = {}
    for node, field, tok, tf in rows:
        if field in cfg.field_weights:
            norm = 1 - b + b * flen[node, field] / avg[field]
            term = cfg.field_weights[field] * tf * (k1 + 1) / (tf + k1 * norm)
            expected[node, tok] = expected.get((node, tok), 0.0) + term
    matrix = index.matrix.toarray()
    for (node, tok), t in expected.items():
        idf = math.log(1 + (n - df[tok] + 0.5) / (df[tok] + 0.5))
        assert matrix[node, index.vocab.index[tok]] == pytest.approx(idf * t, rel=1e-12)
    # one entry by hand: skill 0, "csv" = idf · (3·1·2.2/(1 + 1.2·1) + 2·2·2.2/(2 + 1.2·(0.25 + 0.75·2/1.5)))
    idf_csv = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    by_hand = idf_csv * (3 * 2.2 / 2.2 + 2 * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 2 / 1.5)))
    assert matrix[0, index.vocab.index["csv"]] == pytest.approx(by_hand, rel=1e-12)
    assert np.count_nonzero(matrix) == len(expected)  # (2, plot) only in an unweighted field: no entry
    assert [int(index.df[index.vocab.index[t]]) for t in ("chart", "csv", "plot")] == [2, 2, 2]
    assert index.name_len.tolist() == [1, 0, 1]


@pytest.mark.parametrize("total", [9000, 2500, 700])
def test_bundle_texts_equal_hydrating_the_rows_under_any_budget(shared_store, total):
    """Bundles hydrate from cached per-skill texts (clipped to the per-skill budget); the result is what
    rendering each row and clipping it under the running budgets gives."""
    from segos_pipeline.retrieval.bundle import hydrate_rows

    r = Retriever(shared_store.load(), RetrievalConfig(total_chars=total, top_n=8))
    for q in ("load csv files into a dataframe", "plot charts", "transcribe speech audio", "csv"):
        for _ in range(2):  # the second pass reads the cache
            bundle = r.retrieve(q)
            chosen, _ = r.select(r.rank(q), 8)
            kept, over = hydrate_rows(r._nodes[chosen].to_dicts(), 1800, total)
            assert [s.text for s in bundle.skills] == [text for _, text in kept]
            assert bundle.over_budget == over


def _same_index(a, b):
    """Two lexical indexes hold exactly the same numbers (bit for bit), not merely close ones."""
    assert a.vocab.tokens.to_list() == b.vocab.tokens.to_list()
    for x, y in ((a.matrix, b.matrix), (a.name_matrix, b.name_matrix)):
        np.testing.assert_array_equal(x.indptr, y.indptr)
        np.testing.assert_array_equal(x.indices, y.indices)
        np.testing.assert_array_equal(x.data, y.data)
    np.testing.assert_array_equal(a.df, b.df)
    np.testing.assert_array_equal(a.name_len, b.name_len)
    assert a.avg == b.avg


@pytest.mark.parametrize("library", ["demo", "real"])
def test_index_read_a_part_at_a_time_equals_the_index_of_the_whole_table(tmp_path, monkeypatch, library):
    """A stored version's index is built from its token parts one at a time (never the whole string
    table): the same numbers as the index of the whole table, however many parts the skills are split
    into, and loading the version for serving reads no token table."""
    from segos_pipeline.paths import DEFAULT_LIBRARY
    from segos_pipeline.retrieval.lexical import LexicalIndex, index_for
    from segos_pipeline.text.token_rows import EncodedTokens

    from ..conftest import SHARED_DATA

    lib = DEFAULT_LIBRARY if library == "demo" else SHARED_DATA / "skills"
    if not lib.is_dir():
        pytest.skip(f"real skill library not found at {lib} (../shared/data is absent)")
    monkeypatch.setattr("segos_pipeline.store.parts.PART_ROWS", 7)  # many parts, skills split unevenly
    st_ = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, st_)
    snap = st_.load()
    assert len(snap.files.parts) > 3
    cfg = RetrievalConfig()
    streamed = LexicalIndex.of(EncodedTokens.of_parts(snap.files.token_parts(), snap.nodes.height), cfg)
    assert not snap.tokens_loaded
    retriever = Retriever(snap, cfg)  # no cached index yet: built from the parts as well
    assert not snap.tokens_loaded
    _same_index(retriever.lexical, streamed)
    _same_index(streamed, LexicalIndex(snap.tokens, snap.nodes.height, cfg))
    _same_index(index_for(st_.load(), cfg), streamed)  # and as the cache holds it


def test_a_manifest_with_the_removed_ppr_settings_still_gives_its_retrieval_settings():
    """Evolved manifests record the round's retrieval settings, which held the power iteration's `tol`,
    `max_iter` and `ppr_push_min_nodes` until 2026-12-03: retrieval over such a version starts from its
    preset, as before, and does not read them back."""
    from segos_pipeline.config import retrieval_for, retrieval_preset

    old = {"tol": 1e-6, "max_iter": 50, "ppr_epsilon": 3e-5, "ppr_push_min_nodes": 2_000, "seed_k": 4}
    for preset in ("default", "paper"):
        manifest = {"config": {"preset": preset, "retrieval": old}}
        assert retrieval_for(manifest) == retrieval_preset(preset)
