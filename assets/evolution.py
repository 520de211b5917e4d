"""Evolution assets: one daily time-window partition per evolution window (SPEC §2 stages 4-8, §9).

    traces ─▶ topology_update ─▶ edge_weights ─▶ descriptions ─▶ graph_snapshot ─▶ edge_diff
                                                                   ▲      │      └─▶ replay_report
                                                   (window d-1) ───┘      (self-dependency)

`graph_snapshot[d]` depends on `graph_snapshot[d-1]` (a self-dependency), so round-to-round lineage is
declared, backfills run windows in order, and the first window starts from `cold_start_snapshot`.

L1 → L2 → L3 → commit run as ONE step (a multi-asset with four outputs). They cannot be separate
steps: each needs the parent version, and in Dagster only an asset itself may depend on its previous
partition; `topology_update[d]` depending on `graph_snapshot[d-1]` would be a cycle between keys.
Each stage still is its own asset with its own output, metadata, checks and code version.

The store owns every table: the window's traces stay in its files (STORE/traces/<window>/, read by the
round partition by partition, as `segos evolve` reads them), each version's tables in the version. The
assets pass records (counts, ids, file names), so nothing under STORE/dagster/ copies what the store holds.
"""

# No `from __future__ import annotations`: Dagster inspects these signatures at runtime.

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import polars as pl
from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetOut,
    DailyPartitionsDefinition,
    DataVersion,
    Failure,
    FreshnessPolicy,
    MetadataValue,
    Output,
    PipesSubprocessClient,
    TimeWindowPartitionMapping,
    asset,
    multi_asset,
)

from segos_pipeline.evaluation.replay import load_queries, replay
from segos_pipeline.evaluation.study.headline import headline_numbers
from segos_pipeline.evaluation.study.run import resolve_base
from segos_pipeline.evolution.descriptions import REVISION_SCHEMA
from segos_pipeline.evolution.engines import make_engine
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import window_files
from segos_pipeline.evolution.traces import TRACE_SCHEMA
from segos_pipeline.graph.edges import EDGE_SCHEMA, violations
from segos_pipeline.pipeline.stages import (
    commit_round,
    content_hash,
    experience_stage,
    l1_stage,
    l2_stage,
    l3_stage,
    prepare_round,
)
from segos_pipeline.retrieval.ranker import Retriever
from segos_pipeline.store.diff import counts_by_relation as diff_counts_by_relation
from segos_pipeline.store.diff import diff_versions, largest_changes, learned_by_skill

from . import checks
from .cold_start import version_metadata, version_record
from .locations import start_date
from .metadata import (
    OWNERS,
    RECORD_KINDS,
    TABLE_KINDS,
    column_schema,
    edge_output,
    frame_table,
    rounded,
    table,
    tags,
)
from .resources import EngineSettings, EvolutionSettings, RetrievalSettings, SegosPaths
from .spark_pipes import PipesSparkEngine

GROUP = "evolution"
# One window a day from `$SEGOS_START_DATE` (default: the demo traces' first window, 2026-11-27; read when
# the code location loads); a window's partition exists once its day ended.
windows = DailyPartitionsDefinition(start_date=start_date())
PREVIOUS_WINDOW = TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)
# The nightly schedule commits the window of the day before at 03:00: a graph_snapshot not materialized for
# more than a day (plus the run's margin) missed a night; two nights missed is a failure.
NIGHTLY_FRESHNESS = FreshnessPolicy.time_window(
    fail_window=timedelta(hours=49), warn_window=timedelta(hours=25)
)
DIFF_COLUMNS = {  # a diff's largest changes (store.diff.largest_changes rows)
    "change": pl.String,
    "relation": pl.String,
    "src": pl.String,
    "dst": pl.String,
    "before": pl.Float64,
    "after": pl.Float64,
}
LEARNED_COLUMNS = {  # what skills learned, per skill (store.diff.learned_by_skill rows)
    "skill": pl.String,
    "requests": pl.Int64,
    "tasks_before": pl.Int64,
    "tasks_after": pl.Int64,
    "example": pl.String,
}
INGEST_COUNTS = ("read", "accepted", "duplicates", "quarantined")  # an ingest report's counts, in order


# ------------------------------------------------------------------------------------------------ traces


@asset(
    group_name=GROUP,
    partitions_def=windows,
    code_version="2",
    kinds=TABLE_KINDS,
    owners=OWNERS,
    tags=tags("4-ingest", GROUP),
    metadata=column_schema(TRACE_SCHEMA, "The trace table"),
    ins={"cold_start_snapshot": AssetIn()},
    description="Ingest the window's landing file (<landing_dir>/<YYYY-MM-DD>.jsonl: agents' execution "
    "traces) into the store's trace table for the window: validated, bad lines quarantined with reasons, "
    "idempotent on trace id. A day without a file materializes with 0 new traces. The traces stay in "
    "the store's files (STORE/traces/<window>/); output: the window's record (trace count, those files).",
)
def traces(
    context: AssetExecutionContext, cold_start_snapshot: dict[str, Any], segos: SegosPaths
) -> Iterator[Any]:
    window = context.partition_key
    store = segos.store()
    trace_store = TraceStore(store)
    landing = segos.landing_file(window)
    meta: dict[str, Any] = {"landing_file": MetadataValue.path(str(landing))}
    if landing.is_file():
        # As `segos ingest` reads it (the streaming columnar path). Skill names resolve against the
        # cold-start version: the node set never changes in evolution.
        report = trace_store.ingest_path(landing, window=window, version=cold_start_snapshot["version"])
        counts = {key: getattr(report, key) for key in INGEST_COUNTS}
        meta.update(
            quarantine_reasons=MetadataValue.json(report.quarantine_reasons),
            unknown_skills=MetadataValue.json(report.unknown_skills),
            skipped=MetadataValue.json(report.skipped),  # a link or a torn last line: never read
        )
        for item in report.skipped:
            context.log.warning(f"skipped {item['source']}: {item['reason']}")
    else:
        # A day without traces is a window like any other: materialized, with nothing new to learn from.
        context.log.info(
            f"no landing file {landing}: 0 new traces; the window keeps what was ingested before"
        )
        counts = dict.fromkeys(INGEST_COUNTS, 0)
        meta["note"] = MetadataValue.text("no landing file for this window: 0 new traces")
    record = window_record(trace_store, window)
    meta.update(
        {
            "dagster/row_count": record["traces"],  # traces per window: the one number plotted
            "ingest": MetadataValue.json(
                {
                    **counts,
                    "window_quarantine_total": len(trace_store.quarantine(window)),
                    "window_files": len(record["files"]),
                }
            ),
        }
    )
    # the files (a part's name holds its hash): a re-ingest that adds nothing is not a data change
    yield Output(record, data_version=DataVersion(content_hash(record["files"])), metadata=meta)


def window_record(trace_store: TraceStore, window: str) -> dict[str, Any]:
    """The window as the store holds it, each file checked against its hash: its trace count, read from
    the files' footers, and its files with their sizes (relative to the store), not the traces."""
    files = trace_store.checked_files(window)
    rows = pl.scan_parquet(files).select(pl.len()).collect().item() if files else 0
    root = trace_store.store.root
    return {
        "window": window,
        "traces": int(rows),
        "files": [{"path": f.relative_to(root).as_posix(), "bytes": f.stat().st_size} for f in files],
    }


# ----------------------------------------------------------------------------------- the round (L1-L3)


REVISION_COLUMNS = ["skill", "rank_before", "rank_after", "after"]


def revisions_record(revisions: pl.DataFrame) -> dict[str, int]:
    """What the descriptions asset passes on: the revisions are stored with the version (`revisions`)."""
    return {"revisions": revisions.height, "committed": int(revisions["committed"].sum())}


def _descriptions_output(revisions: pl.DataFrame, metadata: dict[str, Any]) -> Output[dict[str, int]]:
    record = revisions_record(revisions)
    return Output(
        record,
        output_name="descriptions",
        data_version=DataVersion(content_hash(revisions)),
        metadata={"dagster/row_count": revisions.height, "committed": record["committed"], **metadata},
    )


def revisions_table(revisions: pl.DataFrame, limit: int = 20) -> MetadataValue:
    """The descriptions committed this round (skill, its rank for the query before and after, new text)."""
    return frame_table(revisions.filter(pl.col("committed")), REVISION_COLUMNS, limit)


@multi_asset(
    group_name=GROUP,
    partitions_def=windows,
    outs={
        "topology_update": AssetOut(
            code_version="2",
            kinds=TABLE_KINDS,
            owners=OWNERS,
            tags=tags("5-l1-topology", GROUP),
            metadata=column_schema(EDGE_SCHEMA, "The edge table"),
            description="Topology: the edge table after the window's traces added `workflow` edges "
            "(a query's seed and the skills the successful run used), `dependency` edges (a skill used "
            "before another whose inputs its outputs feed) and `avoid` edges (pairs co-used only on "
            "failed runs), and retracted avoid edges successes disproved. Per-rule counters as metadata.",
        ),
        "edge_weights": AssetOut(
            code_version="2",
            kinds=TABLE_KINDS,
            owners=OWNERS,
            tags=tags("6-l2-weights", GROUP),
            metadata=column_schema(EDGE_SCHEMA, "The edge table"),
            description="Weights: the edge table after edges witnessed again gained the window's "
            "evidence, and skills retrieved often but never used had their incoming semantic weights "
            "lowered (never deleted).",
        ),
        "descriptions": AssetOut(
            code_version="2",
            kinds=TABLE_KINDS,
            owners=OWNERS,
            tags=tags("7-l3-descriptions", GROUP),
            metadata=column_schema(REVISION_SCHEMA, "Description revisions"),
            description="Descriptions: every rewrite tried this window of the description of a skill "
            "a successful run used but retrieval missed (adding the words of its own package the query "
            "needed), committed or not, with its evidence and the rank checks it passed or failed.",
        ),
        "graph_snapshot": AssetOut(
            code_version="1",
            kinds={"parquet", "scipy", "json"},  # the version's tables and operator; the record passed on
            owners=OWNERS,
            tags=tags("8-commit", GROUP),
            freshness_policy=NIGHTLY_FRESHNESS,
            description="The window's graph version committed to the snapshot store, child of the "
            "previous window's version (the cold start for the first window); a window without traces "
            "commits nothing and carries the previous version forward. Output: the version record.",
        ),
    },
    ins={
        "traces": AssetIn(),
        "previous": AssetIn("graph_snapshot", partition_mapping=PREVIOUS_WINDOW),
        "cold_start_snapshot": AssetIn(),
    },
    internal_asset_deps={
        "topology_update": {AssetKey("traces"), AssetKey("cold_start_snapshot")},
        "edge_weights": {AssetKey("topology_update")},
        "descriptions": {AssetKey("edge_weights")},
        "graph_snapshot": {
            AssetKey("descriptions"),
            AssetKey("graph_snapshot"),
            AssetKey("cold_start_snapshot"),
        },
    },
    check_specs=[
        checks.edge_invariants_spec("topology_update"),
        checks.edge_invariants_spec("edge_weights"),
        checks.unique_ids_spec("descriptions"),
        checks.manifest_spec("graph_snapshot"),
        checks.transition_spec("graph_snapshot"),
    ],
)
def evolution_round(
    context: AssetExecutionContext,
    traces: dict[str, Any],
    previous: dict[str, Any] | None,
    cold_start_snapshot: dict[str, Any],
    segos: SegosPaths,
    evolution_settings: EvolutionSettings,
    retrieval_settings: RetrievalSettings,
    engine_settings: EngineSettings,
    pipes_subprocess_client: PipesSubprocessClient,
) -> Iterator[Any]:
    window = context.partition_key
    launch = engine_settings.launch_mode()  # a bad setting stops the round before it loads anything
    store = segos.store()
    config = evolution_settings.config()
    parent_id = previous["version"] if previous else cold_start_snapshot["version"]
    parent = store.load(parent_id)  # verifies the parent's hashes: a damaged parent stops the round
    retrieval = retrieval_settings.config(parent.manifest)
    context.log.info(f"window {window}: parent {parent_id} (round {parent.round}), {traces['traces']} traces")
    ids = parent.nodes["id"]

    if not traces["traces"]:
        # Nothing to learn from: carry the parent forward instead of committing an identical version,
        # so the chain of windows stays unbroken without empty versions.
        yield from _unchanged(parent_id, parent, store, window)
        return

    # Every engine reads the window's Parquet files from the store itself (partition by partition, on the
    # executors, or in the Spark process Pipes launches), and the version references those files by hash
    # instead of copying the traces.
    engine = (
        make_engine(engine_settings.config())
        if launch == "in_process"
        else PipesSparkEngine(
            context,
            pipes_subprocess_client,
            engine_settings.config(),
            window,
            engine_settings.spark_submit,
            # the key Pipes knows the asset by (a prefixed key is "prefix/graph_snapshot")
            report_to=context.asset_key_for_output("graph_snapshot").to_user_string(),
        )
    )
    source = window_files(TraceStore(store), window)
    state = prepare_round(parent, source, config, retrieval, engine)
    context.log.info(f"evidence computed by the {engine.name} engine: {state.engine}")

    l1_stage(state, config)
    yield from _stage_output("topology_update", state.edges, ids, state.counters.get("l1", {}))

    l2_stage(state, config)
    yield from _stage_output("edge_weights", state.edges, ids, state.counters.get("l2", {}))

    l3_stage(state, config, retrieval)
    experience_stage(state, config, retrieval)
    l3 = state.counters.get("l3", {})
    experience = state.counters.get("experience", {})
    yield _descriptions_output(
        state.revisions,
        {
            "counters": MetadataValue.json(l3),
            "committed_revisions": revisions_table(state.revisions),
            # the round's experience and its held-out check (SPEC §8)
            "experience": MetadataValue.json(experience),
            "experience_committed": bool(experience.get("committed", False)),
            "held_out_mrr_before": float(experience.get("gate", {}).get("mrr_before", 0.0)),
            "held_out_mrr_after": float(experience.get("gate", {}).get("mrr_after", 0.0)),
        },
    )
    yield checks.check_unique_ids("descriptions", state.nodes)

    manifest = commit_round(
        store,
        state,
        window,
        config,
        retrieval,
        extra={"orchestrator": {"name": "dagster", "run_id": context.run.run_id, "partition": window}},
    )
    vid = manifest["version"]
    context.log.info(f"committed {vid} (parent {parent_id}) to {store.address}")
    record = {**version_record(manifest, store.address), "window": window}
    counts = manifest["counts"]
    yield Output(
        record,
        output_name="graph_snapshot",
        data_version=DataVersion(record["files_sha256"]),
        metadata={
            **version_metadata(store, manifest),
            "parent": parent_id,
            "round": MetadataValue.text(str(manifest["round"])),
            "traces": traces["traces"],  # traces per window, plotted next to the edges by relation
            "counts": MetadataValue.json({k: counts.get(k) for k in ("skills", "edges", "transition_nnz")}),
            "counters": MetadataValue.json(state.counters),
            "timings_s": MetadataValue.json(manifest.get("timings_s", {})),
            # the engine's metrics (Spark: job and partition times, worker memory, bytes collected) as one
            # JSON entry: a plot per metric would bury the few that matter
            "engine": MetadataValue.json(state.engine),
            # launch="pipes": what the Spark process reported over Pipes (its `engine` record included)
            **(engine.reported if isinstance(engine, PipesSparkEngine) else {}),
        },
    )
    yield checks.check_manifest("graph_snapshot", store, vid)
    yield checks.check_transition("graph_snapshot", store.load(vid, verify=False).transition)


def _stage_output(name: str, edges: pl.DataFrame, ids: pl.Series, counters: dict[str, Any]) -> Iterator[Any]:
    """An edge-table stage: a blocking invariant check first, so a bad table stops the round uncommitted."""
    result = checks.check_edges(name, edges, ids)
    yield edge_output(name, edges, counters=MetadataValue.json(counters))
    yield result
    if not result.passed:
        bad = {k: v for k, v in violations(edges, ids).items() if v}
        raise Failure(f"{name} broke edge-table invariants {json.dumps(bad)}; the round commits nothing")


def _unchanged(parent_id: str, parent: Any, store: Any, window: str) -> Iterator[Any]:
    ids = parent.nodes["id"]
    yield from _stage_output("topology_update", parent.edges, ids, {})
    yield from _stage_output("edge_weights", parent.edges, ids, {})
    yield _descriptions_output(pl.DataFrame(schema=REVISION_SCHEMA), {"counters": MetadataValue.json({})})
    yield checks.check_unique_ids("descriptions", parent.nodes)
    record = {
        **version_record(parent.manifest, store.address),
        "parent": parent_id,  # diffing parent -> version then shows no change
        "window": window,
        "committed": False,
    }
    yield Output(
        record,
        output_name="graph_snapshot",
        data_version=DataVersion(record["files_sha256"]),
        metadata={
            "version": parent_id,
            "parent": parent_id,
            "committed": False,
            "traces": 0,
            "note": "no traces in this window: the previous version carries forward, nothing committed",
        },
    )
    yield checks.check_manifest("graph_snapshot", store, parent_id)
    yield checks.check_transition("graph_snapshot", parent.transition)


# -------------------------------------------------------------------------------------- diff and replay


@asset(
    group_name=GROUP,
    partitions_def=windows,
    code_version="3",
    kinds=RECORD_KINDS,
    owners=OWNERS,
    tags=tags("9-diff", GROUP),
    description="What the window changed: edges added / removed / reweighted / retyped, descriptions "
    "changed and what skills learned (experience), from the parent version to the window's version. "
    "Output: the counts (the whole diff, every changed edge and request: `segos diff FROM TO --json`, "
    "from the two versions the store holds).",
)
def edge_diff(
    context: AssetExecutionContext, graph_snapshot: dict[str, Any], segos: SegosPaths
) -> Iterator[Any]:
    store = segos.store()
    diff = diff_versions(store.load(graph_snapshot["parent"]), store.load(graph_snapshot["version"]))
    counts = diff["counts"]
    by_relation = diff_counts_by_relation(diff)
    yield Output(
        {"from": diff["from"], "to": diff["to"], "counts": counts, "by_relation": by_relation},
        data_version=DataVersion(content_hash(diff)),
        metadata={
            "from": diff["from"],
            "to": diff["to"],
            "changes": int(
                counts["added"] + counts["removed"] + counts["reweighted"] + counts["descriptions"]
            ),
            "counts": MetadataValue.json({k: int(v) for k, v in counts.items()}),
            "by_relation": MetadataValue.json(by_relation),
            "largest_changes": table(largest_changes(diff, 15), DIFF_COLUMNS),
            # the skills that learned most this window, each with the request most tasks asked
            "learned": table(learned_by_skill(diff, 15), LEARNED_COLUMNS),
        },
    )


@asset(
    group_name=GROUP,
    partitions_def=windows,
    code_version="3",
    kinds=RECORD_KINDS,
    owners=OWNERS,
    tags=tags("10-replay", GROUP),
    description="Replay metrics of the window's version on the configured query set (hit@k, recall@k, "
    "COMP@k, MRR, mean best rank, latency) as numbers the UI plots across windows.",
)
def replay_report(
    context: AssetExecutionContext,
    graph_snapshot: dict[str, Any],
    segos: SegosPaths,
    retrieval_settings: RetrievalSettings,
) -> Iterator[Any]:
    store = segos.store()
    snapshot = store.load(graph_snapshot["version"])
    queries, retrieval = load_queries(segos.queries_path()), retrieval_settings.config(snapshot.manifest)
    result = replay(Retriever(snapshot, retrieval), queries, k=segos.replay_k)
    k = result["k"]
    # Headline numbers of the offline study (SPEC §10, `segos eval`): this version next to the trace-free
    # baselines on its cold start (flat BM25, lexical seeds, reverse-aware PPR), so every version shows
    # in the UI whether it beats them; the full study (factorial, protocols) stays a `segos eval` run.
    base = store.load(resolve_base(store, None, [snapshot.version]))
    headline = headline_numbers(snapshot, base, queries, segos.replay_k, retrieval)
    numbers = {
        f"hit@{k}": rounded(result["hit"]),
        "mrr": rounded(result["mrr"]),
        "mean_best_rank": None if result["mean_best_rank"] is None else rounded(result["mean_best_rank"]),
        "queries": int(result["n"]),
        "latency_ms_p50": rounded(result["latency_ms"]["p50"]),
        "latency_ms_p95": rounded(result["latency_ms"]["p95"]),
    }
    stable = {k2: v for k2, v in result.items() if k2 != "latency_ms"}  # latency is not content
    yield Output(
        result,
        data_version=DataVersion(content_hash(stable)),
        metadata={
            "version": graph_snapshot["version"],
            "query_set": MetadataValue.path(str(segos.queries_path())),
            # the two numbers plotted across windows
            f"recall@{k}": rounded(result["recall"]),
            f"comp@{k}": rounded(result["comp"]),
            "replay": MetadataValue.json(numbers),
            "versus_baselines": table(evaluation_rows(headline, k), evaluation_columns(k)),
            "unknown_gold": MetadataValue.json(result["unknown_gold"]),
        },
    )


EVAL_METHODS = ("version", "ppr", "lexical", "bm25")  # this version first, then the baselines


def evaluation_columns(k: int) -> dict[str, Any]:
    return {"method": pl.String, **dict.fromkeys(_eval_metrics(k), pl.Float64)}


def _eval_metrics(k: int) -> tuple[str, ...]:
    return (f"hit@{k}", f"recall@{k}", f"comp@{k}", "mrr")


def evaluation_rows(headline: dict[str, float], k: int) -> list[dict[str, Any]]:
    """`eval.<method>.<metric>` numbers (study/headline.py) as one row per method that has any."""
    rows = [
        {"method": method, **{m: headline.get(f"eval.{method}.{m}") for m in _eval_metrics(k)}}
        for method in EVAL_METHODS
    ]
    return [row for row in rows if any(row[m] is not None for m in _eval_metrics(k))]
