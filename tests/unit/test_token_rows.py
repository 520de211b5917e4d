"""The integer token rows the lexical index is built from: any chunking, and a revision spliced in, give
the index of the whole revised table bit for bit."""

import polars as pl
import pytest

from segos_pipeline import RetrievalConfig, SnapshotStore
from segos_pipeline.evolution.descriptions import patch_tokens
from segos_pipeline.retrieval.lexical import LexicalIndex
from segos_pipeline.text.token_rows import EncodedTokens, table_signature, token_table

from ..conftest import SHARED_DATA
from ..string_tokens import string_signature
from .test_retrieval import _same_index

REVISIONS = {
    "new words": "Quantumfoo zyxglorp ledgers, brand-new words no skill has.",
    "fewer words": "",
    "repeats": "Summarise results twice, results results.",
}


def _library_tokens(request, library):
    if library == "demo":
        snap = SnapshotStore(request.getfixturevalue("demo_store")).load()
        return snap.nodes, snap.tokens
    from segos_pipeline.graph.parsing import parse_library

    if not (SHARED_DATA / "skills").is_dir():
        pytest.skip(f"real skill library not found at {SHARED_DATA / 'skills'} (../shared/data is absent)")
    nodes = parse_library(SHARED_DATA / "skills").nodes
    return nodes, token_table(nodes)


@pytest.mark.parametrize("library", ["demo", "real"])
def test_any_chunking_gives_the_same_index(request, library):
    nodes, tokens = _library_tokens(request, library)
    n, cfg = nodes.height, RetrievalConfig()
    whole = LexicalIndex(tokens, n, cfg)
    for step in (1, 7, 64, n + 5):
        _same_index(LexicalIndex.of(EncodedTokens.of_table(tokens, n, step=step), cfg), whole)


@pytest.mark.parametrize("library", ["demo", "real"])
def test_rows_in_any_order_give_the_same_rows(request, library):
    """Chunks are cut by node and sorted each on its own: a table not in node order (a draft's) must give
    the very rows the node-ordered table gives, chunk for chunk and array for array."""
    nodes, tokens = _library_tokens(request, library)
    n = nodes.height
    want = EncodedTokens.of_table(tokens, n, step=7)
    shuffled = tokens.sample(fraction=1.0, shuffle=True, seed=3)
    assert not shuffled["node"].is_sorted()
    _same_rows(EncodedTokens.of_table(shuffled, n, step=7), want)
    # L3 passes the vocabulary of the round's index instead of sorting the table's tokens again
    vocab = LexicalIndex(tokens, n, RetrievalConfig()).vocab.tokens
    _same_rows(EncodedTokens.of_table(tokens, n, step=7, vocab=vocab), want)


def _same_rows(got: EncodedTokens, want: EncodedTokens) -> None:
    assert got.vocab.equals(want.vocab)
    assert [(c.start, c.stop) for c in got.chunks] == [(c.start, c.stop) for c in want.chunks]
    for g, w in zip(got.chunks, want.chunks, strict=True):
        for name in ("node", "field", "col", "tf"):
            a, b = getattr(g, name), getattr(w, name)
            assert a.dtype == b.dtype and (a == b).all(), name


@pytest.mark.parametrize("library", ["demo", "real"])
@pytest.mark.parametrize("step", [5, 4096])
def test_revised_rows_give_the_index_of_the_revised_table(request, library, step):
    """L3's exact verification splices the revised skills' rows into the round's coded rows (new tokens
    shift the vocabulary's columns); its index must equal the one built from the revised table."""
    nodes, tokens = _library_tokens(request, library)
    n, cfg = nodes.height, RetrievalConfig()
    rows = [0, n // 2, n // 2 + 1, n - 1]  # the first and last skill, and neighbours within one chunk
    texts = [*REVISIONS.values(), "Loads ledgers"]
    revised_nodes = nodes.with_columns(description=nodes["description"].scatter(rows, texts))
    revised_tokens = patch_tokens(tokens, revised_nodes, rows)
    fresh = revised_tokens.filter(pl.col("node").is_in(rows))
    encoded = EncodedTokens.of_table(tokens, n, step=step)
    spliced = LexicalIndex.of(encoded.revised(fresh), cfg)
    reference = LexicalIndex(revised_tokens, n, cfg)
    _same_index(spliced, reference)
    assert "zyxglorp" in spliced.vocab.index and "zyxglorp" not in encoded.vocab
    # the round's rows are not changed by a revision: a second verification starts from them again
    _same_index(LexicalIndex.of(encoded, cfg), LexicalIndex(tokens, n, cfg))
    # a revision made of words the skill already has: the vocabulary and every other chunk are shared
    last = nodes.row(n - 1, named=True)
    own = nodes.with_columns(
        description=nodes["description"].scatter([n - 1], [f"{last['description']} {last['name']}"])
    )
    own_tokens = patch_tokens(tokens, own, [n - 1])
    again = encoded.revised(own_tokens.filter(pl.col("node") == n - 1))
    assert again.vocab is encoded.vocab
    shared = sum(a is b for a, b in zip(again.chunks, encoded.chunks, strict=True))
    assert shared == len(encoded.chunks) - 1
    _same_index(LexicalIndex.of(again, cfg), LexicalIndex(own_tokens, n, cfg))


@pytest.mark.parametrize("library", ["demo", "real"])
def test_signature_of_revised_rows_is_the_signature_of_the_revised_table(request, library):
    """A round that revised descriptions commits the signature of its spliced rows: it must be the one
    the string oracle gives of the revised table, entry for entry and column for column (the version's
    files, and so its id, depend on it), with the tokens a revision brings or takes away."""
    nodes, tokens = _library_tokens(request, library)
    n = nodes.height
    rows = [0, n // 2, n - 1]
    revised_nodes = nodes.with_columns(
        description=nodes["description"].scatter(rows, list(REVISIONS.values()))
    )
    revised_tokens = patch_tokens(tokens, revised_nodes, rows)
    encoded = EncodedTokens.of_table(tokens, n, step=5)
    for mine, table in (
        (encoded, tokens),
        (encoded.revised(revised_tokens.filter(pl.col("node").is_in(rows))), revised_tokens),
    ):
        got, want = mine.signature(), string_signature(table, n)
        assert table_signature(table, n).vocab.equals(got.vocab)
        assert got.matrix.shape == want.matrix.shape
        assert (got.matrix.indptr == want.matrix.indptr).all()
        assert (got.matrix.indices == want.matrix.indices).all()
        assert got.matrix.dtype == want.matrix.dtype and (got.matrix.data == 1).all()
        assert got.vocab.equals(want.vocab) and got.vocab.name == want.vocab.name
    assert "zyxglorp" in got.vocab.to_list() and "zyxglorp" not in encoded.signature().vocab.to_list()


def test_row_patch_of_a_skills_own_rows_is_its_row_of_the_index(demo_store):
    """L3 tries a revision on a patched row: scored from the same rows, the patch is the index's row."""
    snap = SnapshotStore(demo_store).load()
    index = LexicalIndex(snap.tokens, snap.nodes.height, RetrievalConfig())
    rows = index.matrix.tocsr()
    for node in range(snap.nodes.height):
        patch = index.row_patch(snap.tokens.filter(pl.col("node") == node).drop("node"))
        row = rows[node]
        assert patch == dict(zip(row.indices.tolist(), row.data.tolist(), strict=True))
