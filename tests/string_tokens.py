"""The token table and its signature computed on strings, the oracle of the integer path
(`text/token_rows.py`).

The build tokenises on integers (`EncodedTokens`). This is the same rules computed the plain way: cut with
the polars regex, stem each distinct word, then group the string rows and sort them; the signature is the
distinct (skill, token) pairs of the signature fields. Tests hold the integer path's rows and signature
equal to them on any slicing; nothing in the package uses them.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import scipy.sparse as sp

from segos_pipeline.text.lexicon import SIGNATURE_FIELDS, TOKEN_SCHEMA, Signature, field_texts
from segos_pipeline.text.tokens import tokenize_column, word_tokens


def stem_frame(words: pl.Series) -> pl.DataFrame:
    """Each distinct raw word and its token; words that carry no signal dropped."""
    unique = words.unique().drop_nulls().alias("word")
    return pl.DataFrame([unique, word_tokens(unique)]).drop_nulls("token")


def string_token_table(nodes: pl.DataFrame) -> pl.DataFrame:
    """(node, field, token, tf) of every field of every node, sorted by node, field name, token string."""
    words = (
        field_texts(nodes)
        .select("node", "field", word=tokenize_column(pl.col("text")))
        .explode("word")
        .drop_nulls("word")
    )
    return (
        words.join(stem_frame(words["word"]), on="word", how="inner")
        .group_by("node", "field", "token")
        .agg(tf=pl.len().cast(pl.UInt32))
        .select(pl.col("node").cast(pl.UInt32), "field", "token", "tf")
        .sort("node", "field", "token")
        .select(list(TOKEN_SCHEMA))
        .cast(TOKEN_SCHEMA)  # type: ignore[arg-type]
    )


def string_signature(tokens: pl.DataFrame, n_nodes: int) -> Signature:
    """Binary node × token matrix of the signature fields' tokens, columns in sorted token order."""
    sig = tokens.filter(pl.col("field").is_in(SIGNATURE_FIELDS)).select("node", "token").unique()
    vocab = sig["token"].unique().sort()
    lookup = pl.DataFrame({"token": vocab, "col": np.arange(len(vocab), dtype=np.int64)})
    cols = sig.join(lookup, on="token", how="left", maintain_order="left")["col"].to_numpy()
    rows = sig["node"].to_numpy().astype(np.int64)
    data = np.ones(len(rows), dtype=np.float32)
    return Signature(sp.csr_matrix((data, (rows, cols)), shape=(n_nodes, len(vocab))), vocab.alias("token"))
