"""What a window of traces witnesses, as tables (pure polars group-bys; no loop per trace).

Input: a round's trace table (TRACE_SCHEMA plus a boolean `success` column, with `retrieved`/`seeds`
filled for every query). Each function returns one evidence table that L1 and L2 both read.
"""

from __future__ import annotations

import polars as pl

PAIR = {"src": pl.String, "dst": pl.String}


def _query_rows(traces: pl.DataFrame) -> pl.DataFrame:
    """One row per (trace, query) with the query's seeds and retrieved lists."""
    return (
        traces.select("trace_id", "task_id", "success", "used", "queries")
        .with_columns(pl.col("queries").list.len().alias("_nq"))
        .filter(pl.col("_nq") > 0)
        .explode("queries")
        .with_columns(
            pl.col("queries").struct.field("seeds").alias("seeds"),
            pl.col("queries").struct.field("retrieved").alias("retrieved"),
            pl.col("queries").struct.field("text").alias("text"),
        )
        .drop("queries", "_nq")
    )


def workflow_witness(traces: pl.DataFrame) -> pl.DataFrame:
    """c_wf[u, v]: per successful trace, per query, each seed u and each used v ≠ u (SPEC §8).

    `count` is the number of witnessing queries (a task with several queries can witness a pair several
    times); `trials` the number of distinct traces.
    """
    rows = _query_rows(traces.filter(pl.col("success")))
    pairs = (
        rows.select("trace_id", src=pl.col("seeds"), dst=pl.col("used"))
        .explode("src")
        .explode("dst")
        .drop_nulls(["src", "dst"])
        .filter(pl.col("src") != pl.col("dst"))
    )
    return (
        pairs.group_by("src", "dst")
        .agg(count=pl.len(), trials=pl.col("trace_id").n_unique())
        .sort("src", "dst")
    )


def _positions(traces: pl.DataFrame) -> pl.DataFrame:
    return (
        traces.select("trace_id", "task_id", "success", skill=pl.col("used"))
        .with_columns(pos=pl.int_ranges(pl.col("skill").list.len()))
        .explode("skill", "pos")
        .drop_nulls("skill")
    )


def ordered_pairs(traces: pl.DataFrame) -> pl.DataFrame:
    """(u, v) with u first used before v on a successful trace whose `used` carries order."""
    pos = _positions(traces.filter(pl.col("success") & pl.col("used_ordered")))
    pairs = pos.join(pos, on="trace_id", suffix="_v").filter(pl.col("pos") < pl.col("pos_v"))
    return (
        pairs.group_by(src="skill", dst="skill_v")
        .agg(trials=pl.col("trace_id").n_unique())
        .sort("src", "dst")
    )


def co_use(traces: pl.DataFrame) -> pl.DataFrame:
    """Unordered pairs actually co-used (src < dst): failed traces, successful traces, successful tasks."""
    pos = _positions(traces)
    pairs = pos.join(pos.select("trace_id", skill_v="skill"), on="trace_id").filter(
        pl.col("skill") < pl.col("skill_v")
    )
    return (
        pairs.group_by(src="skill", dst="skill_v")
        .agg(
            failed=pl.col("trace_id").filter(~pl.col("success")).n_unique(),
            succeeded=pl.col("trace_id").filter(pl.col("success")).n_unique(),
            success_tasks=pl.col("task_id").filter(pl.col("success")).n_unique(),
        )
        .sort("src", "dst")
    )


def surfaced_unused(traces: pl.DataFrame, min_surfaced: int) -> pl.DataFrame:
    """Skills retrieved in ≥ min_surfaced queries of the window and never used on any of its traces."""
    rows = _query_rows(traces)
    surfaced = (
        rows.select(skill=pl.col("retrieved")).explode("skill").drop_nulls().group_by("skill").agg(n=pl.len())
    )
    used = traces.select(skill=pl.col("used")).explode("skill").drop_nulls().unique()
    return surfaced.filter(pl.col("n") >= min_surfaced).join(used, on="skill", how="anti").sort("skill")
