"""One evolution round: version N + a window of traces → version N+1 (SPEC §8, §9).

Fixed order: attempt selection → retrieval reconstruction → L1 topology → L2 weights → L3 descriptions
→ commit. The node set never changes. The new manifest records parent, window, configs and every rule's
counters; the round's trace table and every description revision are stored with the version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import polars as pl

from ..config import EvolutionConfig, RetrievalConfig, TransitionConfig, retrieval_for
from ..graph.build import commit_derived
from ..graph.transition import transition_matrix
from ..retrieval.ranker import Retriever
from ..store.snapshot import REVISIONS, ROUND_TRACES, Snapshot, SnapshotStore
from .descriptions import REVISION_SCHEMA, Editor, description_update
from .evidence import co_use, ordered_pairs, surfaced_unused, workflow_witness
from .ingest import TraceStore
from .topology import topology_update
from .weights import weight_update

Progress = Callable[[str], None]


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


@dataclass
class RoundState:
    """What flows between the stages of one round; after L3 it holds the tables of the next version."""

    parent: Snapshot
    round: int
    selected: pl.DataFrame  # the round's traces after attempt selection and retrieval reconstruction
    workflow: pl.DataFrame
    ordered: pl.DataFrame
    couse: pl.DataFrame
    unused: pl.DataFrame
    edges: pl.DataFrame
    nodes: pl.DataFrame
    tokens: pl.DataFrame
    revisions: pl.DataFrame
    counters: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def prepare_round(
    parent: Snapshot, traces: pl.DataFrame, config: EvolutionConfig, retrieval: RetrievalConfig
) -> RoundState:
    """Attempt selection, retrieval reconstruction against the parent, and the window's evidence."""
    t = time.perf_counter()
    selected = select_attempts(traces, config.pool_attempts).with_columns(
        success=pl.col("reward") >= config.success_threshold
    )
    selected = fill_retrieval(selected, Retriever(parent, retrieval))
    timings = {"select_and_reconstruct": time.perf_counter() - t}
    t = time.perf_counter()
    state = RoundState(
        parent=parent,
        round=parent.round + 1,
        selected=selected,
        workflow=workflow_witness(selected),
        ordered=ordered_pairs(selected),
        couse=co_use(selected),
        unused=surfaced_unused(selected, config.surfaced_min),
        edges=parent.edges,
        nodes=parent.nodes,
        tokens=parent.tokens,
        revisions=pl.DataFrame(schema=REVISION_SCHEMA),
        timings=timings,
    )
    state.timings["evidence"] = time.perf_counter() - t
    state.counters["traces"] = {
        "in_window": traces.height,
        "selected": selected.height,
        "successful": int(selected["success"].sum()),
        "failed": int((~selected["success"]).sum()),
        "retrieval_reconstructed": int(selected["retrieval_reconstructed"].sum()),
        "simulated": int(selected["simulated"].sum()),
        "real": int((~selected["simulated"]).sum()),
        "unordered_used": int((~selected["used_ordered"]).sum()),
    }
    return state


def l1_stage(state: RoundState, config: EvolutionConfig) -> RoundState:
    """L1 topology update (in place on `state`; a no-op when the layer is switched off)."""
    t = time.perf_counter()
    if config.l1_topology:
        l1 = topology_update(
            state.edges, state.parent.nodes, state.workflow, state.ordered, state.couse, config, state.round
        )
        state.edges = l1.edges
        state.counters["l1"] = l1.counters
    state.timings["l1"] = time.perf_counter() - t
    return state


def l2_stage(state: RoundState, config: EvolutionConfig) -> RoundState:
    """L2 edge-weight update (in place on `state`)."""
    t = time.perf_counter()
    if config.l2_weights:
        l2 = weight_update(
            state.edges, state.workflow, state.ordered, state.couse, state.unused, config, state.round
        )
        state.edges = l2.edges
        state.counters["l2"] = l2.counters
    state.timings["l2"] = time.perf_counter() - t
    return state


def l3_stage(
    state: RoundState, config: EvolutionConfig, retrieval: RetrievalConfig, editor: Editor | None = None
) -> RoundState:
    """L3 description update on the round's graph (in place on `state`).

    The round builds one lexical index at most (a further one only when its verification reverts a
    revision): the round's graph shares the parent's nodes and tokens, so its retriever takes the
    parent's index from the store's cache (a parent without one gets it built and cached once, for every
    round from it), and the verification pass builds one over the revised token table, only when a
    revision passed both gates.
    """
    t = time.perf_counter()
    if config.l3_descriptions:
        parent, edges = state.parent, state.edges
        draft = draft_snapshot(parent, state.nodes, state.tokens, edges)
        if state.nodes is parent.nodes and state.tokens is parent.tokens and parent.path is not None:
            # The same text as the stored parent: its derived caches (keyed by content) hold for the draft.
            draft = replace(draft, path=parent.path, manifest=parent.manifest, _cache={})
        retriever = Retriever(draft, retrieval)

        def rebuild(new_nodes: pl.DataFrame, new_tokens: pl.DataFrame) -> Retriever:
            # Only the text changed: the operator of the round's edges is the draft's.
            revised = Snapshot(
                version=f"{parent.version}+revised",
                path=None,
                manifest={"config": parent.manifest.get("config", {})},
                nodes=new_nodes,
                tokens=new_tokens,
                edges=edges,
                transition=draft.transition,
            )
            return Retriever(revised, retrieval)

        l3 = description_update(retriever, state.selected, config, retrieval.top_n, editor, rebuild)
        state.nodes, state.tokens, state.revisions = l3.nodes, l3.tokens, l3.revisions
        state.counters["l3"] = l3.counters
    state.timings["l3"] = time.perf_counter() - t
    return state


def commit_round(
    store: SnapshotStore,
    state: RoundState,
    window: str,
    config: EvolutionConfig,
    retrieval: RetrievalConfig,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Commit the round as a child of its parent; the manifest records window, configs and counters."""
    parent_config = state.parent.manifest.get("config", {})
    total = sum(state.timings.values())
    return commit_derived(
        store,
        state.parent,
        state.edges,
        kind="evolved",
        nodes=state.nodes,
        tokens=state.tokens,
        extra={
            "round": state.round,
            "window": window,
            "config": {**parent_config, "evolution": asdict(config), "retrieval": asdict(retrieval)},
            "counters": state.counters,
            "timings_s": {**{k: round(v, 4) for k, v in state.timings.items()}, "total": round(total, 4)},
            **(extra or {}),
        },
        extra_tables={ROUND_TRACES: state.selected, REVISIONS: state.revisions},
    )


def evolve_round(
    parent: Snapshot,
    traces: pl.DataFrame,
    config: EvolutionConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    editor: Editor | None = None,
    progress: Progress | None = None,
) -> RoundState:
    """The pure core of a round (no store access): tables of the next version and the counters."""
    config = config or EvolutionConfig()
    retrieval = retrieval or retrieval_for(parent.manifest)
    say = progress or (lambda _msg: None)
    state = prepare_round(parent, traces, config, retrieval)
    t = state.counters["traces"]
    say(
        f"round {state.round}: {t['selected']} of {t['in_window']} traces kept, "
        f"{t['retrieval_reconstructed']} with reconstructed retrieval"
    )
    l1_stage(state, config)
    if "l1" in state.counters:
        say(
            "L1: "
            + ", ".join(f"{r} +{c['induced']}" for r, c in state.counters["l1"].items() if "induced" in c)
        )
    l2_stage(state, config)
    if "l2" in state.counters:
        c = state.counters["l2"]
        say(f"L2: {c['edges_reinforced']} reinforced, {c['semantic_edges_attenuated']} semantic halved")
    l3_stage(state, config, retrieval, editor)
    if "l3" in state.counters:
        c = state.counters["l3"]
        say(f"L3: {c['committed']} description(s) committed of {c['examined']} examined")
    return state


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
    parent = store.load(from_version)
    retrieval = retrieval or retrieval_for(parent.manifest)
    window_traces = TraceStore(store).load(window) if traces is None else traces
    state = evolve_round(parent, window_traces, config, retrieval, editor, progress)
    return commit_round(store, state, window, config, retrieval)
