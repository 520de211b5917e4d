"""The integer tokenise path: `EncodedTokens.tokenise`, and `TokenMerger` over `EncodedTokens.of_nodes` of
any slicing, give exactly the string token table's rows (same order) and its signature."""

import pickle

import numpy as np
import polars as pl
import pytest

from segos_pipeline.evaluation.synthetic import generate_library
from segos_pipeline.graph.parsing import parse_library
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.text import lexicon
from segos_pipeline.text.chunk_tokens import word_codes
from segos_pipeline.text.token_rows import EncodedTokens, TokenMerger

from ..conftest import SHARED_DATA, write_skill
from ..string_tokens import string_signature, string_token_table


def _slices(nodes: pl.DataFrame, sizes: list[int]) -> list[pl.DataFrame]:
    """Consecutive slices of the given sizes (cycled), covering all of `nodes`."""
    out, start, i = [], 0, 0
    while start < nodes.height:
        size = sizes[i % len(sizes)]
        out.append(nodes.slice(start, size))
        start, i = start + size, i + 1
    return out


def _merged(chunks: list[EncodedTokens]) -> EncodedTokens:
    merger = TokenMerger()
    for chunk in chunks:
        merger.add(chunk)
    return merger.result()


def _assert_same(got: EncodedTokens, strings: pl.DataFrame, nodes: pl.DataFrame) -> None:
    n = nodes.height
    assert got.n_nodes == n and got.height == strings.height
    assert got.rows().equals(strings)
    for a, b in [(0, 1), (n // 3, n // 2 + 1), (n - 1, n), (n, n)]:
        in_range = strings.filter(pl.col("node").is_between(a, b, closed="left"))
        assert got.rows(a, b).equals(in_range)
        assert got.rows(a, b, local=True).equals(in_range.with_columns(node=pl.col("node") - a))
    expected, sig = string_signature(strings, n), got.signature()
    assert sig.vocab.equals(expected.vocab)
    assert sig.matrix.shape == expected.matrix.shape and (sig.matrix != expected.matrix).nnz == 0


def _assert_contract(nodes: pl.DataFrame, slicings: list[list[int]]) -> None:
    strings = string_token_table(nodes)
    _assert_same(EncodedTokens.tokenise(nodes), strings, nodes)
    for sizes in slicings:
        chunks = [EncodedTokens.of_nodes(s) for s in _slices(nodes, sizes)]
        _assert_same(_merged(chunks), strings, nodes)


@pytest.fixture(scope="module")
def generated_nodes(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    lib = tmp_path_factory.mktemp("gen-lib")
    generate_library(lib, 500, seed=11, workers=1)
    return parse_library(lib, workers=1).nodes


def test_demo_library_any_slicing():
    nodes = parse_library(DEFAULT_LIBRARY).nodes
    _assert_contract(nodes, [[1], [7], [nodes.height], [3, 0, 1, 20], [nodes.height + 50]])


def test_generated_library_any_slicing(generated_nodes, monkeypatch):
    _assert_contract(generated_nodes, [[2_000], [97], [1, 0, 250, 13]])
    monkeypatch.setattr(lexicon, "TOKEN_CHUNK", 61)  # EncodedTokens.tokenise over many chunks too
    strings = string_token_table(generated_nodes)
    _assert_same(EncodedTokens.tokenise(generated_nodes), strings, generated_nodes)


def test_real_libraries_any_slicing():
    if not (SHARED_DATA / "skills").is_dir():
        pytest.skip(f"real skill library not found at {SHARED_DATA / 'skills'} (../shared/data is absent)")
    nodes = parse_library(SHARED_DATA / "skills").nodes
    _assert_contract(nodes, [[2_000], [1, 333, 0, 64]])


def test_awkward_text(tmp_path):
    """Non-ASCII case folding that splits a word (İ lowercases to i + a combining dot), scripts without
    case, digits, stopword-only and empty skills, and term counts past u16 in one chunk only."""
    texts = {
        "turk": "İstanbul İZMİR straße STRASSE ﬁle naïve café",
        "cjk": "数据 分析 データ 解析 emoji 🙂 mixed数据 x2 3d 2024 ai",
        "stop": "the and of to a in",
        "empty": "",
        "many": "xy " * 66_000 + "parsing parses parsed parse",
        "plain": "Parses ledgers, encoding classes and glasses; sizzling buzzes.",
    }
    for name, body in texts.items():
        write_skill(tmp_path, name, f"name: {name}\ndescription: {body[:200]}", body)
    nodes = parse_library(tmp_path).nodes
    _assert_contract(nodes, [[1], [2, 0, 4], [len(texts)]])
    chunks = [EncodedTokens.of_nodes(s) for s in _slices(nodes, [1])]
    assert {c.chunks[0].tf.dtype for c in chunks} == {np.dtype(np.uint16), np.dtype(np.uint32)}
    assert _merged(chunks).rows()["tf"].max() >= 66_000


def test_empty_input():
    nodes = parse_library(DEFAULT_LIBRARY).nodes.clear()
    empty = EncodedTokens.of_nodes(nodes)
    assert empty.height == 0 and empty.n_nodes == 0 and len(empty.vocab) == 0
    for got in (EncodedTokens.tokenise(nodes), _merged([]), _merged([empty])):
        assert got.n_nodes == 0 and got.height == 0
        assert got.rows().equals(string_token_table(nodes))


def test_chunk_is_integer_rows_with_its_own_sorted_vocabulary_and_pickles_small(generated_nodes):
    chunk = EncodedTokens.of_nodes(generated_nodes.slice(100, 200))
    (rows,) = chunk.chunks
    dtypes = [a.dtype for a in (rows.node, rows.field, rows.col, rows.tf)]
    assert dtypes == [np.dtype(t) for t in (np.int32, np.uint8, np.int32, np.uint16)]
    assert (rows.start, rows.stop) == (0, 200)
    assert rows.node.min() == 0 and rows.node.max() == 199  # local to the chunk
    assert chunk.vocab.is_sorted() and chunk.vocab.n_unique() == len(chunk.vocab)
    assert rows.col.max() == len(chunk.vocab) - 1 and len(np.unique(rows.col)) == len(chunk.vocab)
    key = (rows.node.astype(np.int64) * len(chunk.vocab) + rows.col) * len(lexicon.CODED_FIELDS) + rows.field
    assert (np.diff(key) > 0).all()  # sorted by (node, col, field), as every chunk of the table is
    back = pickle.loads(pickle.dumps(chunk))
    assert back.rows().equals(chunk.rows()) and back.vocab.equals(chunk.vocab) and back.n_nodes == 200
    # a few integer columns and the distinct tokens once: far smaller than the string rows pickled
    strings = string_token_table(generated_nodes.slice(100, 200))
    assert len(pickle.dumps(chunk)) < len(pickle.dumps(strings)) / 2


def test_tokenised_rows_are_the_rows_coded_from_the_string_table(generated_nodes):
    """One encoding: what the build tokenises is, array for array, what the string table it stores codes
    to (the lexical index's input either way), field codes and vocabulary included."""
    encoded = EncodedTokens.tokenise(generated_nodes)
    coded = EncodedTokens.of_table(encoded.rows(), generated_nodes.height, step=lexicon.TOKEN_CHUNK)
    assert encoded.vocab.equals(coded.vocab)
    for a, b in zip(encoded.chunks, coded.chunks, strict=True):
        for name in ("node", "field", "col", "tf"):
            assert (getattr(a, name) == getattr(b, name)).all(), name
    assert len(np.unique(np.concatenate([c.field for c in encoded.chunks]))) == len(lexicon.FIELD_CODE)


def test_word_codes_are_exact_even_when_keys_collide():
    words = pl.Series(["load", "data", "load", "csv", "parse", "data", "zz"])
    for key in (words.hash(), words.str.len_bytes().cast(pl.UInt64), pl.Series([7] * 7, dtype=pl.UInt64)):
        distinct, codes = word_codes(words, key)
        assert distinct.n_unique() == len(distinct) == 5
        assert distinct.gather(codes).equals(words, check_names=False)
        assert codes.dtype == np.uint32 or np.issubdtype(codes.dtype, np.integer)


def test_chunks_keep_the_order_and_report_progress(monkeypatch):
    nodes = parse_library(DEFAULT_LIBRARY).nodes
    monkeypatch.setattr(lexicon, "TOKEN_CHUNK", 7)
    heard: list[int] = []
    got = EncodedTokens.tokenise(nodes, heard.append)
    assert heard == [*range(7, nodes.height, 7), nodes.height]
    _assert_same(got, string_token_table(nodes), nodes)
