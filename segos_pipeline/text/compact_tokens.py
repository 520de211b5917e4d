"""The token table of a whole library in integer columns, built and held a chunk of skills at a time.

The string token table (node, field, token, tf; `lexicon.TOKEN_SCHEMA`) costs about 120 bytes a row as
polars columns, and a 1M-skill library has over a hundred million rows: held whole (and sorted globally)
it set the build's peak memory. Here each row is 11 bytes — node u32, field u8 (`lexicon.FIELD_CODE`),
token u32 (its index in a vocabulary that grows chunk by chunk, in first-seen order),
tf u16 (u32 only when a count does not fit) — and only one chunk of skills is ever held as strings.

What is stored is the string table: `rows(start, end)` decodes a node range back to its rows, sorted by
node, field name and token string (`token_table`), and `signature` is exactly `Signature.of` the whole
string table. The store writes a version's token parts from these decoded ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

from . import lexicon
from .chunk_tokens import FRAME_SCHEMA, ChunkTokens
from .lexicon import CODED_FIELDS, FIELD_CODE, SIGNATURE_FIELDS, TOKEN_SCHEMA, Signature
from .string_index import StringIndex


class TokenMerger:
    """Consecutive chunks (chunk i's nodes follow chunk i-1's) merged one at a time as they come, e.g. while
    parse workers are still tokenising later ones: a hash lookup per distinct token of each chunk, then
    integer gathers."""

    def __init__(self, vocab: StringIndex | None = None) -> None:
        self.vocab = StringIndex() if vocab is None else vocab
        self.parts: list[pl.DataFrame] = []
        self.n_nodes = 0

    def add(self, chunk: ChunkTokens) -> None:
        ids = self.vocab.ids(chunk.vocab)
        self.parts.append(
            chunk.frame.with_columns(
                (pl.col("node") + self.n_nodes).cast(pl.UInt32), token=ids[chunk.frame["token"].to_numpy()]
            )
        )
        self.n_nodes += chunk.n_nodes

    def result(self) -> CompactTokens:
        """The table of every chunk added so far."""
        frame = (
            pl.concat(self.parts, how="vertical_relaxed", rechunk=True)
            if self.parts
            else pl.DataFrame(schema=FRAME_SCHEMA)
        )
        return CompactTokens(frame, self.vocab.series().alias("token"), self.n_nodes)


def _merged(chunks: Iterable[ChunkTokens], vocab: StringIndex | None = None) -> CompactTokens:
    """The table of consecutive chunks, merged through `vocab` (a new index by default)."""
    merger = TokenMerger(vocab)
    for chunk in chunks:
        merger.add(chunk)
    return merger.result()


def _counted(chunks: Iterable[ChunkTokens], done: Callable[[int], None] | None) -> Iterator[ChunkTokens]:
    """The chunks, telling `done` how many skills are tokenised after each."""
    so_far = 0
    for chunk in chunks:
        so_far += chunk.n_nodes
        if done is not None:
            done(so_far)
        yield chunk


def token_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """(node, field, token, tf) of every field of every node, sorted by node, field name, token string:
    the string table, as a build stores it."""
    return CompactTokens.of(nodes).rows()


@dataclass(frozen=True)
class CompactTokens:
    """The sorted token table of `n_nodes` skills with integer field and token columns."""

    frame: pl.DataFrame  # node u32, field u8, token u32, tf u16|u32; sorted by node, field, token string
    vocab: pl.Series  # token string of each id
    n_nodes: int

    @classmethod
    def of(cls, nodes: pl.DataFrame, done: Callable[[int], None] | None = None) -> CompactTokens:
        """Tokenise `nodes` chunk by chunk; `done(n)` hears how many skills are tokenised so far."""
        step = lexicon.TOKEN_CHUNK  # read at call time: tests shrink it to exercise many chunks
        chunks = (ChunkTokens.of(nodes.slice(start, step)) for start in range(0, nodes.height, step))
        return _merged(_counted(chunks, done))

    @classmethod
    def from_chunks(cls, chunks: Sequence[ChunkTokens]) -> CompactTokens:
        """The table of consecutive chunks (chunk i's nodes follow chunk i-1's): `TokenMerger` of them."""
        return _merged(chunks)

    @property
    def height(self) -> int:
        return self.frame.height

    def _span(self, start: int, end: int) -> tuple[int, int]:
        node = self.frame["node"]
        return int(node.search_sorted(start, side="left")), int(node.search_sorted(end, side="left"))

    def rows(self, start: int = 0, end: int | None = None, local: bool = False) -> pl.DataFrame:
        """The string token rows (`TOKEN_SCHEMA`) of nodes [start, end); `local` numbers them from 0."""
        end = self.n_nodes if end is None else end
        a, b = self._span(start, end)
        part = self.frame[a:b]
        fields = pl.Series("field", CODED_FIELDS, dtype=pl.String)
        return pl.DataFrame(
            {
                "node": (part["node"] - start if local else part["node"]).cast(pl.UInt32),
                "field": fields.gather(part["field"]),
                "token": self.vocab.gather(part["token"]).alias("token"),
                "tf": part["tf"].cast(pl.UInt32),
            },
            schema=TOKEN_SCHEMA,
        )

    def signature(self) -> Signature:
        """`Signature.of` the string table: the binary skill × signature-token matrix, columns in the
        sorted order of the tokens that occur in a signature field."""
        # numpy over the integer columns, no hashing of (node, token) pairs. The rows are sorted by node, so
        # the CSR row pointers are counts; a token in two signature fields of a skill is one entry once
        # `sum_duplicates` has sorted each (short) row, and is set back to 1. The COO route this replaced
        # was slower at a million skills, converting and checking tens of millions of entries.
        wanted = np.zeros(256, dtype=bool)  # indexed by field code (u8)
        wanted[[FIELD_CODE[f] for f in SIGNATURE_FIELDS]] = True
        keep = wanted[self.frame["field"].to_numpy()]
        rows = self.frame["node"].to_numpy()[keep]
        tokens = self.frame["token"].to_numpy()[keep]
        present = np.zeros(len(self.vocab), dtype=bool)
        present[tokens] = True
        ids = pl.Series(np.flatnonzero(present), dtype=pl.UInt32)
        words = self.vocab.gather(ids)
        order = words.arg_sort()  # column j holds the j-th token string in sorted order
        col_of = np.zeros(len(self.vocab), dtype=np.int32)
        col_of[ids.gather(order).to_numpy()] = np.arange(len(ids), dtype=np.int32)
        indptr = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n_nodes), out=indptr[1:])
        data = np.ones(len(rows), dtype=np.float32)
        matrix = sp.csr_matrix((data, col_of[tokens], indptr), shape=(self.n_nodes, len(ids)))
        matrix.sum_duplicates()
        matrix.data[:] = 1.0
        return Signature(matrix, words.gather(order).alias("token"))
