"""The token table as integer rows over a sorted vocabulary, in node-range chunks: its one integer encoding.

Parse workers encode their own slice of skills (`EncodedTokens.of_nodes`, each over its own sorted
vocabulary), the build merges the slices (`TokenMerger`) and the store writes its string rows
decoded a part at a time (`rows`); the lexical index is built from the chunks (retrieval/lexical.py), read
back from a stored version a part at a time (`of_parts`), and an evolution round splices revised skills'
rows in (`revised`) and commits the signature of the result (`signature`).

The string token table (node, field, token, tf; `lexicon.TOKEN_SCHEMA`) costs about 120 bytes a row as polars
columns and a 1M-skill library has over 100M rows; here a row is 11 to 13 bytes (node i32, field u8 =
`lexicon.FIELD_CODE`, col i32 = the token's rank in the sorted vocabulary, tf u16, or u32 when a count does
not fit), and neither a build nor a reader of a stored version holds the table whole as strings.

Field codes and columns are ranks of the field names and token strings, so integer order is string order.
Within a chunk the rows are sorted by (node, col, field): the per-field terms of a (skill, token) are summed
in the same order however the skills are chunked, so an index built from any chunking, from the stored
parts, or from a table with some skills' rows replaced holds the same numbers bit for bit as one built from
the whole table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import polars as pl
import scipy.sparse as sp

from . import lexicon
from .chunk_tokens import chunk_rows
from .lexicon import CODED_FIELDS, FIELD_CODE, OTHER_FIELD, SIGNATURE_FIELDS, TOKEN_SCHEMA, Signature

NAME = FIELD_CODE["name"]
CHUNK_NODES = 4096  # skills per chunk of a table coded from strings: a revision re-sorts only its chunk
_FIELD_NAMES = pl.Series("field", CODED_FIELDS, dtype=pl.String)
_ROWS_SCHEMA = {"node": pl.Int32, "field": pl.UInt8, "col": pl.Int32, "tf": pl.UInt16}


@dataclass(frozen=True)
class TokenRows:
    """The token rows of the skills [start, stop), sorted by (node, col, field)."""

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
        frame["tf"].to_numpy()[order],
    )


def field_codes() -> pl.Expr:
    """The `field` column as codes into CODED_FIELDS."""
    return pl.col("field").replace_strict(FIELD_CODE, default=OTHER_FIELD, return_dtype=pl.UInt8)


def _coded(tokens: pl.DataFrame, col: np.ndarray, offset: int = 0) -> pl.DataFrame:
    """(node + offset, col, field code, tf) of string token rows, `col` the column of each row's token."""
    return tokens.select(
        pl.col("node").cast(pl.Int64) + offset, col=pl.Series(col), field=field_codes(), tf="tf"
    )


def _columns(vocab: pl.Series, tokens: pl.Series) -> np.ndarray:
    """The column of each of `tokens` in the sorted `vocab`, every one of which it holds. A join, not a cast
    to the vocabulary as an Enum: that cast was no faster and held the GIL for long stretches at a time,
    stalling requests while a version loads in the background."""
    lookup = pl.DataFrame({"token": vocab, "col": np.arange(len(vocab), dtype=np.int64)})
    frame = pl.DataFrame({"token": tokens})
    return frame.join(lookup, on="token", how="left", maintain_order="left")["col"].to_numpy()


def distinct_sorted(tokens: pl.Series) -> pl.Series:
    """The vocabulary of a token column: unique in first-seen order, then sorted (the same as
    unique().sort(), in about half the time on millions of token rows)."""
    return tokens.drop_nulls().unique(maintain_order=True).sort().alias("token")


def _split(frame: pl.DataFrame, n_nodes: int, step: int) -> list[TokenRows]:
    """Node-range chunks of integer rows of every skill, each chunk sorted on its own. The same rows as
    one sort of the whole table (the key starts with the node), but a chunk's key, order and copies are
    small arrays the allocator hands from chunk to chunk: the whole-table sort made several table-sized
    temporaries, and touching fresh memory was most of its cost."""
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
    vocab: pl.Series  # the distinct tokens, sorted: column j is vocab[j]
    n_nodes: int

    @classmethod
    def of_nodes(cls, nodes: pl.DataFrame) -> EncodedTokens:
        """Tokenise a node frame on its own (node i is `nodes` row i), over its own vocabulary: what a
        parse worker sends back, a few integer arrays and the chunk's distinct tokens once."""
        columns, vocab = chunk_rows(nodes)
        return cls([TokenRows(0, nodes.height, **columns)], vocab, nodes.height)

    @classmethod
    def tokenise(cls, nodes: pl.DataFrame, done: Callable[[int], None] | None = None) -> EncodedTokens:
        """Tokenise `nodes` a chunk at a time; `done(n)` hears how many skills are tokenised so far."""
        merger = TokenMerger()
        step = lexicon.TOKEN_CHUNK  # read at call time: tests shrink it to exercise many chunks
        for start in range(0, nodes.height, step):
            merger.add(cls.of_nodes(nodes.slice(start, step)))
            if done is not None:
                done(merger.n_nodes)
        return merger.result()

    @classmethod
    def of_table(
        cls, tokens: pl.DataFrame, n_nodes: int, step: int = CHUNK_NODES, vocab: pl.Series | None = None
    ) -> EncodedTokens:
        """The rows of a string token table held in memory (a draft's, a round's). `vocab`: the table's
        vocabulary when the caller has it (an index built of this very table), not sorted again."""
        vocab = distinct_sorted(tokens["token"]) if vocab is None else vocab
        # Every token is in the vocabulary: its column is its code as an Enum of the sorted vocabulary
        # (less CPU than a join; this runs in a round, not on a thread beside requests).
        coded = tokens.select(
            pl.col("node").cast(pl.Int64),
            col=pl.col("token").cast(pl.Enum(vocab)).to_physical(),
            field=field_codes(),
            tf="tf",
        )
        return cls(_split(coded, n_nodes, step), vocab, n_nodes)

    @classmethod
    def of_parts(cls, parts: Iterable[tuple[int, int, pl.DataFrame]], n_nodes: int) -> EncodedTokens:
        """The rows of a stored version given as (first node, end node, rows with `node` local) a token part
        at a time: each part is read once and coded against its own sorted vocabulary, then recoded against
        the union of them."""
        coded, words = [], []
        for start, stop, frame in parts:
            local = frame["token"].unique().sort()
            coded.append((start, stop, _coded(frame, _columns(local, frame["token"]), start)))
            words.append(local)
        vocab = distinct_sorted(pl.concat(words) if words else pl.Series("token", [], dtype=pl.String))
        chunks = []
        while coded:  # each part's string-coded rows are let go once recoded
            (start, stop, part), local = coded.pop(0), words.pop(0)
            to_global = pl.Series(_columns(vocab, local))
            chunks.append(sorted_rows(part.with_columns(col=to_global.gather(part["col"])), start, stop))
        return cls(chunks, vocab, n_nodes)

    @property
    def height(self) -> int:
        return sum(len(c.node) for c in self.chunks)

    def rows(self, start: int = 0, end: int | None = None, local: bool = False) -> pl.DataFrame:
        """The string token rows (`TOKEN_SCHEMA`) of nodes [start, end), sorted by node, field name and
        token string, as a version stores them; `local` numbers them from 0."""
        end = self.n_nodes if end is None else end
        parts = []
        for c in self.chunks:
            if c.start < end and start < c.stop:
                a, b = np.searchsorted(c.node, [start, end])
                parts.append(
                    pl.DataFrame(
                        {"node": c.node[a:b], "field": c.field[a:b], "col": c.col[a:b], "tf": c.tf[a:b]}
                    )
                )
        frame = pl.concat(parts, how="vertical_relaxed") if parts else pl.DataFrame(schema=_ROWS_SCHEMA)
        # Within a node the rows are in column order, so a stable sort on (node, field) alone gives (node,
        # field, col), which is (node, field name, token string): codes and columns are ranks. In polars,
        # not numpy: the store decodes parts on its writer threads, and numpy's temporaries there grew
        # those threads' own glibc arenas, which nothing on the build's thread reuses.
        frame = frame.sort(
            pl.col("node").cast(pl.Int64) * len(CODED_FIELDS) + pl.col("field"), maintain_order=True
        )
        return pl.DataFrame(
            {
                "node": (frame["node"].cast(pl.Int64) - (start if local else 0)).cast(pl.UInt32),
                "field": _FIELD_NAMES.gather(frame["field"]),
                "token": self.vocab.gather(frame["col"]),
                "tf": frame["tf"].cast(pl.UInt32),
            },
            schema=TOKEN_SCHEMA,
        )

    def revised(self, rows: pl.DataFrame) -> EncodedTokens:
        """These rows with every skill of `rows` (string token rows, `node` global) given exactly those
        rows instead of its own: what encoding the revised table gives (vocabulary included: tokens the
        revision brings are inserted, tokens no skill holds any more are dropped), at a cost that follows
        the revised skills plus integer passes over the rows."""
        changed = np.unique(rows["node"].to_numpy().astype(np.int64))
        chunks, vocab = self.chunks, self.vocab
        distinct = rows["token"].unique()
        new = distinct.filter(~distinct.is_in(vocab.implode()))
        if len(new):
            # The sorted vocabulary with new tokens inserted: old columns keep their order, so every
            # chunk stays sorted under the monotone remapping.
            vocab = pl.concat([vocab, new.alias("token")]).sort()
            remap = _columns(vocab, self.vocab).astype(np.int32)
            chunks = [replace(c, col=remap[c.col]) for c in chunks]
        fresh = sorted_rows(_coded(rows, _columns(vocab, rows["token"])), 0, self.n_nodes)
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
            spliced = []
            for a in ("node", "field", "col", "tf"):
                old, add = getattr(kept, a), getattr(fresh, a)[lo:hi]
                spliced.append(np.insert(old.astype(np.result_type(old, add), copy=False), at, add))
            out.append(TokenRows(c.start, c.stop, *spliced))
        held = np.zeros(len(vocab), dtype=bool)
        for c in out:
            held[c.col] = True
        if not held.all():  # tokens only the revised skills had: gone from the vocabulary, as on a rebuild
            remap = (np.cumsum(held) - 1).astype(np.int32)
            vocab = vocab.filter(pl.Series(held))
            out = [replace(c, col=remap[c.col]) for c in out]
        return EncodedTokens(out, vocab, self.n_nodes)

    def signature(self) -> Signature:
        """The binary skill × signature-token matrix of these rows, columns in the sorted order of the
        tokens that occur in a signature field: what a version stores, from the integer rows."""
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
        return Signature(matrix, self.vocab.filter(pl.Series(present)).alias("token"))


class TokenMerger:
    """Consecutive encoded slices (slice i's nodes follow slice i-1's) gathered as they come, e.g. while
    parse workers are still tokenising later ones; `result` sorts the union of their vocabularies once and
    maps each slice's columns into it by binary search. A slice's own columns are string ranks, so the map
    is monotone and its rows, sorted by them, stay sorted: no row is sorted again."""

    def __init__(self) -> None:
        self.parts: list[EncodedTokens] = []
        self.n_nodes = 0

    def add(self, part: EncodedTokens) -> None:
        n = self.n_nodes
        # Every array copied here, on the build's thread: a parse worker's slice was unpickled on the
        # process pool's result thread, into that thread's own glibc arena; held until the build ended, it
        # pinned that arena, whose space the build's later allocations did not reuse.
        chunks = [
            TokenRows(c.start + n, c.stop + n, c.node + n, c.field.copy(), c.col.copy(), c.tf.copy())
            for c in part.chunks
        ]
        self.parts.append(EncodedTokens(chunks, part.vocab, part.n_nodes))
        self.n_nodes += part.n_nodes

    def result(self) -> EncodedTokens:
        """The table of every slice added so far."""
        words = [p.vocab for p in self.parts]
        vocab = distinct_sorted(pl.concat(words) if words else pl.Series("token", [], dtype=pl.String))
        chunks = []
        for p in self.parts:
            col = vocab.search_sorted(p.vocab).to_numpy().astype(np.int32)
            chunks.extend(replace(c, col=col[c.col]) for c in p.chunks)
        return EncodedTokens(chunks, vocab, self.n_nodes)


def token_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """(node, field, token, tf) of every field of every node, sorted by node, field name, token string:
    the string table, as a build stores it."""
    return EncodedTokens.tokenise(nodes).rows()


def table_signature(tokens: pl.DataFrame, n_nodes: int) -> Signature:
    """The signature of a string token table (what a version stores, derived when it stores none)."""
    return EncodedTokens.of_table(tokens, n_nodes).signature()
