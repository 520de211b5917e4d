"""A version's node and token tables as parts: how a whole table is cut, and which parts a child links
unchanged from its parent (see `layout.py`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from .version_files import SamePart, VersionFiles

# Skills per part: small enough that rewriting one part is cheap next to everything else an incremental
# update does, large enough that a 100k library stays at a few dozen files.
PART_ROWS = 4096


def part_files(i: int) -> tuple[str, str]:
    return f"nodes-{i:05d}.parquet", f"tokens-{i:05d}.parquet"


@dataclass(frozen=True)
class NewPart:
    """Rows to write as one part: node rows and their token rows (`node` local to the part)."""

    nodes: pl.DataFrame
    tokens: pl.DataFrame


PartPlan = Sequence[NewPart | SamePart]


def split_rows(n: int, part_rows: int | None = None) -> list[tuple[int, int]]:
    """Even [start, end) row ranges of at most `part_rows` (default `PART_ROWS`; one empty range for an
    empty table)."""
    k = max(1, math.ceil(n / (part_rows or PART_ROWS)))
    bounds = np.linspace(0, n, k + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def local_tokens(tokens: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    """Token rows of nodes [start, end) of a node-sorted token table, `node` made local to the range."""
    node = tokens["node"]
    a = int(node.search_sorted(start, side="left"))
    b = int(node.search_sorted(end, side="left"))
    return tokens[a:b].with_columns((pl.col("node") - start).cast(pl.UInt32))


def plan_parts(
    nodes: pl.DataFrame,
    tokens: pl.DataFrame,
    base: VersionFiles | None = None,
    base_tables: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> list[NewPart | SamePart]:
    """Parts of a whole node/token table; a part equal to the same range of `base` is linked from it.

    `base_tables` is the base's loaded (nodes, tokens) when the caller has them: the same objects mean
    nothing changed and every part is linked without comparing rows.
    """
    same_tables = base_tables is not None and base_tables[0] is nodes and base_tables[1] is tokens
    if not tokens["node"].is_sorted():  # parts are row ranges: each skill's token rows must be contiguous
        tokens = tokens.sort("node", maintain_order=True)
    if base is not None and "parts" in base.manifest and base.node_rows == nodes.height:
        ranges, offset = [], 0
        for rec in base.parts:
            ranges.append((offset, offset + rec["rows"]))
            offset += rec["rows"]
    else:
        base, ranges = None, split_rows(nodes.height)
    out: list[NewPart | SamePart] = []
    for i, (a, b) in enumerate(ranges):
        part = NewPart(nodes[a:b], local_tokens(tokens, a, b))
        if base is not None:
            linked = base.same_part(i)
            if same_tables:
                out.append(linked)
                continue
            old_nodes, old_tokens = (
                (base_tables[0][a:b], local_tokens(base_tables[1], a, b))
                if base_tables is not None
                else base.read_part(i)
            )
            if part.nodes.equals(old_nodes) and part.tokens.equals(old_tokens):
                out.append(linked)
                continue
        out.append(part)
    return out
