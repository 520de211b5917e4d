"""Per-field token table of a node table, and the sparse matrices built from it.

The token table (node, field, token, tf) is computed once per version (`token_rows`: the build's integer
path, decoded) and stored in the snapshot; the lexical index and the signature sets of the Jaccard graph
are both derived from it, so the library is tokenised exactly once and never per query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
import scipy.sparse as sp

from ..config import FIELDS

TOKEN_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.UInt32,  # row index in the node table (sorted by id)
    "field": pl.String,
    "token": pl.String,
    "tf": pl.UInt32,
}

# The one field coding of the integer token table (`token_rows`, and the parse workers' `chunk_tokens`):
# the code of a field is its rank in alphabetical order, the table's own sort order, so rows sorted by code
# are sorted by name. CODED_FIELDS is the inverse. A field outside config.FIELDS gets the last code, "":
# never scored (no weight can name it), but its tokens count in df as every field's do.
CODED_FIELDS = (*sorted(FIELDS), "")
FIELD_CODE = {f: i for i, f in enumerate(CODED_FIELDS[:-1])}
OTHER_FIELD = len(CODED_FIELDS) - 1

# Fields whose tokens form a skill's signature for the semantic graph: the structured record, not the
# free-text body (SPEC §3/§4, as GoS). The body is only used for lexical seeding.
SIGNATURE_FIELDS = tuple(f for f in FIELDS if f != "body")


def _joined(col: str, sep: str = " ; ") -> pl.Expr:
    return pl.col(col).list.join(sep)


def field_texts(nodes: pl.DataFrame) -> pl.DataFrame:
    """One row per (node, field) with the text that field contributes."""
    name_text = (
        pl.when(
            pl.col("folder").str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]", "")
            == pl.col("name").str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]", "")
        )
        .then(pl.col("name"))
        .otherwise(pl.concat_str([pl.col("name"), pl.col("folder")], separator=" "))
    )
    wide = nodes.select(
        node=pl.int_range(pl.len(), dtype=pl.UInt32),
        name=name_text,
        domain=_joined("domain_tags"),
        tooling=_joined("tooling"),
        capability=pl.col("capability").fill_null(""),
        description=pl.col("description").fill_null(""),
        examples=_joined("example_tasks"),
        io=pl.concat_str([_joined("inputs"), _joined("outputs")], separator=" ; "),
        entrypoints=_joined("entrypoints"),
        body=pl.col("body").fill_null(""),
    )
    return wide.unpivot(index="node", on=list(FIELDS), variable_name="field", value_name="text")


# Nodes tokenised at once: the exploded word table of a chunk is the peak of a build's memory, so chunks
# keep it bounded (about 20k skills ≈ a few million words) whatever the library size.
TOKEN_CHUNK = 20_000


# Values turned into Python objects per step when a dict is built from a column. Versions load on a
# background thread while requests are answered (api.SegosService): one `to_list()` of a 100k-entry
# column holds the GIL for the whole conversion, and every request waiting meanwhile stalls as long.
_STEP = 8192


def position_index(values: pl.Series) -> dict[Any, int]:
    """Each value → its position in `values` (the last one, if repeated), built a step at a time so that
    other threads get the GIL between steps."""
    out: dict[Any, int] = {}
    for start in range(0, values.len(), _STEP):
        chunk = values.slice(start, _STEP).to_list()
        out.update(zip(chunk, range(start, start + len(chunk)), strict=True))
    return out


@dataclass(frozen=True)
class Signature:
    """The binary skill × token signature matrix and its vocabulary (column j is token `vocab[j]`).

    Stored with each version; an incremental update appends new tokens to the vocabulary, so it may hold
    tokens no skill has any more (an empty column), which changes no Jaccard score.
    """

    matrix: sp.csr_matrix
    vocab: pl.Series
