"""A version's token table as integer rows over a sorted vocabulary, in node-range chunks: what the lexical
index is built from (retrieval/lexical.py).

The string token table (node, field, token, tf) costs about 120 bytes a row as polars columns and a
1M-skill library has over 100M rows; here a row is 13 bytes (node i32, field u8, column i32, tf f32 — token
counts are exact in f32), and a stored version is read a part at a time, never held whole as strings.

Within a chunk the rows are sorted by (node, column) and, within one (node, column), by field in the
table's own alphabetical field order, so the per-field terms of a (skill, token) are summed in the same
order however the skills are chunked: an index built from any chunking, from the stored parts, or from a
table with some skills' rows replaced (`EncodedTokens.revised`, L3's exact verification) holds the same
numbers bit for bit as one built from the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..text.lexicon import CODED_FIELDS, FIELD_CODE, OTHER_FIELD, SIGNATURE_FIELDS, Signature, Vocabulary

if TYPE_CHECKING:
    from ..store.version_files import VersionFiles

NAME = FIELD_CODE["name"]
CHUNK_NODES = 4096  # skills per chunk of an in-memory table: a revision re-sorts only its chunk


@dataclass(frozen=True)
class TokenRows:
    """The token rows of the skills [start, stop), sorted as the module docstring says."""

    start: int
    stop: int
    node: np.ndarray  # the skill's index in the whole node table
    field: np.ndarray  # index into CODED_FIELDS
    col: np.ndarray  # the token's column in the vocabulary
    tf: np.ndarray

    @cached_property
    def first(self) -> np.ndarray:
        """Positions of the first row of each distinct (node, col): one matrix entry each."""
        new = np.ones(len(self.node), dtype=bool)
        if len(new) > 1:
            new[1:] = (self.node[1:] != self.node[:-1]) | (self.col[1:] != self.col[:-1])
        return np.flatnonzero(new)

    def where(self, keep: np.ndarray) -> TokenRows:
        """The rows where `keep` holds (their order kept)."""
        node, field, col, tf = self.node[keep], self.field[keep], self.col[keep], self.tf[keep]
        return replace(self, node=node, field=field, col=col, tf=tf)

    def csr(self, values: np.ndarray | None, n_cols: int, at: np.ndarray | None = None) -> sp.csr_matrix:
        """The (node - start) × column matrix of `values` (one per row; None: the pattern), duplicate
        (node, col) rows summed in field order; `at` restricts it to those rows (distinct pairs)."""
        at = self.first if at is None else at
        k = self.stop - self.start
        indptr = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.node[at] - self.start, minlength=k), out=indptr[1:])
        if values is None:
            data = np.ones(len(at))
        elif at is self.first:
            data = np.add.reduceat(values, at) if len(at) else np.zeros(0)
        else:
            data = values[at]
        return sp.csr_matrix((data, self.col[at], indptr), shape=(k, n_cols))


def sorted_rows(frame: pl.DataFrame, start: int, stop: int) -> TokenRows:
    """`TokenRows` of integer columns (node, col, field, tf) whose nodes lie in [start, stop)."""
    node = frame["node"].to_numpy().astype(np.int64)
    col = frame["col"].to_numpy().astype(np.int64)
    field = frame["field"].to_numpy().astype(np.int64)
    # One stable sort of an integer key (node, col, field): several times less CPU than a three-column sort,
    # and fast on the stored order, which is already sorted by node.
    width = int(col.max()) + 1 if len(col) else 1
    order = np.argsort(((node - start) * width + col) * len(CODED_FIELDS) + field, kind="stable")
    return TokenRows(
        start,
        stop,
        node[order].astype(np.int32),
        field[order].astype(np.uint8),
        col[order].astype(np.int32),
        frame["tf"].to_numpy()[order].astype(np.float32),
    )


def _coded(tokens: pl.DataFrame, lookup: pl.DataFrame, offset: int = 0) -> pl.DataFrame:
    """(node + offset, col, field code, tf) of string token rows; tokens outside `lookup` are dropped."""
    return tokens.join(lookup, on="token", how="inner").select(
        pl.col("node").cast(pl.Int64) + offset,
        "col",
        field=field_codes(),
        tf="tf",
    )


def field_codes() -> pl.Expr:
    """The `field` column as codes into CODED_FIELDS."""
    return pl.col("field").replace_strict(FIELD_CODE, default=OTHER_FIELD, return_dtype=pl.UInt8)


def _split(frame: pl.DataFrame, n_nodes: int, step: int) -> list[TokenRows]:
    """Node-range chunks of integer rows of every skill, each chunk sorted on its own. The same rows as
    one sort of the whole table (the key starts with the node), but a chunk's key, order and copies are
    small arrays the allocator hands from chunk to chunk: the whole-table sort made several table-sized
    temporaries, and touching fresh memory was most of its cost (L3 encodes 10.7M rows on 100k skills:
    7 s of a round's 9)."""
    if not frame["node"].is_sorted():
        frame = frame.sort("node", maintain_order=True)
    bounds = [*range(0, n_nodes, step), n_nodes] if n_nodes else [0, 0]
    cuts = np.searchsorted(frame["node"].to_numpy(), bounds, side="left")
    return [
        sorted_rows(frame.slice(i, j - i), a, b)
        for a, b, i, j in zip(bounds[:-1], bounds[1:], cuts[:-1], cuts[1:], strict=True)
    ]


@dataclass(frozen=True)
class EncodedTokens:
    """The token table of `n_nodes` skills as `TokenRows` chunks (disjoint node ranges covering them)."""

    chunks: list[TokenRows]
    vocab: Vocabulary
    n_nodes: int

    @classmethod
    def of_table(
        cls, tokens: pl.DataFrame, n_nodes: int, step: int = CHUNK_NODES, vocab: Vocabulary | None = None
    ) -> EncodedTokens:
        """The rows of a string token table held in memory (a draft's, a round's). `vocab`: the table's
        vocabulary when the caller has it (an index built of this very table), not sorted again."""
        vocab = Vocabulary(tokens["token"]) if vocab is None else vocab
        # Every token is in the vocabulary: its column is its code as an Enum of the sorted vocabulary
        # (less CPU than a join; this runs in a round, not on a thread beside requests).
        coded = tokens.select(
            pl.col("node").cast(pl.Int64),
            col=pl.col("token").cast(pl.Enum(vocab.tokens)).to_physical(),
            field=field_codes(),
            tf="tf",
        )
        return cls(_split(coded, n_nodes, step), vocab, n_nodes)

    @classmethod
    def of_parts(cls, files: VersionFiles, n_nodes: int) -> EncodedTokens:
        """The rows of a stored version, read a token part at a time: each part is read once and coded
        against its own sorted vocabulary, then recoded against the union of them."""
        coded, words = [], []
        for start, stop, frame in files.token_parts():
            local = frame["token"].unique().sort()
            lookup = pl.DataFrame({"token": local, "col": np.arange(len(local), dtype=np.int64)})
            coded.append((start, stop, _coded(frame, lookup, start)))
            words.append(local)
        vocab = Vocabulary(pl.concat(words) if words else pl.Series("token", [], dtype=pl.String))
        chunks = []
        while coded:  # each part's string-coded rows are let go once recoded
            (start, stop, part), local = coded.pop(0), words.pop(0)
            to_global = pl.Series(vocab.column(local).astype(np.int64))
            chunks.append(sorted_rows(part.with_columns(col=to_global.gather(part["col"])), start, stop))
        return cls(chunks, vocab, n_nodes)

    def revised(self, rows: pl.DataFrame) -> EncodedTokens:
        """These rows with every skill of `rows` (string token rows, `node` global) given exactly those
        rows instead of its own: what encoding the revised table gives (vocabulary included: tokens the
        revision brings are inserted, tokens no skill holds any more are dropped), at a cost that follows
        the revised skills plus integer passes over the rows."""
        changed = np.unique(rows["node"].to_numpy().astype(np.int64))
        chunks, vocab = self.chunks, self.vocab
        new = [t for t in rows["token"].unique().to_list() if t not in vocab.index]
        if new:
            # The sorted vocabulary with new tokens inserted: old columns keep their order, so every
            # chunk stays sorted under the monotone remapping.
            vocab = Vocabulary(pl.concat([vocab.tokens, pl.Series("token", new, dtype=pl.String)]))
            remap = vocab.column(self.vocab.tokens).astype(np.int32)
            chunks = [replace(c, col=remap[c.col]) for c in chunks]
        fresh = sorted_rows(_coded(rows, vocab.lookup), 0, self.n_nodes)
        out = []
        for c in chunks:
            mine = changed[(changed >= c.start) & (changed < c.stop)]
            if not len(mine):
                out.append(c)
                continue
            kept = c.where(~np.isin(c.node, mine))
            lo, hi = np.searchsorted(fresh.node, [c.start, c.stop])
            # Inserted before the first kept row of a later skill: the chunk stays sorted, no re-sort.
            at = np.searchsorted(kept.node, fresh.node[lo:hi])
            spliced = [
                np.insert(getattr(kept, a), at, getattr(fresh, a)[lo:hi])
                for a in ("node", "field", "col", "tf")
            ]
            out.append(TokenRows(c.start, c.stop, *spliced))
        held = np.zeros(len(vocab), dtype=bool)
        for c in out:
            held[c.col] = True
        if not held.all():  # tokens only the revised skills had: gone from the vocabulary, as on a rebuild
            remap = (np.cumsum(held) - 1).astype(np.int32)
            vocab = Vocabulary(vocab.tokens.filter(pl.Series(held)))
            out = [replace(c, col=remap[c.col]) for c in out]
        return EncodedTokens(out, vocab, self.n_nodes)

    def signature(self) -> Signature:
        """`Signature.of` the table these rows encode, from the integer rows: a round that revised some
        descriptions commits the signature of its revised table without coding the library's strings
        again (15 s of a 100k round's commit)."""
        wanted = np.zeros(len(CODED_FIELDS), dtype=bool)
        wanted[[FIELD_CODE[f] for f in SIGNATURE_FIELDS]] = True
        nodes, cols = [], []
        for c in self.chunks:
            keep = wanted[c.field]
            node, col = c.node[keep], c.col[keep]
            # rows are sorted by (node, column): a token in two signature fields of a skill is one entry
            first = np.ones(len(node), dtype=bool)
            first[1:] = (node[1:] != node[:-1]) | (col[1:] != col[:-1])
            nodes.append(node[first])
            cols.append(col[first])
        node = np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.int32)
        col = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int32)
        present = np.zeros(len(self.vocab), dtype=bool)
        present[col] = True
        # the signature's vocabulary is the tokens some signature field holds, in the same sorted order
        compact = (np.cumsum(present) - 1).astype(np.int32)
        indptr = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(node, minlength=self.n_nodes), out=indptr[1:])
        data = np.ones(len(node), dtype=np.float32)
        matrix = sp.csr_matrix((data, compact[col], indptr), shape=(self.n_nodes, int(present.sum())))
        return Signature(matrix, self.vocab.tokens.filter(pl.Series(present)).alias("token"))
