"""Per-field scoring's idf cutoff, and semantic evidence: offline, cached per version, recomputed only for
changed skills, equal after an incremental update and after a full rebuild, fused without zero-evidence
fill."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.config import retrieval_for
from segos_pipeline.graph.incremental import apply_change
from segos_pipeline.retrieval import semantic as semantic_mod
from segos_pipeline.retrieval.embeddings import SemanticUnavailable, WordLlamaBackend, backend_for
from segos_pipeline.retrieval.postings import bm25_idf
from segos_pipeline.retrieval.semantic import vectors_for

from ..conftest import dense_rho, head_scores, simple_library, write_skill

SKILLS = {
    "csv-loader": "Load csv data tables into data frames.",
    "json-loader": "Load json data documents into data frames.",
    "chart-plotter": "Plot data frames as bar and line charts.",
    "pdf-writer": "Write data reports as pdf documents.",
    "paper-search": "Search scholarly literature databases for journal articles.",
    "mailer": "Email data reports to recipients.",
    "weather": "Current weather forecast for a city.",
    "zipper": "Compress data archives quickly.",
}
LEXICAL = RetrievalConfig(semantic="none")


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(simple_library(tmp_path / "lib", SKILLS), st)
    return st


def test_common_query_tokens_do_not_seed_unless_nothing_else_is_left(store):
    """ "data" is in 6 of 8 skills: next to a rarer word it carries no evidence; alone it is kept."""
    r = Retriever(store.load(), LEXICAL)
    data = r.lexical.vocab.index["data"]
    assert r.lexical.df[data] == 6
    cols, weights, _, _, unknown = r.lexical.query_columns("data csv data")
    assert unknown == 0
    assert data not in cols.tolist() and cols.tolist() == [r.lexical.vocab.index["csv"]]
    assert weights.tolist() == [1.0]  # csv once: 1 + ln 1
    ev = r.lexical.evidence("data csv")
    assert np.count_nonzero(ev.node_score) == 1  # only the csv skill, not every skill that says "data"
    alone = r.lexical.evidence("data")  # fallback: the only token is kept
    assert np.count_nonzero(alone.node_score) == 6
    # the threshold is a setting: with every token allowed, "data" seeds again
    r_all = Retriever(store.load(), LEXICAL.with_overrides(seed_df_max=1.0))
    assert np.count_nonzero(r_all.lexical.evidence("data csv").node_score) == 6


def test_repeated_query_terms_weigh_more_and_coverage_is_the_best_skills_share(store):
    r = Retriever(store.load(), LEXICAL)
    cols, weights, _, _, _ = r.lexical.query_columns("pdf pdf pdf email")
    by_col = dict(zip(cols.tolist(), weights.tolist(), strict=True))
    assert by_col[r.lexical.vocab.index["pdf"]] == pytest.approx(1 + np.log(3))
    assert by_col[r.lexical.vocab.index["email"]] == 1.0
    # one skill holds every known token: full coverage; unknown words do not count against it
    assert r.lexical.evidence("compress archive xyzzyq").coverage == pytest.approx(1.0)
    half = r.lexical.evidence("compress weather")  # two skills, one word each
    assert 0.0 < half.coverage < 1.0
    assert r.lexical.evidence("xyzzyq").coverage == 0.0


def test_semantic_backend_loads_and_embeds_offline(monkeypatch):
    """The bundled model loads and embeds with every network connection refused."""

    def refuse(*_args, **_kwargs):
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    backend = WordLlamaBackend()
    vecs = backend.embed(["find peer reviewed papers", "search scholarly literature", "weather forecast"])
    assert vecs.shape == (3, 256) and vecs.dtype == np.float32
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    assert unit[0] @ unit[1] > unit[0] @ unit[2]  # a paraphrase is nearer than an unrelated text
    # segos' unpadded sparse pooling gives the model's own padded-batch mean
    texts = ["", "short", "a much longer text " * 40]
    np.testing.assert_allclose(backend.embed(texts), backend._model.embed(texts), rtol=0, atol=1e-5)


def test_loading_the_model_leaves_the_hosts_logging_alone():
    """wordllama configures the root logger when imported; segos loads it without letting that through, so
    other libraries' debug records stay off the user's terminal. A fresh interpreter: this one may have
    imported wordllama already."""
    script = (
        "import logging\n"
        "from segos_pipeline.retrieval.embeddings import WordLlamaBackend\n"
        "WordLlamaBackend().embed(['a query'])\n"
        "logging.getLogger('some.library').debug('noise')\n"
        "logging.getLogger('some.library').info('noise')\n"
        "root = logging.getLogger()\n"
        "print(len(root.handlers), logging.getLevelName(root.level))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "WARNING"]
    assert "noise" not in done.stderr


def test_unknown_or_missing_backend_is_a_clear_error():
    with pytest.raises(SemanticUnavailable, match="unknown semantic backend 'nope'"):
        backend_for("nope")
    with pytest.raises(SemanticUnavailable, match="model folder not found"):
        backend_for("model2vec:/nonexistent/model") if _has("model2vec") else _raise_folder()
    assert backend_for("none") is None


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _raise_folder() -> None:
    raise SemanticUnavailable("model folder not found (model2vec not installed here)")


def test_a_paraphrase_finds_the_skill_only_with_semantic_evidence(store):
    query = "where can I read academic research?"
    assert Retriever(store.load(), LEXICAL).ranked_ids(query, 3) == []  # no shared word at all
    assert Retriever(store.load()).ranked_ids(query, 1) == ["paper-search"]


def test_head_scores_are_the_top_m_scaled_against_the_next_one():
    sims = np.array([0.9, 0.5, 0.7, 0.1, 0.3])
    z = head_scores(sims, 2, 0.0)  # top two: 0.9 and 0.7; the reference is the third, 0.5
    assert z.tolist() == pytest.approx([1.0, 0.0, 0.5, 0.0, 0.0])
    assert head_scores(sims, 2, 0.8).tolist() == pytest.approx([1.0, 0, 0, 0, 0])  # the floor
    assert not head_scores(sims, 3, 0.95).any()


def test_vectors_are_cached_per_version_and_recomputed_only_for_changed_skills(store, tmp_path):
    backend = backend_for("wordllama")
    semantic_mod._RECENT.clear()
    first = vectors_for(store.load(), backend)
    assert first.embedded == len(SKILLS)
    cache = store.root / "cache" / "semantic"
    [entry] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    semantic_mod._RECENT.clear()
    again = vectors_for(store.load(), backend)  # from disk: nothing embedded
    assert again.embedded == 0 and np.array_equal(again.matrix, first.matrix)

    # an incremental update of one skill: a new version, a new entry, one skill embedded
    write_skill(tmp_path / "lib", "weather", "name: weather\ndescription: Rain radar maps.", "# w\n")
    apply_change(store, "update", tmp_path / "lib" / "weather", library=tmp_path / "lib")
    semantic_mod._RECENT.clear()
    updated = vectors_for(store.load(), backend)
    assert updated.embedded == 1
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2

    # a damaged entry is recomputed, not trusted
    (entry / "vectors.npy").write_bytes(b"damaged")
    semantic_mod._RECENT.clear()
    healed = vectors_for(store.load(store.list_versions()[0]["version"]), backend)
    assert np.allclose(healed.matrix, first.matrix, atol=1e-6)


def test_hashes_of_an_edited_table_and_vectors_from_donors_equal_those_made_from_scratch(store):
    """A draft's text hashes come from the table it was edited from (only differing rows re-hashed), and
    its vectors from a donor row for row: the same hashes and vectors as hashing and copying every row."""
    import polars as pl

    from segos_pipeline.retrieval.semantic import (
        SkillVectors,
        compute_vectors,
        node_text_hashes,
        skill_texts,
        text_hashes,
    )

    backend = backend_for("wordllama")
    nodes = store.load().nodes
    hashes = node_text_hashes(nodes)
    assert hashes == text_hashes(*skill_texts(nodes))
    edited = nodes.with_columns(
        description=nodes["description"].scatter([1, 4], ["Rain radar maps.", None]),
        name=nodes["name"].scatter([6], ["renamed"]),
    )
    fresh = text_hashes(*skill_texts(edited))
    assert node_text_hashes(edited) == fresh
    assert [k for k in range(len(fresh)) if fresh[k] != hashes[k]] == [1, 4, 6]

    parent = compute_vectors(backend, nodes, hashes)
    swapped = SkillVectors(backend.fingerprint, hashes[::-1], parent.matrix[::-1].copy(), 0)
    other = SkillVectors("another-backend", fresh, np.ones_like(parent.matrix), 0)
    draft = compute_vectors(backend, edited, fresh, [other, parent, swapped])
    assert draft.embedded == 3
    expected = parent.matrix.copy()
    expected[[1, 4, 6]] = compute_vectors(backend, edited[[1, 4, 6]], [fresh[k] for k in (1, 4, 6)]).matrix
    assert np.array_equal(draft.matrix, expected)
    assert pl.Series(draft.hashes).equals(pl.Series(fresh))


def test_a_second_store_of_the_same_library_gets_its_vectors_on_disk(store, tmp_path):
    """Vectors this process already holds for the same texts (another store, a draft) are reused, and the
    version still gets its cache entry: a later process must not embed every skill again. Before, the
    in-memory hit returned early and the second store never had a semantic entry."""
    backend = backend_for("wordllama")
    vectors_for(store.load(), backend)  # held in this process now
    other = SnapshotStore(tmp_path / "other")
    build_cold_start(tmp_path / "lib", other)
    vectors_for(other.load(), backend)
    cache = other.root / "cache" / "semantic"
    [entry] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    semantic_mod._RECENT.clear()
    assert vectors_for(other.load(), backend).embedded == 0  # read from that entry
    assert (entry / "vectors.npy").stat().st_size > 0


def test_incremental_update_equals_a_rebuild_with_semantic_evidence_on(store, tmp_path):
    write_skill(
        tmp_path / "lib", "paper-search", "name: paper-search\ndescription: Look up academic papers.", "# p\n"
    )
    apply_change(store, "update", tmp_path / "lib" / "paper-search", library=tmp_path / "lib")
    full = SnapshotStore(tmp_path / "full")
    build_cold_start(tmp_path / "lib", full)
    semantic_mod._RECENT.clear()
    inc_r, full_r = Retriever(store.load()), Retriever(full.load())
    for q in ("can I find peer-reviewed papers?", "plot csv data", "rain tomorrow?", "send the report"):
        a, b = inc_r.rank(q), full_r.rank(q)
        assert a.order.tolist() == b.order.tolist()
        np.testing.assert_allclose(dense_rho(a), dense_rho(b), rtol=0, atol=1e-6)


def test_paper_preset_is_recorded_and_retrieval_follows_it(tmp_path):
    from click.testing import CliRunner

    from segos_pipeline.cli import main as cli

    lib = simple_library(tmp_path / "lib", SKILLS)
    runner = CliRunner()
    for preset in ("paper", "default"):
        res = runner.invoke(cli, ["build", str(lib), "--store", str(tmp_path / preset), "--preset", preset])
        assert res.exit_code == 0, res.output
    paper, default = (SnapshotStore(tmp_path / p).load() for p in ("paper", "default"))
    assert paper.manifest["config"]["preset"] == "paper" and paper.manifest["config"]["graph"]["knn_k"] == 1
    assert default.manifest["config"]["preset"] == "default"
    assert default.manifest["config"]["graph"]["knn_k"] == 1
    r_paper, r_default = Retriever(paper), Retriever(default)
    assert r_paper.semantic is None and r_paper.config.seed_df_max == 1.0
    assert r_default.semantic is not None
    # the CLI's retrieve starts from the version's preset too: no semantic evidence, so no paraphrase hit
    out = runner.invoke(
        cli, ["retrieve", "where can I read academic research?", "--store", str(tmp_path / "paper")]
    )
    assert out.exit_code == 0 and "paper-search" not in out.output
    bad = runner.invoke(cli, ["build", str(lib), "--store", str(tmp_path / "x"), "--preset", "nope"])
    assert bad.exit_code != 0 and "nope" in bad.output


def test_relevance_is_absolute_and_the_floor_empties_a_bundle_of_nothing(store):
    """Evidence is normalised per query (the best of nothing scores 1); relevance is not. A query whose
    words no skill has gets no skills and no_match, with or without an embedding; the floor judges the
    bundle, and 0 turns it off."""
    for config in (RetrievalConfig(), LEXICAL):
        r = Retriever(store.load(), config)
        nothing = r.retrieve("xyzzy quux frobnicate")
        assert nothing.no_match and nothing.skills == [] and nothing.seeds == []
        assert r.ranked_ids("xyzzy quux frobnicate", 5) == []
        real = r.retrieve("compress archives")
        assert not real.no_match and real.skills[0].id.endswith("zipper")
        assert real.skills[0].words == pytest.approx(1.0)  # both words are the zipper's
        assert real.skills[0].relevance >= config.min_score
        # one word of two: "compress" (one skill has it) against a word no skill has, which weighs more
        half = r.retrieve("compress frobnicate")
        known, unknown = bm25_idf(8, np.array([1, 0]))
        assert half.skills[0].words == pytest.approx(known / (known + unknown))
    lexical = Retriever(store.load(), LEXICAL)
    # without an embedding the configured floor asks for a word in common; an explicit one holds as given
    assert not lexical.retrieve("compress frobnicate").no_match
    assert lexical.retrieve("compress frobnicate", min_score=0.6).no_match
    assert lexical.retrieve("xyzzy quux", min_score=0).skills == []  # no evidence at all: nothing to list


def test_a_manifest_recording_the_removed_lists_setting_still_gives_its_retrieval():
    """Rounds before 2026-12-03 recorded `semantic_lists_min_skills` in their manifests' retrieval settings;
    a version's retrieval comes from its preset, so such a manifest loads as any other, and asking for
    the setting now is a clear error."""
    old = {"config": {"preset": "default", "retrieval": {"semantic_lists_min_skills": 200_000}}}
    assert retrieval_for(old) == RetrievalConfig()
    with pytest.raises(ValueError, match=r"unknown setting.*semantic_lists_min_skills"):
        RetrievalConfig().with_overrides(semantic_lists_min_skills=0)
