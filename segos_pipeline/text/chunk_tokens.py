"""The token rows of one slice of skills in integer columns, with the slice's own sorted vocabulary.

`chunk_rows` tokenises a node frame with no global state, so parse workers can run it on their own chunk
(`token_rows.EncodedTokens.of_nodes`) and send back a few integer columns and one small string column. The
heavy work is on integers and bytes: the words are cut by the polars regex (`tokens.tokenize_column`),
every occurrence is hashed (u64) and resolved to the chunk's distinct words by one
sort, each distinct word is stemmed once (vectorised, `tokens.word_tokens`), and the rows are counted and
ordered by one sort of packed u64 keys (node, token, field). The token part of the key is the token's
rank among the chunk's distinct token strings and the field's its name's rank, so integer order is the
order of `token_rows.TokenRows` (node, token string, field name) and no string is ever sorted row by row.

Word hashes are only a shortcut: each occurrence is compared with the word its hash was resolved to, and a
collision (two distinct words, one hash prefix) falls back to keying on the strings themselves.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..config import FIELDS
from .lexicon import CODED_FIELDS, field_texts
from .tokens import tokenize_column, word_tokens

# A field's code (`lexicon.FIELD_CODE`) is its name's rank: the physical code of this Enum, so the sort key
# carries the code itself.
_FIELD_CODES = pl.Enum(CODED_FIELDS[:-1])
_FIELD_BITS = max(1, (len(FIELDS) - 1).bit_length())
_FIELD_MASK = np.uint64((1 << _FIELD_BITS) - 1)
_U16_MAX = np.iinfo(np.uint16).max
_DROPPED = np.iinfo(np.uint32).max  # the token rank of a word that carries no signal (a stopword, a number)


def _word_rows(nodes: pl.DataFrame) -> tuple[np.ndarray, pl.Series]:
    """(the slot of each word occurrence, the raw word): a slot is node (local) << _FIELD_BITS | field
    code; not in text order (the counting sort makes order moot)."""
    texts = field_texts(nodes)
    field = texts["field"].cast(_FIELD_CODES).to_physical().to_numpy()
    slot = (texts["node"].to_numpy().astype(np.uint64) << np.uint64(_FIELD_BITS)) | field
    words = (
        texts.select(slot=pl.Series(slot), word=tokenize_column(pl.col("text")))
        .explode("word")
        .drop_nulls("word")
    )
    return words["slot"].to_numpy(), words["word"]


def word_codes(words: pl.Series, key: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """(the distinct words, the index of each occurrence in them), found by sorting on `key` (a hash of
    each word). Exact whatever the key: if two distinct words share a key, it joins on the words."""
    distinct, codes = _codes_by_key(words, key.to_numpy().astype(np.uint64, copy=False))
    if len(words) == 0 or bool((distinct.gather(codes) == words).all()):
        return distinct, codes
    rows = pl.DataFrame({"word": words})
    by_word = rows.unique().with_row_index("code")
    codes = rows.join(by_word, on="word", how="left", maintain_order="left")["code"]
    return by_word["word"], codes.to_numpy()


def _codes_by_key(words: pl.Series, key: np.ndarray) -> tuple[pl.Series, np.ndarray]:
    """`word_codes` taking words with equal key prefixes for one word (checked by the caller). Each key's
    high bits and the occurrence's position share one u64, so a plain sort of values orders the
    occurrences by key (an argsort of the keys was several times slower)."""
    position_bits = max(1, len(key).bit_length())
    if position_bits > 32:
        raise ValueError(f"{len(key)} word occurrences in one chunk: tokenise it in smaller chunks")
    low = np.uint64((1 << position_bits) - 1)
    packed = np.sort((key & ~low) | np.arange(len(key), dtype=np.uint64))
    order = (packed & low).astype(np.int64)
    first = np.empty(len(packed), dtype=bool)
    first[:1] = True
    np.not_equal(packed[1:] & ~low, packed[:-1] & ~low, out=first[1:])
    codes = np.empty(len(packed), dtype=np.int64)
    codes[order] = np.cumsum(first) - 1
    return words.gather(order[first]), codes


def _vocabulary(words: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """(the sorted distinct tokens of `words`, each word's index in them or _DROPPED)."""
    tokens = word_tokens(words)
    rank = tokens.rank("dense")  # 1-based rank in the sorted distinct tokens; null for a dropped word
    lut = (rank - 1).fill_null(_DROPPED).cast(pl.UInt32).to_numpy()
    kept = np.flatnonzero(lut != _DROPPED)
    first = np.empty(int(rank.max() or 0), dtype=np.int64)  # dense ranks: every rank up to the largest occurs
    first[lut[kept]] = kept  # a word of each token, placed by its rank: the tokens in sorted order
    return tokens.gather(first), lut


def _counted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct keys in ascending order, how often each occurs)."""
    keys = np.sort(keys)
    if not len(keys):
        return keys, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts], np.diff(np.append(starts, len(keys)))


def chunk_rows(nodes: pl.DataFrame) -> tuple[dict[str, np.ndarray], pl.Series]:
    """(the columns node, col, field, tf of a node frame's token rows, sorted by node, col, field; the
    chunk's distinct tokens, sorted, which `col` indexes): node i is `nodes` row i."""
    slots, words = _word_rows(nodes)
    distinct, codes = word_codes(words, words.hash())
    vocab, lut = _vocabulary(distinct)
    token = lut[codes]
    token_bits = max(1, len(vocab).bit_length())
    node_bits = max(1, nodes.height.bit_length())
    if node_bits + _FIELD_BITS + token_bits > 64:
        raise ValueError(
            f"a chunk of {nodes.height} skills with {len(vocab)} distinct tokens does not fit a "
            "64-bit sort key: tokenise it in smaller chunks"
        )
    kept = token != _DROPPED
    slots, token = slots[kept], token[kept].astype(np.uint64)
    field = slots & _FIELD_MASK
    node_token = ((slots >> np.uint64(_FIELD_BITS)) << np.uint64(token_bits)) | token
    keys, tf = _counted((node_token << np.uint64(_FIELD_BITS)) | field)
    tf_type = np.uint16 if not len(tf) or int(tf.max()) <= _U16_MAX else np.uint32
    columns = {
        "node": (keys >> np.uint64(_FIELD_BITS + token_bits)).astype(np.int32),
        "col": ((keys >> np.uint64(_FIELD_BITS)) & np.uint64((1 << token_bits) - 1)).astype(np.int32),
        "field": (keys & _FIELD_MASK).astype(np.uint8),
        "tf": tf.astype(tf_type),
    }
    return columns, vocab.alias("token")
