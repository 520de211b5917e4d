"""The cold-start build at scale: compact token table, fixed join cap, pooled join.

Each part must leave what a build produces unchanged: the stored token rows, the signature and the edges
of the compact / pooled paths equal those of the plain string table and the single-process join."""

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.config import BuildConfig, GraphConfig
from segos_pipeline.evaluation.synthetic import generate_library
from segos_pipeline.graph import semantic_edges as join
from segos_pipeline.graph.build import graph_tables
from segos_pipeline.graph.parsing import parse_library
from segos_pipeline.text import lexicon
from segos_pipeline.text.token_rows import EncodedTokens

from ..string_tokens import string_signature, string_token_table


@pytest.fixture(scope="module")
def synthetic_nodes(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    lib = tmp_path_factory.mktemp("syn-lib")
    generate_library(lib, 600, seed=3, workers=1)
    return parse_library(lib, workers=1).nodes


def _spec_edges(nodes: pl.DataFrame) -> pl.DataFrame:
    """The edges as the build made them before the scale work: string table, its signature, SPEC §4's
    growing cap max(1,000, 1% N), one process."""
    sig = string_signature(string_token_table(nodes), nodes.height)
    spec_cap = GraphConfig(df_cap_min=1_000, df_cap_fraction=0.01)
    return join.semantic_edges(nodes["id"], sig.matrix, spec_cap, workers=1)[0]


def test_encoded_tokens_decode_to_the_string_table(synthetic_nodes, monkeypatch):
    monkeypatch.setattr(lexicon, "TOKEN_CHUNK", 97)  # many chunks: the vocabulary grows across them
    strings = string_token_table(synthetic_nodes)
    compact = EncodedTokens.tokenise(synthetic_nodes)
    assert compact.height == strings.height
    size = sum(a.nbytes for c in compact.chunks for a in (c.node, c.field, c.col, c.tf))
    assert size <= 11 * compact.height  # bytes a row: 4 + 1 + 4 + 2
    assert compact.rows().equals(strings)
    a, b = 150, 420
    in_range = strings.filter(pl.col("node").is_between(a, b, closed="left"))
    assert compact.rows(a, b, local=True).equals(in_range.with_columns(node=pl.col("node") - a))
    expected, got = string_signature(strings, synthetic_nodes.height), compact.signature()
    assert got.vocab.equals(expected.vocab)
    assert got.matrix.shape == expected.matrix.shape and (got.matrix != expected.matrix).nnz == 0
    # the stored bytes too: the same row pointers, column order within rows and values (all 1)
    assert got.matrix.has_canonical_format
    assert np.array_equal(got.matrix.indptr, expected.matrix.indptr)
    assert np.array_equal(got.matrix.indices, expected.matrix.indices)
    assert np.array_equal(got.matrix.data, expected.matrix.data)


def test_term_counts_past_u16_are_kept(tmp_path):
    # the body keeps 200k characters (ParseConfig.max_body_chars): 66,000 two-letter words fit

    lib = tmp_path / "lib"
    (lib / "echo").mkdir(parents=True)
    (lib / "echo" / "SKILL.md").write_text("---\nname: echo\ndescription: echo words\n---\n" + "xy " * 66_000)
    nodes = parse_library(lib).nodes
    compact = EncodedTokens.tokenise(nodes)
    assert {c.tf.dtype for c in compact.chunks} == {np.dtype(np.uint32)}
    assert compact.rows().equals(string_token_table(nodes))
    assert compact.rows().filter(pl.col("token") == "xy")["tf"].max() == 66_000


def test_cold_start_stores_the_string_token_table(synthetic_nodes, tmp_path, monkeypatch):
    monkeypatch.setattr("segos_pipeline.store.parts.PART_ROWS", 128)  # several parts
    lib = tmp_path / "lib"
    generate_library(lib, 300, seed=5, workers=1)
    manifest = build_cold_start(lib, tmp_path / "store")
    snap = SnapshotStore(tmp_path / "store").load(manifest["version"])
    assert len(manifest["parts"]) > 1
    assert snap.tokens.equals(string_token_table(snap.nodes))
    stored = snap.files.read_signature()
    expected = string_signature(snap.tokens, snap.nodes.height)
    assert stored.vocab.equals(expected.vocab) and (stored.matrix != expected.matrix).nnz == 0
    assert snap.edges.equals(_spec_edges(snap.nodes))


def _random_signature(n: int, vocab: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    cols = np.minimum(rng.zipf(1.6, size=n * 12) - 1, vocab - 1)
    rows = np.repeat(np.arange(n), 12)
    m = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n, vocab))
    m.data[:] = 1.0
    return m


def test_pooled_join_equals_the_single_process_join(monkeypatch):
    sig = _random_signature(3_000, 2_000, seed=1)
    config = GraphConfig(knn_k=2, df_cap_min=300, join_block_rows=256)
    serial = join.topk_jaccard(sig, config, workers=1)
    monkeypatch.setattr(join, "PARALLEL_MIN_PAIRS", 0)
    pooled = join.topk_jaccard(sig, config, workers=2)
    for a, b in zip(serial[:3], pooled[:3], strict=True):
        assert np.array_equal(a, b)
    assert serial[3] == pooled[3]


def test_the_cap_is_fixed_and_bounds_the_candidates():
    config = GraphConfig()
    assert [join.df_cap(n, config) for n in (344, 100_000, 1_000_000)] == [1_000, 1_000, 1_000]
    # a token held by 1,500 of 200,000 skills is joined under max(1,000, 1% N), skipped under the fixed cap
    n = 200_000
    rows = np.concatenate([np.arange(1_500), np.arange(n)])
    cols = np.concatenate([np.zeros(1_500, np.int64), 1 + np.arange(n) // 2])  # plus one pair token each
    sig = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n, 1 + n // 2))
    *_, fixed = join.topk_jaccard(sig, config, workers=1)
    *_, growing = join.topk_jaccard(sig, GraphConfig(df_cap_fraction=0.01), workers=1)
    assert fixed.capped_tokens == 1 and growing.capped_tokens == 0
    assert fixed.unordered_pairs == growing.unordered_pairs == n // 2  # the pair token decides both


def test_real_library_edges_unchanged(shared_data, monkeypatch):
    """The real library (344 skills) gets the edge table of the build before the df cap, pooled or not:
    the cap does not bite there (no token above df 1,000)."""
    nodes = parse_library(shared_data / "skills").nodes
    monkeypatch.setattr(join, "PARALLEL_MIN_PAIRS", 0)  # force the pool on this small join
    tables = graph_tables(nodes, BuildConfig())
    assert tables.semantic.capped_tokens == 0
    assert tables.edges.height > 0 and tables.edges.equals(_spec_edges(nodes))


def test_pool_falls_back_to_one_process(monkeypatch):
    def broken(*_args, **_kwargs):
        raise OSError("no pool here")

    sig = _random_signature(800, 500, seed=2)
    config = GraphConfig(join_block_rows=64)
    serial = join.topk_jaccard(sig, config, workers=1)
    monkeypatch.setattr(join, "PARALLEL_MIN_PAIRS", 0)
    monkeypatch.setattr(join, "_pool_blocks", broken)
    fallback = join.topk_jaccard(sig, config, workers=2)
    assert all(np.array_equal(a, b) for a, b in zip(serial[:3], fallback[:3], strict=True))


def test_tokens_from_the_parse_workers_build_the_same_version(tmp_path, monkeypatch):
    """The build tokenises in the parse workers (chunks merged in id order) and falls back to tokenising
    the sorted node table when the chunks came out of order: both commit the version a build tokenising
    the node table in one place commits, byte for byte (same version id)."""
    from segos_pipeline.graph import build, parsing

    lib = tmp_path / "lib"
    generate_library(lib, 300, seed=5, workers=1)
    monkeypatch.setattr(parsing, "_PARALLEL_MIN", 40)  # a pool, and workers that find their own packages
    monkeypatch.setattr(parsing, "_CHUNK", 37)
    chunks: list[EncodedTokens] = []
    parsed = parse_library(lib, workers=2, per_chunk=EncodedTokens.of_nodes, on_chunk=chunks.append)
    assert parsed.in_order and len(chunks) > 3
    merger = build.TokenMerger()
    for chunk in chunks:
        merger.add(chunk)
    from_workers = merger.result()
    assert from_workers.rows().equals(string_token_table(parsed.nodes))
    # merged as each chunk came back, while the workers went on: the same table
    merger = build.TokenMerger()
    as_they_came = parse_library(lib, workers=2, per_chunk=EncodedTokens.of_nodes, on_chunk=merger.add)
    assert merger.n_nodes == parsed.nodes.height
    merged = build.parsed_tokens(as_they_came, merger)
    assert merged is not None and merged.rows().equals(from_workers.rows())
    assert merged.vocab.equals(from_workers.vocab)
    # a chunk out of order (as nested packages make it): the merged chunks would number skills wrongly
    out_of_order = parsing.ParsedLibrary(parsed.nodes, parsed.report, lib, in_order=False)
    assert build.parsed_tokens(out_of_order, merger) is None

    versions = {}
    for how in ("workers", "one place"):
        if how == "one place":
            monkeypatch.setattr(build, "parsed_tokens", lambda parsed, merged: None)
        versions[how] = build_cold_start(lib, tmp_path / how)["version"]
    assert versions["workers"] == versions["one place"]
