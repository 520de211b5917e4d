"""The token table computed on strings, the oracle of the integer path (`text/compact_tokens.py`).

The build tokenises on integers (`ChunkTokens`, `CompactTokens`). This is the same rules computed the plain
way: cut with the polars regex, stem each distinct word, then group the string rows and sort them. Tests
hold the integer path's rows and signature equal to it on any slicing; nothing in the package uses it.
"""

from __future__ import annotations

import polars as pl

from segos_pipeline.text.lexicon import TOKEN_SCHEMA, field_texts
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
