"""One evolution round: version N + a window of traces → version N+1 (SPEC §8, §9).

Fixed order: attempt selection → retrieval reconstruction → L1 topology → L2 weights → L3 descriptions
→ commit. The node set never changes. The new manifest records parent, window, configs and every rule's
counters; the round's trace table and every description revision are stored with the version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from .build import commit_derived
from .config import EvolutionConfig, RetrievalConfig, TransitionConfig
from .descriptions import REVISION_SCHEMA, Editor, description_update
from .evidence import co_use, ordered_pairs, surfaced_unused, workflow_witness
from .ingest import TraceStore
from .retrieval import Retriever
from .snapshot import Snapshot, SnapshotStore
from .topology import topology_update
from .transition import transition_matrix
from .weights import weight_update

ROUND_TRACES = "traces.parquet"
REVISIONS = "revisions.parquet"
Progress = Callable[[str], None]


@dataclass
class RoundResult:
    nodes: pl.DataFrame
    tokens: pl.DataFrame
    edges: pl.DataFrame
    traces: pl.DataFrame  # the round's traces after selection, with success and reconstruction flags
    revisions: pl.DataFrame
    counters: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def select_attempts(traces: pl.DataFrame, pool: bool) -> pl.DataFrame:
    """The final attempt per (task, agent) (latest attempt, then timestamp, then id), or all if pooled."""
    if pool:
        return traces
    return (
        traces.sort(["attempt", "timestamp", "trace_id"], nulls_last=False)
        .unique(subset=["task_id", "agent"], keep="last", maintain_order=True)
        .sort("trace_id")
    )


def fill_retrieval(traces: pl.DataFrame, retriever: Retriever) -> pl.DataFrame:
    """Rebuild `retrieved`/`seeds` of queries that did not record them by replaying the query text against
    the parent version (once per distinct text); flag the traces where this happened."""
    top_n = retriever.config.top_n
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
    rebuilt_rows = []
    for text in texts:
        ranking = retriever.rank(text)
        chosen, _ = retriever.select(ranking, top_n)
        rebuilt_rows.append(
            (text, [str(retriever.ids[i]) for i in chosen], [str(retriever.ids[i]) for i in ranking.seeds])
        )
    rebuilt = pl.DataFrame(
        rebuilt_rows,
        schema={"text": pl.String, "r2": pl.List(pl.String), "s2": pl.List(pl.String)},
        orient="row",
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


def draft_snapshot(
    parent: Snapshot, nodes: pl.DataFrame, tokens: pl.DataFrame, edges: pl.DataFrame
) -> Snapshot:
    """An in-memory version (not committed) for replaying queries inside a round."""
    tconf = TransitionConfig(**parent.manifest.get("config", {}).get("transition", {}))
    return Snapshot(
        version=f"{parent.version}+draft",
        path=None,
        manifest={"config": parent.manifest.get("config", {})},
        nodes=nodes,
        tokens=tokens,
        edges=edges,
        transition=transition_matrix(edges, nodes["id"], tconf),
    )


def evolve_round(
    parent: Snapshot,
    traces: pl.DataFrame,
    config: EvolutionConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    editor: Editor | None = None,
    progress: Progress | None = None,
) -> RoundResult:
    """The pure core of a round (no store access): tables of the next version and the counters."""
    config = config or EvolutionConfig()
    retrieval = retrieval or RetrievalConfig()
    say = progress or (lambda _msg: None)
    round_ = parent.round + 1
    timings: dict[str, float] = {}
    t = time.perf_counter()

    selected = select_attempts(traces, config.pool_attempts).with_columns(
        success=pl.col("reward") >= config.success_threshold
    )
    retriever = Retriever(parent, retrieval)
    selected = fill_retrieval(selected, retriever)
    timings["select_and_reconstruct"] = time.perf_counter() - t
    n_rec = int(selected["retrieval_reconstructed"].sum())
    say(
        f"round {round_}: {selected.height} of {traces.height} traces kept, "
        f"{n_rec} with reconstructed retrieval"
    )

    t = time.perf_counter()
    wf, ordered, couse = workflow_witness(selected), ordered_pairs(selected), co_use(selected)
    unused = surfaced_unused(selected, config.surfaced_min)
    timings["evidence"] = time.perf_counter() - t

    counters: dict[str, Any] = {
        "traces": {
            "in_window": traces.height,
            "selected": selected.height,
            "successful": int(selected["success"].sum()),
            "failed": int((~selected["success"]).sum()),
            "retrieval_reconstructed": n_rec,
            "simulated": int(selected["simulated"].sum()),
            "real": int((~selected["simulated"]).sum()),
            "unordered_used": int((~selected["used_ordered"]).sum()),
        }
    }
    edges = parent.edges
    t = time.perf_counter()
    if config.l1_topology:
        l1 = topology_update(edges, parent.nodes, wf, ordered, couse, config, round_)
        edges = l1.edges
        counters["l1"] = l1.counters
        say(
            "L1: " + ", ".join(f"{rule} +{c['induced']}" for rule, c in l1.counters.items() if "induced" in c)
        )
    timings["l1"] = time.perf_counter() - t
    t = time.perf_counter()
    if config.l2_weights:
        l2 = weight_update(edges, wf, ordered, couse, unused, config, round_)
        edges = l2.edges
        counters["l2"] = l2.counters
        say(
            f"L2: {l2.counters['edges_reinforced']} reinforced, "
            f"{l2.counters['semantic_edges_attenuated']} semantic in-edges attenuated"
        )
    timings["l2"] = time.perf_counter() - t

    nodes, tokens = parent.nodes, parent.tokens
    revisions = pl.DataFrame(schema=REVISION_SCHEMA)
    t = time.perf_counter()
    if config.l3_descriptions:
        draft = Retriever(draft_snapshot(parent, nodes, tokens, edges), retrieval)

        def rebuild(new_nodes: pl.DataFrame, new_tokens: pl.DataFrame) -> Retriever:
            return Retriever(draft_snapshot(parent, new_nodes, new_tokens, edges), retrieval)

        l3 = description_update(draft, selected, config, retrieval.top_n, editor, rebuild)
        nodes, tokens, revisions = l3.nodes, l3.tokens, l3.revisions
        counters["l3"] = l3.counters
        say(f"L3: {l3.counters['committed']} description(s) committed of {l3.counters['examined']} examined")
    timings["l3"] = time.perf_counter() - t
    return RoundResult(nodes, tokens, edges, selected, revisions, counters, timings)


def evolve(
    store: SnapshotStore | str,
    window: str,
    from_version: str | None = None,
    config: EvolutionConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    editor: Editor | None = None,
    progress: Progress | None = None,
    traces: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Make version N+1 from version N (`from_version`, default latest) and the window's traces."""
    store = store if isinstance(store, SnapshotStore) else SnapshotStore(store)
    config = config or EvolutionConfig()
    retrieval = retrieval or RetrievalConfig()
    parent = store.load(from_version)
    window_traces = TraceStore(store).load(window) if traces is None else traces
    t0 = time.perf_counter()
    result = evolve_round(parent, window_traces, config, retrieval, editor, progress)
    parent_config = parent.manifest.get("config", {})
    manifest = commit_derived(
        store,
        parent,
        result.edges,
        kind="evolved",
        nodes=result.nodes,
        tokens=result.tokens,
        extra={
            "round": parent.round + 1,
            "window": window,
            "config": {**parent_config, "evolution": asdict(config), "retrieval": asdict(retrieval)},
            "counters": result.counters,
            "timings_s": {
                **{k: round(v, 4) for k, v in result.timings.items()},
                "total": round(time.perf_counter() - t0, 4),
            },
        },
        extra_tables={ROUND_TRACES: result.traces, REVISIONS: result.revisions},
    )
    return manifest
