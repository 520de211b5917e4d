"""The token table of a whole library in integer columns, built and held a chunk of skills at a time.

The string token table (node, field, token, tf; `lexicon.TOKEN_SCHEMA`) costs about 120 bytes a row as
polars columns, and a 1M-skill library has over a hundred million rows: held whole (and sorted globally)
it set the build's peak memory. Here each row is 11 bytes — node u32, field u8 (its index in
`config.FIELDS`), token u32 (its index in a vocabulary that grows chunk by chunk, in first-seen order),
tf u16 (u32 only when a count does not fit) — and only one chunk of skills is ever held as strings.

What is stored is unchanged: `rows(start, end)` decodes a node range back to exactly the rows, in exactly
the order, that `lexicon.token_table` gives for it, and `signature` is exactly `Signature.of` the whole
string table. The store writes a version's token parts from these decoded ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import FIELDS
from . import lexicon
from .lexicon import SIGNATURE_FIELDS, TOKEN_SCHEMA, Signature, token_chunks

_FIELD_CODE = {f: i for i, f in enumerate(FIELDS)}
_U16_MAX = np.iinfo(np.uint16).max


def _encode(chunk: pl.DataFrame, vocab: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the chunk in integer columns, the vocabulary with the chunk's unseen tokens appended)."""
    unseen = chunk.select("token").unique(maintain_order=True).join(vocab, on="token", how="anti")
    if unseen.height:
        start = vocab.height
        unseen = unseen.with_columns(id=pl.int_range(start, start + unseen.height, dtype=pl.UInt32))
        vocab = pl.concat([vocab, unseen], how="vertical")
    tf_max = chunk["tf"].max()
    tf_type = pl.UInt16 if tf_max is None or int(tf_max) <= _U16_MAX else pl.UInt32  # type: ignore[arg-type]
    encoded = chunk.join(vocab, on="token", how="left", maintain_order="left").select(
        "node",
        field=pl.col("field").replace_strict(_FIELD_CODE, return_dtype=pl.UInt8),
        token=pl.col("id"),
        tf=pl.col("tf").cast(tf_type),
    )
    return encoded, vocab


@dataclass(frozen=True)
class CompactTokens:
    """The sorted token table of `n_nodes` skills with integer field and token columns."""

    frame: pl.DataFrame  # node u32, field u8, token u32, tf u16|u32; sorted by node, field, token string
    vocab: pl.Series  # token string of each id
    n_nodes: int

    @classmethod
    def of(cls, nodes: pl.DataFrame, done: Callable[[int], None] | None = None) -> CompactTokens:
        """Tokenise `nodes` chunk by chunk; `done(n)` hears how many skills are tokenised so far."""
        vocab = pl.DataFrame(schema={"token": pl.String, "id": pl.UInt32})
        parts = []
        step = lexicon.TOKEN_CHUNK
        for i, chunk in enumerate(token_chunks(nodes, step)):
            encoded, vocab = _encode(chunk, vocab)
            parts.append(encoded)
            if done is not None:
                done(min(nodes.height, (i + 1) * step))
        frame = (
            pl.concat(parts, how="vertical_relaxed", rechunk=True)
            if parts
            else pl.DataFrame(
                schema={"node": pl.UInt32, "field": pl.UInt8, "token": pl.UInt32, "tf": pl.UInt16}
            )
        )
        return cls(frame, vocab["token"], nodes.height)

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
        fields = pl.Series("field", FIELDS, dtype=pl.String)
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
        codes = [_FIELD_CODE[f] for f in SIGNATURE_FIELDS]
        sig = self.frame.filter(pl.col("field").is_in(codes)).select("node", "token").unique()
        ids = sig["token"].unique()
        words = self.vocab.gather(ids)
        order = words.arg_sort()  # column j holds the j-th token string in sorted order
        col_of = np.zeros(len(self.vocab), dtype=np.int64)
        col_of[ids.gather(order).to_numpy()] = np.arange(len(ids))
        rows = sig["node"].to_numpy().astype(np.int64)
        cols = col_of[sig["token"].to_numpy()]
        data = np.ones(len(rows), dtype=np.float32)
        matrix = sp.csr_matrix((data, (rows, cols)), shape=(self.n_nodes, len(ids)))
        return Signature(matrix, words.gather(order).alias("token"))
