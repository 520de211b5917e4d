"""Skill references of a trace batch resolved to a version's ids, each distinct reference once per run."""

from __future__ import annotations

import polars as pl

from ..text.names import SkillNames
from .traces import TRACE_SCHEMA


class NameLookup:
    """Skill reference → id of the version (None when unknown), each distinct reference resolved once."""

    def __init__(self, names: SkillNames):
        self.names = names
        self.known: dict[str, str | None] = {}

    def table(self, refs: pl.Series) -> tuple[list[str], list[str | None]]:
        keys = refs.unique().drop_nulls().to_list()
        for ref in keys:
            if ref not in self.known:
                row = self.names.resolve_one(ref)
                self.known[ref] = None if row is None else self.names.ids[row]
        return keys, [self.known[k] for k in keys]


def _all_refs(frame: pl.DataFrame) -> pl.DataFrame:
    """(row, ref) for every skill reference of every trace: used, and each query's retrieved and seeds."""
    queries = frame.select("_row", q=pl.col("queries")).explode("q").filter(pl.col("q").is_not_null())
    parts = [frame.select("_row", ref=pl.col("used")).explode("ref")]
    for key in ("retrieved", "seeds"):
        parts.append(queries.select("_row", ref=pl.col("q").struct.field(key)).explode("ref"))
    return pl.concat(parts).drop_nulls()


def resolve_frame(frame: pl.DataFrame, lookup: NameLookup) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Names → ids of the version in `used`, `queries.retrieved` and `queries.seeds` (order kept, repeats and
    unknown names dropped); unknown names go to `unknown_skills` (sorted). Also returns (ref, traces) for
    the unknown names, for the report."""
    frame = frame.with_row_index("_row")
    refs = _all_refs(frame)
    keys, ids = lookup.table(refs["ref"])

    def mapped(expr: pl.Expr) -> pl.Expr:
        hit = pl.element().replace_strict(keys, ids, default=None, return_dtype=pl.String)
        return expr.list.eval(hit.drop_nulls().unique(maintain_order=True))

    unknown_keys = pl.DataFrame(
        {"ref": [k for k, v in zip(keys, ids, strict=True) if v is None]}, schema={"ref": pl.String}
    )
    unknown = refs.join(unknown_keys, on="ref", how="semi").unique()
    per_row = unknown.group_by("_row").agg(unknown_skills=pl.col("ref").sort())
    q = pl.element()
    frame = (
        frame.with_columns(
            used=mapped(pl.col("used")),
            queries=pl.col("queries").list.eval(
                pl.struct(
                    text=q.struct.field("text"),
                    retrieved=mapped(q.struct.field("retrieved")),
                    seeds=mapped(q.struct.field("seeds")),
                )
            ),
        )
        .drop("unknown_skills")
        .join(per_row, on="_row", how="left")
        .with_columns(pl.col("unknown_skills").fill_null(pl.lit([], dtype=pl.List(pl.String))))
        .sort("_row")
        .select(list(TRACE_SCHEMA))
    )
    counts = unknown.group_by("ref").len()
    return frame, counts
