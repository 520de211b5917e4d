"""The token rows of one slice of skills in integer columns, with the slice's own sorted vocabulary.

`ChunkTokens.of` tokenises a node frame with no global state, so parse workers can run it on their own
chunk and send back a few integer columns and one small string column (polars pickles as Arrow IPC). The
heavy work is on integers: every word occurrence is hashed (u64), each distinct word is stemmed once
(vectorised, `tokens.word_tokens`), and the rows are counted and ordered by one sort of packed u64 keys
(node, field, token). The token part of the key is the token's rank among the chunk's distinct token
strings, so integer order is exactly `lexicon.token_table`'s order (node, field name, token string) and
no string is ever sorted row by row.

Word hashes are only a shortcut: each occurrence is compared with the word its hash was resolved to, and a
collision (two distinct words, one hash) falls back to keying on the strings themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..config import FIELDS
from .lexicon import field_texts
from .tokens import tokenize_column, word_tokens

FIELD_CODE = {f: i for i, f in enumerate(FIELDS)}  # the stored field column: the index in config.FIELDS
# The token table sorts by field *name*: the sort key carries the name's rank, decoded back to the code.
_FIELD_RANK = {f: i for i, f in enumerate(sorted(FIELDS))}
_CODE_OF_RANK = np.array([FIELD_CODE[f] for f in sorted(FIELDS)], dtype=np.uint8)
_FIELD_BITS = max(1, (len(FIELDS) - 1).bit_length())
_U16_MAX = np.iinfo(np.uint16).max
_DROPPED = np.iinfo(np.uint32).max  # the token rank of a word that carries no signal (a stopword, a number)

FRAME_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.UInt32,
    "field": pl.UInt8,
    "token": pl.UInt32,
    "tf": pl.UInt16,  # UInt32 when a count does not fit
}


def _word_rows(nodes: pl.DataFrame) -> pl.DataFrame:
    """One row per word occurrence: node (local), field rank, raw word — as `lexicon._chunk_tokens`."""
    return (
        field_texts(nodes)
        .select(
            "node",
            field=pl.col("field").replace_strict(_FIELD_RANK, return_dtype=pl.UInt8),
            word=tokenize_column(pl.col("text")),
        )
        .explode("word")
        .drop_nulls("word")
    )


def word_codes(words: pl.Series, key: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """(the distinct words, the index of each occurrence in them), found by joining on `key` (a hash of
    each word). Exact whatever the key: if two distinct words share a key, it joins on the words."""
    rows = pl.DataFrame({"key": key, "word": words})
    distinct = rows.unique(subset="key").with_row_index("code")
    codes = rows.join(distinct.select("key", "code"), on="key", how="left", maintain_order="left")["code"]
    if bool((distinct["word"].gather(codes) == words).all()):
        return distinct["word"], codes.to_numpy()
    distinct = rows.select("word").unique().with_row_index("code")
    codes = rows.join(distinct, on="word", how="left", maintain_order="left")["code"]
    return distinct["word"], codes.to_numpy()


def _vocabulary(words: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """(the sorted distinct tokens of `words`, each word's index in them or _DROPPED)."""
    tokens = word_tokens(words)
    rank = tokens.rank("dense")  # 1-based rank in the sorted distinct tokens; null for a dropped word
    lut = (rank - 1).fill_null(_DROPPED).cast(pl.UInt32).to_numpy()
    return tokens.drop_nulls().unique().sort(), lut


def _counted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys in ascending order, how often each occurs)."""
    keys = np.sort(keys)
    if not len(keys):
        return keys, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts], np.diff(np.append(starts, len(keys)))


@dataclass(frozen=True)
class ChunkTokens:
    """The token rows of `n_nodes` skills: node local to the chunk, field code, token = index into the
    chunk's own `vocab` (sorted), tf; rows sorted by node, field name, token string."""

    frame: pl.DataFrame  # FRAME_SCHEMA
    vocab: pl.Series  # the chunk's distinct tokens, sorted
    n_nodes: int

    @classmethod
    def of(cls, nodes: pl.DataFrame) -> ChunkTokens:
        """Tokenise a node frame on its own (node i is `nodes` row i)."""
        words = _word_rows(nodes)
        distinct, codes = word_codes(words["word"], words["word"].hash())
        vocab, lut = _vocabulary(distinct)
        token = lut[codes]
        kept = token != _DROPPED
        token_bits = max(1, len(vocab).bit_length())
        node_bits = max(1, nodes.height.bit_length())
        if node_bits + _FIELD_BITS + token_bits > 64:
            raise ValueError(
                f"a chunk of {nodes.height} skills with {len(vocab)} distinct tokens does not fit a "
                "64-bit sort key: tokenise it in smaller chunks"
            )
        keys = (
            (words["node"].to_numpy()[kept].astype(np.uint64) << np.uint64(_FIELD_BITS + token_bits))
            | (words["field"].to_numpy()[kept].astype(np.uint64) << np.uint64(token_bits))
            | token[kept].astype(np.uint64)
        )
        keys, tf = _counted(keys)
        tf_type = pl.UInt16 if not len(tf) or int(tf.max()) <= _U16_MAX else pl.UInt32
        frame = pl.DataFrame(
            {
                "node": (keys >> np.uint64(_FIELD_BITS + token_bits)).astype(np.uint32),
                "field": _CODE_OF_RANK[(keys >> np.uint64(token_bits)) & np.uint64((1 << _FIELD_BITS) - 1)],
                "token": (keys & np.uint64((1 << token_bits) - 1)).astype(np.uint32),
                "tf": tf,
            },
            schema={**FRAME_SCHEMA, "tf": tf_type},
        )
        return cls(frame, vocab.alias("token"), nodes.height)

    @property
    def height(self) -> int:
        return self.frame.height
