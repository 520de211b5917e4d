"""The typed edge table (SPEC §9) and its invariants.

One row per (src, dst, relation); several relations may join one pair. `avoid` is unordered and stored
once with the smaller id as src, weight 0, and is never traversed.
"""

from __future__ import annotations

import polars as pl

from ..config import AVOID, RELATIONS, TRAVERSABLE

EDGE_SCHEMA: dict[str, pl.DataType] = {
    "src": pl.String,
    "dst": pl.String,
    "relation": pl.String,
    "weight": pl.Float64,  # current weight; carries the relation's strength (no separate multiplier)
    "w0": pl.Float64,  # static prior (the weight when the edge was created)
    "n_e": pl.Int64,  # number of informing trials (evidence count)
    "round_created": pl.Int64,
    "round_updated": pl.Int64,
    # Raw accumulated weight before optional confidence blending (equals `weight` when blending is off).
    "w_raw": pl.Float64,
}


def new_edges(
    pairs: pl.DataFrame, relation: str, weight: pl.Expr, w0: pl.Expr, n_e: pl.Expr, round_: int
) -> pl.DataFrame:
    """Rows of `relation` for the (src, dst) pairs, made in round `round_`: `weight` (its raw weight too),
    static prior `w0` and evidence count `n_e`."""
    return pairs.select(
        "src",
        "dst",
        relation=pl.lit(relation),
        weight=weight,
        w0=w0,
        n_e=n_e,
        round_created=pl.lit(round_, dtype=pl.Int64),
        round_updated=pl.lit(round_, dtype=pl.Int64),
        w_raw=weight,
    ).cast(EDGE_SCHEMA)


def counts_by_relation(edges: pl.DataFrame) -> dict[str, int]:
    counts = dict(edges.group_by("relation").len().iter_rows())
    return {r: int(counts.get(r, 0)) for r in RELATIONS}


def violations(edges: pl.DataFrame, node_ids: pl.Series) -> dict[str, int]:
    """Counts of rows that break an edge-table invariant; all zero for a valid table."""
    known = pl.DataFrame({"id": node_ids})
    navigation = (
        edges.filter(pl.col("relation").is_in(TRAVERSABLE))
        .select(lo=pl.min_horizontal("src", "dst"), hi=pl.max_horizontal("src", "dst"))
        .unique()
    )
    avoid = edges.filter(pl.col("relation") == AVOID)
    return {
        "self_loops": edges.filter(pl.col("src") == pl.col("dst")).height,
        "negative_weights": edges.filter(pl.col("weight") < 0).height,
        "unknown_relation": edges.filter(~pl.col("relation").is_in(RELATIONS)).height,
        "unknown_endpoint": edges.join(known, left_on="src", right_on="id", how="anti").height
        + edges.join(known, left_on="dst", right_on="id", how="anti").height,
        "duplicate_edges": edges.height - edges.select("src", "dst", "relation").unique().height,
        "avoid_nonzero_weight": avoid.filter(pl.col("weight") != 0).height,
        "avoid_not_canonical": avoid.filter(pl.col("src") > pl.col("dst")).height,
        "avoid_on_navigation_pair": avoid.join(
            navigation, left_on=["src", "dst"], right_on=["lo", "hi"]
        ).height,
    }
