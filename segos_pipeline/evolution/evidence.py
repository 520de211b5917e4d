"""What a window of traces witnesses, as polars kernels over a partition of traces (SPEC §8, §11).

The rules exist once, here. A window is cut into partitions by a hash of `task_id`, so every attempt of a
task (and of a (task, agent) pair) lies in one partition. On one partition:

    partition_evidence(traces) = attempt selection → retrieval reconstruction → partial evidence tables

and every partial table is a count keyed by a pair or a skill that is additive across partitions: a trace
lies in one partition (trace counts add up) and so does a task (distinct-task counts add up too).
`sum_partials` sums the partial tables of all partitions and `finish` applies the thresholds that need the
window totals (surfaced-but-unused). The local engine and the Spark engine both call `partition_evidence`
per partition and those two on the results; neither holds a rule of its own.

Input of a partition: a trace table (TRACE_SCHEMA). The selected traces carry a boolean `success` and
`retrieved`/`seeds` filled for every query. Besides the counts, a partition gives what L3 reads of its
traces (`witnesses`, `usage`) and what the round adds to each selected trace (`added`: outcome and
reconstructed retrieval), so that no engine has to keep a window's selected traces to finish a round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields

import polars as pl

from ..config import EvolutionConfig, RetrievalConfig
from .traces import QUERY_STRUCT

PAIR = {"src": pl.String, "dst": pl.String}
COUNT = pl.Int64  # summed counts: a 1B-trace window can pass the UInt32 that polars counts in

# The partial tables' schemas (what an engine ships between processes).
WORKFLOW_SCHEMA = {**PAIR, "count": COUNT, "trials": COUNT}
ORDERED_SCHEMA = {**PAIR, "trials": COUNT}
COUSE_SCHEMA = {**PAIR, "failed": COUNT, "succeeded": COUNT, "success_tasks": COUNT}
SURFACING_SCHEMA = {"skill": pl.String, "surfaced": COUNT, "used": COUNT}
TRACE_COUNTS = (
    "in_window",
    "selected",
    "successful",
    "failed",
    "retrieval_reconstructed",
    "simulated",
    "real",
    "unordered_used",
)
COUNTS_SCHEMA = dict.fromkeys(TRACE_COUNTS, COUNT)
# L3's reading of the traces: a skill used on a successful trace outside that query's top-N (one row per
# witnessing trace), and every (skill, query text) of a trace that used the skill.
WITNESS_SCHEMA = {"skill": pl.String, "text": pl.String, "trace_id": pl.String}
USAGE_SCHEMA = {"skill": pl.String, "text": pl.String}
# Experience (SPEC §8): per (skill, witnessing query text) of the successful traces learned from, the
# distinct (task, agent) pairs (additive: a task lies in one partition); and the successful traces held out
# from learning by trace-id hash, one row per (trace, query text, used skill), that check the round.
EXPERIENCE_PARTIAL_SCHEMA = {"skill": pl.String, "text": pl.String, "tasks": COUNT}
HOLDOUT_SCHEMA = {"trace_id": pl.String, "text": pl.String, "skill": pl.String}
# Held-out shares are taken in thousandths of the hash space.
_HOLDOUT_SCALE = 1000
# What a round adds to a selected trace of its window: the outcome, and the queries only where their
# retrieval was reconstructed (null: the window's own queries hold).
ADDED_SCHEMA: dict[str, pl.DataType] = {
    "trace_id": pl.String,
    "success": pl.Boolean,
    "retrieval_reconstructed": pl.Boolean,
    "queries": pl.List(QUERY_STRUCT),
}


def _wide(df: pl.DataFrame) -> pl.DataFrame:
    """Every count column as COUNT (polars counts in UInt32)."""
    return df.with_columns(pl.col(pl.UInt32).cast(COUNT))


# ------------------------------------------------------------------------- attempt selection, retrieval


def select_attempts(traces: pl.DataFrame, pool: bool) -> pl.DataFrame:
    """The final attempt per (task, agent) (latest attempt, then timestamp, then id), or all if pooled.

    The result is in trace-id order either way, so that a window cut into partitions and put together
    again gives the same table as the whole window.
    """
    if pool:
        return traces.sort("trace_id", maintain_order=True)
    return (
        traces.sort(["attempt", "timestamp", "trace_id"], nulls_last=False)
        .unique(subset=["task_id", "agent"], keep="last", maintain_order=True)
        .sort("trace_id")
    )


# text → (retrieved ids, seed ids) for a batch of query texts; the parent version's retriever behind it.
Reconstruct = Callable[[list[str]], list[tuple[list[str], list[str]]]]


def fill_retrieval(traces: pl.DataFrame, reconstruct: Reconstruct) -> pl.DataFrame:
    """Rebuild `retrieved`/`seeds` of queries that did not record them by replaying the query text against
    the parent version (once per distinct text); flag the traces where this happened."""
    q = traces.select("trace_id", "queries").with_row_index("_t").explode("queries").with_row_index("_q")
    q = q.with_columns(
        text=pl.col("queries").struct.field("text"),
        retrieved=pl.col("queries").struct.field("retrieved"),
        seeds=pl.col("queries").struct.field("seeds"),
    )
    need = q.filter(
        pl.col("text").is_not_null() & (pl.col("retrieved").is_null() | pl.col("seeds").is_null())
    )
    texts = need["text"].unique().sort().to_list()
    answers = reconstruct(texts) if texts else []
    rebuilt = pl.DataFrame(
        {
            "text": texts,
            "r2": [a[0] for a in answers],
            "s2": [a[1] for a in answers],
        },
        schema={"text": pl.String, "r2": pl.List(pl.String), "s2": pl.List(pl.String)},
    )
    q = q.join(rebuilt, on="text", how="left").with_columns(
        reconstructed=(pl.col("retrieved").is_null() | pl.col("seeds").is_null())
        & pl.col("r2").is_not_null(),
        retrieved=pl.coalesce("retrieved", "r2"),
        seeds=pl.coalesce("seeds", "s2"),
    )
    per_trace = (
        q.sort("_q")
        .group_by("_t", maintain_order=True)
        .agg(
            queries=pl.struct("text", "retrieved", "seeds").filter(pl.col("text").is_not_null()),
            retrieval_reconstructed=pl.col("reconstructed").any(),
        )
    )
    return (
        traces.with_row_index("_t")
        .drop("queries")
        .join(per_trace, on="_t", how="left")
        .drop("_t")
        .with_columns(pl.col("retrieval_reconstructed").fill_null(False))
    )


# ------------------------------------------------------------------------------ partial evidence tables


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


def _positions(traces: pl.DataFrame) -> pl.DataFrame:
    return (
        traces.select("trace_id", "task_id", "success", skill=pl.col("used"))
        .with_columns(pos=pl.int_ranges(pl.col("skill").list.len()))
        .explode("skill", "pos")
        .drop_nulls("skill")
    )


def workflow_partial(traces: pl.DataFrame) -> pl.DataFrame:
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
    return pairs.group_by("src", "dst").agg(count=pl.len(), trials=pl.col("trace_id").n_unique()).pipe(_wide)


def ordered_partial(traces: pl.DataFrame) -> pl.DataFrame:
    """(u, v) with u first used before v on a successful trace whose `used` carries order."""
    pos = _positions(traces.filter(pl.col("success") & pl.col("used_ordered")))
    pairs = pos.join(pos, on="trace_id", suffix="_v").filter(pl.col("pos") < pl.col("pos_v"))
    return pairs.group_by(src="skill", dst="skill_v").agg(trials=pl.col("trace_id").n_unique()).pipe(_wide)


def couse_partial(traces: pl.DataFrame) -> pl.DataFrame:
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
            # additive across partitions only because a task never spans two of them
            success_tasks=pl.col("task_id").filter(pl.col("success")).n_unique(),
        )
        .pipe(_wide)
    )


def surfacing_partial(traces: pl.DataFrame) -> pl.DataFrame:
    """Per skill: queries that retrieved it, and traces that used it."""
    surfaced = (
        _query_rows(traces)
        .select(skill=pl.col("retrieved"))
        .explode("skill")
        .drop_nulls()
        .group_by("skill")
        .agg(surfaced=pl.len())
    )
    used = (
        traces.select("trace_id", skill=pl.col("used"))
        .explode("skill")
        .drop_nulls()
        .group_by("skill")
        .agg(used=pl.col("trace_id").n_unique())
    )
    return (
        surfaced.join(used, on="skill", how="full", coalesce=True)
        .with_columns(pl.col("surfaced", "used").fill_null(0))
        .pipe(_wide)
        .select(list(SURFACING_SCHEMA))
    )


def usage_rows(traces: pl.DataFrame) -> pl.DataFrame:
    """(trace, task, agent, success, skill, query text, retrieved) for every query of every trace that used
    the skill: what L3 and experience read of a table of selected traces."""
    return (
        traces.select("trace_id", "task_id", "agent", "success", "used", "queries")
        .explode("queries")
        .drop_nulls("queries")
        .with_columns(
            text=pl.col("queries").struct.field("text"),
            retrieved=pl.col("queries")
            .struct.field("retrieved")
            .fill_null(pl.lit([], dtype=pl.List(pl.String))),
        )
        .drop("queries")
        .explode("used")
        .drop_nulls("used")
        .rename({"used": "skill"})
    )


def l3_partials(
    traces: pl.DataFrame, top_n: int, usage: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """L3's candidates and usage of a table of selected traces: (witnesses, usage); `usage` its
    `usage_rows` when the caller has them.

    A witness is a skill used on a successful trace but absent from that query's top-N as the retriever
    returned it (recorded or reconstructed); usage is every distinct (skill, query text) of a trace that
    used the skill (the other queries gate 2 checks). Both add up across partitions by concatenation.
    """
    usage = usage_rows(traces) if usage is None else usage
    witnesses = (
        usage.filter(pl.col("success") & ~pl.col("retrieved").list.head(top_n).list.contains(pl.col("skill")))
        .select(list(WITNESS_SCHEMA))
        .unique()
    )
    return witnesses, usage.select(list(USAGE_SCHEMA)).unique()


def held_out(share: float) -> pl.Expr:
    """True for the traces held out from learning: a fixed share of the trace-id hash space."""
    return (pl.col("trace_id").hash(seed=7) % _HOLDOUT_SCALE) < round(share * _HOLDOUT_SCALE)


def experience_partials(
    usage: pl.DataFrame, holdout: float, max_chars: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(experience, holdout) from the `usage_rows` of a table of selected traces: the witnessing requests of
    the successful traces learned from, and the successful traces held out (see the schemas). Texts are
    stripped and clipped to `max_chars`, so that one skill's experience is bounded whatever a trace holds."""
    rows = (
        usage.filter(pl.col("success"))
        .with_columns(text=pl.col("text").str.strip_chars().str.slice(0, max_chars))
        .filter(pl.col("text").str.len_chars() > 0)
        .select("trace_id", "task_id", "agent", "text", "skill", held=held_out(holdout))
    )
    experience = (
        rows.filter(~pl.col("held"))
        .group_by("skill", "text")
        .agg(tasks=pl.struct("task_id", "agent").n_unique())
        .pipe(_wide)
        .select(list(EXPERIENCE_PARTIAL_SCHEMA))
    )
    holdout_rows = rows.filter(pl.col("held")).select(list(HOLDOUT_SCHEMA)).unique()
    return experience, holdout_rows


def added_rows(selected: pl.DataFrame) -> pl.DataFrame:
    """What the round adds to each selected trace (ADDED_SCHEMA), in trace-id order."""
    return (
        selected.select(
            "trace_id",
            "success",
            "retrieval_reconstructed",
            queries=pl.when(pl.col("retrieval_reconstructed")).then(pl.col("queries")),
        )
        .cast(ADDED_SCHEMA)
        .sort("trace_id")
    )


def trace_counts(window: pl.DataFrame, selected: pl.DataFrame) -> pl.DataFrame:
    """The round's trace counters for one partition (one row)."""
    return pl.DataFrame(
        {
            "in_window": [window.height],
            "selected": [selected.height],
            "successful": [int(selected["success"].sum())],
            "failed": [int((~selected["success"]).sum())],
            "retrieval_reconstructed": [int(selected["retrieval_reconstructed"].sum())],
            "simulated": [int(selected["simulated"].sum())],
            "real": [int((~selected["simulated"]).sum())],
            "unordered_used": [int((~selected["used_ordered"]).sum())],
        },
        schema=COUNTS_SCHEMA,
    )


@dataclass
class Partial:
    """One partition's share of a round: its selected traces and its partial evidence tables."""

    selected: pl.DataFrame
    workflow: pl.DataFrame
    ordered: pl.DataFrame
    couse: pl.DataFrame
    surfacing: pl.DataFrame
    counts: pl.DataFrame
    witnesses: pl.DataFrame
    usage: pl.DataFrame
    added: pl.DataFrame
    experience: pl.DataFrame
    holdout: pl.DataFrame
    seconds: dict[str, float] = field(default_factory=dict)  # time of each step on this partition

    @classmethod
    def table_names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "seconds"]


def partition_evidence(
    traces: pl.DataFrame,
    reconstruct: Reconstruct,
    pool: bool,
    success_threshold: float,
    top_n: int = RetrievalConfig.top_n,
    holdout: float = EvolutionConfig.experience_holdout,
    experience_chars: int = EvolutionConfig.experience_chars,
) -> Partial:
    """Everything a round computes from one partition of a window (all of a task's traces inside it);
    `top_n` is the retrieval's bundle size, which L3's witnesses are counted against; `holdout` the share
    of traces held out from experience, `experience_chars` what is kept of a witnessing request."""
    t = time.perf_counter()
    selected = select_attempts(traces, pool).with_columns(success=pl.col("reward") >= success_threshold)
    selected = fill_retrieval(selected, reconstruct)
    t_select = time.perf_counter()
    rows = usage_rows(selected)  # read by L3 and by experience
    witnesses, usage = l3_partials(selected, top_n, rows)
    experience, held = experience_partials(rows, holdout, experience_chars)
    partial = Partial(
        selected=selected,
        workflow=workflow_partial(selected),
        ordered=ordered_partial(selected),
        couse=couse_partial(selected),
        surfacing=surfacing_partial(selected),
        counts=trace_counts(traces, selected),
        witnesses=witnesses,
        usage=usage,
        added=added_rows(selected),
        experience=experience,
        holdout=held,
    )
    partial.seconds = {"select_and_reconstruct": t_select - t, "evidence": time.perf_counter() - t_select}
    return partial


# ------------------------------------------------------------------------------------------- combining


@dataclass
class WindowEvidence:
    """A window's evidence, summed over its partitions: what L1, L2 and the round's counters read."""

    workflow: pl.DataFrame
    ordered: pl.DataFrame
    couse: pl.DataFrame
    unused: pl.DataFrame
    counts: dict[str, int]
    witnesses: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=WITNESS_SCHEMA))
    usage: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=USAGE_SCHEMA))
    added: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ADDED_SCHEMA))
    experience: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=EXPERIENCE_PARTIAL_SCHEMA))
    holdout: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HOLDOUT_SCHEMA))


def _sum_by(frames: Iterable[pl.DataFrame], keys: list[str], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    values = [c for c in schema if c not in keys]
    stacked = pl.concat([f.select(list(schema)).cast(schema) for f in frames], how="vertical")
    return stacked.group_by(keys).agg(pl.col(values).sum()).cast(schema).sort(keys)


def _union(frames: Iterable[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    stacked = pl.concat([f.select(list(schema)).cast(schema) for f in frames], how="vertical")
    return stacked.unique().sort(list(schema))


def sum_partials(partials: list[Partial]) -> Partial:
    """The partial tables of several partitions summed into one (selected traces left empty).

    Summing is associative, so an engine may sum in a tree (pairs of partitions, then pairs of sums).
    """
    if not partials:
        raise ValueError("no partial evidence to sum")
    return Partial(
        selected=partials[0].selected.clear(),
        workflow=_sum_by((p.workflow for p in partials), ["src", "dst"], WORKFLOW_SCHEMA),
        ordered=_sum_by((p.ordered for p in partials), ["src", "dst"], ORDERED_SCHEMA),
        couse=_sum_by((p.couse for p in partials), ["src", "dst"], COUSE_SCHEMA),
        surfacing=_sum_by((p.surfacing for p in partials), ["skill"], SURFACING_SCHEMA),
        counts=pl.concat([p.counts for p in partials]).sum().cast(COUNTS_SCHEMA),
        witnesses=_union((p.witnesses for p in partials), WITNESS_SCHEMA),
        usage=_union((p.usage for p in partials), USAGE_SCHEMA),
        # a trace lies in one partition: its rows are concatenated, never merged
        added=pl.concat([p.added.cast(ADDED_SCHEMA) for p in partials], how="vertical").sort("trace_id"),
        experience=_sum_by((p.experience for p in partials), ["skill", "text"], EXPERIENCE_PARTIAL_SCHEMA),
        holdout=_union((p.holdout for p in partials), HOLDOUT_SCHEMA),
    )


def finish(total: Partial, surfaced_min: int) -> WindowEvidence:
    """The window's evidence from the summed partial tables."""
    surfacing = total.surfacing
    unused = (
        surfacing.filter((pl.col("surfaced") >= surfaced_min) & (pl.col("used") == 0))
        .select("skill", n=pl.col("surfaced"))
        .sort("skill")
    )
    return WindowEvidence(
        workflow=total.workflow,
        ordered=total.ordered,
        couse=total.couse,
        unused=unused,
        counts={k: int(v) for k, v in total.counts.row(0, named=True).items()},
        witnesses=total.witnesses,
        usage=total.usage,
        added=total.added,
        experience=total.experience,
        holdout=total.holdout,
    )


def partition_ids(partitions: int) -> pl.Expr:
    """Partition of each trace: a hash of its task id (all of a task's attempts land together)."""
    return (pl.col("task_id").hash(seed=0) % partitions).alias("_part")


def split_by_task(traces: pl.DataFrame, partitions: int) -> list[pl.DataFrame]:
    """The window cut into `partitions` parts by task hash (empty parts dropped; at least one part)."""
    if partitions <= 1 or traces.height == 0:
        return [traces]
    parts = traces.with_columns(partition_ids(partitions)).partition_by(
        "_part", include_key=False, maintain_order=True
    )
    return parts or [traces.clear()]
