"""Cold-start assets (SPEC §2 stages 1-3 and the version they make): unpartitioned.

skill_nodes -> semantic_edges -> transition_matrix -> cold_start_snapshot. The last one commits a version
with `SnapshotStore.write`, the same manifest `segos build` writes, so the CLI lists and loads it.
"""

# No `from __future__ import annotations`: Dagster inspects these signatures at runtime.

import time
from collections.abc import Iterator
from typing import Any

import polars as pl
import scipy.sparse as sp
from dagster import (
    AssetExecutionContext,
    DataVersion,
    MetadataValue,
    Output,
    asset,
)

from segos_pipeline.graph.edges import EDGE_SCHEMA, counts_by_relation
from segos_pipeline.graph.parsing import NODE_SCHEMA, REPORT_SCHEMA, parse_library
from segos_pipeline.graph.transition import transition_matrix as build_transition
from segos_pipeline.pipeline.stages import (
    commit_cold_start,
    content_hash,
    semantic_stage,
    stats_frame,
    stats_from_frame,
    transition_health,
)
from segos_pipeline.store.remote import RemoteStore
from segos_pipeline.store.snapshot import SnapshotStore
from segos_pipeline.text.lexicon import token_table

from . import checks
from .locations import store_name
from .metadata import (
    MATRIX_KINDS,
    OWNERS,
    TABLE_KINDS,
    column_schema,
    frame_table,
    rounded,
    table,
    tags,
)
from .resources import BuildSettings, SegosPaths

GROUP = "cold_start"
PROBLEM_COLUMNS = ["severity", "file", "problem", "action"]  # the build report, most useful first


def problems_table(report: pl.DataFrame, limit: int = 50) -> MetadataValue:
    """The build report's first `limit` problems as a table (the full list: `segos report <version>`)."""
    if report.is_empty():
        return table([], {c: REPORT_SCHEMA[c] for c in PROBLEM_COLUMNS})
    return frame_table(report, PROBLEM_COLUMNS, limit)


def version_uri(store: SnapshotStore, version: str) -> dict[str, Any]:
    """The version's folder at the store's URI, for a store at one (`path` names its local cache copy)."""
    if not isinstance(store, RemoteStore):
        return {}
    return {"uri": MetadataValue.url(store.url(f"versions/{version}"))}


def version_record(manifest: dict[str, Any], store_root: str) -> dict[str, Any]:
    """What a snapshot asset passes downstream: the version id and where it lives (not the tables)."""
    return {
        "version": manifest["version"],
        "parent": manifest.get("parent"),
        "kind": manifest.get("kind"),
        "round": manifest.get("round", 0),
        "window": manifest.get("window"),
        "store": store_root,
        "committed": True,
        "files_sha256": content_hash(manifest["files"]),
    }


@asset(
    group_name=GROUP,
    code_version="1",
    kinds=TABLE_KINDS,
    owners=OWNERS,
    tags=tags("1-parse", GROUP),
    metadata=column_schema(NODE_SCHEMA, "The node table"),
    check_specs=[checks.unique_ids_spec("skill_nodes")],
    description="Parse every SKILL.md package under the library root (`SEGOS_LIBRARY`, default the demo "
    "library) into one row per skill, its search tokens, and the build report: every problem found "
    "(broken YAML, missing name, ...) and what was done about it. Output: {nodes, tokens, report} tables.",
)
def skill_nodes(
    context: AssetExecutionContext, segos: SegosPaths, build_settings: BuildSettings
) -> Iterator[Any]:
    config = build_settings.config()
    t0 = time.perf_counter()
    parsed = parse_library(segos.library(), config.parse)
    tokens = token_table(parsed.nodes)
    tables = {"nodes": parsed.nodes, "tokens": tokens, "report": parsed.report}
    severity = (
        {str(k): int(v) for k, v in parsed.report.group_by("severity").len().iter_rows()}
        if parsed.report.height
        else {}
    )
    yield Output(
        tables,
        data_version=DataVersion(content_hash(tables)),
        metadata={
            "dagster/row_count": parsed.nodes.height,
            "problems": parsed.report.height,
            "problems_by_severity": MetadataValue.json(severity),
            "problems_table": problems_table(parsed.report),
            "library_root": MetadataValue.path(str(segos.library())),
            "details": MetadataValue.json(
                {"token_rows": tokens.height, "parse_seconds": rounded(time.perf_counter() - t0)}
            ),
        },
    )
    yield checks.check_unique_ids("skill_nodes", parsed.nodes)


@asset(
    group_name=GROUP,
    code_version="1",
    kinds=TABLE_KINDS,
    owners=OWNERS,
    tags=tags("2-semantic-edges", GROUP),
    metadata=column_schema(EDGE_SCHEMA, "The edge table"),
    check_specs=[checks.edge_invariants_spec("semantic_edges")],
    description="The cold-start skill graph: `semantic` edges from each skill to the k skills whose "
    "package text (every field but the body) shares the most tokens with it (Jaccard overlap). "
    "Output: {edges, stats} tables.",
)
def semantic_edges(
    context: AssetExecutionContext, skill_nodes: dict[str, pl.DataFrame], build_settings: BuildSettings
) -> Iterator[Any]:
    nodes = skill_nodes["nodes"]
    edges, stats = semantic_stage(nodes, skill_nodes["tokens"], build_settings.config())
    tables = {"edges": edges, "stats": stats_frame(stats)}
    yield Output(
        tables,
        data_version=DataVersion(content_hash(tables)),
        metadata={
            "dagster/row_count": edges.height,
            "edges_by_relation": MetadataValue.json(counts_by_relation(edges)),
            "stats": MetadataValue.json(
                {
                    "unordered_pairs": stats.unordered_pairs,
                    "mutual_pairs": stats.mutual_pairs,
                    "max_degree": stats.max_degree,
                    "isolated_skills": stats.isolated,
                    "df_cap": stats.df_cap,
                    "capped_tokens": stats.capped_tokens,
                }
            ),
        },
    )
    yield checks.check_edges("semantic_edges", edges, nodes["id"])


@asset(
    group_name=GROUP,
    code_version="1",
    kinds=MATRIX_KINDS,
    owners=OWNERS,
    tags=tags("3-transition", GROUP),
    check_specs=[checks.transition_spec("transition_matrix")],
    description="The random-walk operator retrieval spreads relevance with (Personalized PageRank): a "
    "row-normalised sparse matrix over the traversable edges, each also walked backwards with a "
    "per-relation coefficient.",
)
def transition_matrix(
    context: AssetExecutionContext,
    skill_nodes: dict[str, pl.DataFrame],
    semantic_edges: dict[str, pl.DataFrame],
    build_settings: BuildSettings,
) -> Iterator[Any]:
    matrix = build_transition(
        semantic_edges["edges"], skill_nodes["nodes"]["id"], build_settings.config().transition
    )
    health = transition_health(matrix)
    yield Output(
        matrix,
        data_version=DataVersion(content_hash(matrix)),
        metadata={
            "dagster/row_count": health["rows"],
            "nnz": health["nnz"],
            "rows": MetadataValue.json({k: health[k] for k in ("rows", "rows_empty", "rows_stochastic")}),
        },
    )
    yield checks.check_transition("transition_matrix", matrix)


@asset(
    group_name=GROUP,
    code_version="1",
    kinds={"parquet", "scipy", "json"},  # the version's tables and operator; the record passed on
    owners=OWNERS,
    tags=tags("commit", GROUP),
    check_specs=[checks.manifest_spec("cold_start_snapshot")],
    description="Commit the cold-start version (round 0) to the snapshot store, as `segos build` does. "
    "Output: the version record (id, store); the tables live in STORE/versions/<id>/.",
)
def cold_start_snapshot(
    context: AssetExecutionContext,
    skill_nodes: dict[str, pl.DataFrame],
    semantic_edges: dict[str, pl.DataFrame],
    transition_matrix: sp.csr_matrix,
    segos: SegosPaths,
    build_settings: BuildSettings,
) -> Iterator[Any]:
    store = segos.store()
    t0 = time.perf_counter()
    manifest = commit_cold_start(
        store,
        library_root=segos.library(),
        nodes=skill_nodes["nodes"],
        tokens=skill_nodes["tokens"],
        report=skill_nodes["report"],
        edges=semantic_edges["edges"],
        stats=stats_from_frame(semantic_edges["stats"]),
        transition=transition_matrix,
        config=build_settings.config(),
        # the run that made the version: from a manifest one can find its Dagster run and back
        extra={
            "orchestrator": {"name": "dagster", "run_id": context.run.run_id, "asset": "cold_start_snapshot"}
        },
    )
    record = version_record(manifest, store_name(store))
    counts = manifest["counts"]
    context.log.info(f"committed {manifest['version']} to {store_name(store)}")
    yield Output(
        record,
        # the files' hashes, not the version id: rebuilding identical content is not a data change
        data_version=DataVersion(record["files_sha256"]),
        metadata={
            "version": manifest["version"],
            "path": MetadataValue.path(str(store.versions_dir / manifest["version"])),
            **version_uri(store, manifest["version"]),
            **{f"edges.{rel}": n for rel, n in counts["edges_by_relation"].items()},
            "counts": MetadataValue.json(
                {
                    **{k: counts.get(k) for k in ("skills", "edges", "transition_nnz", "problems")},
                    "write_seconds": rounded(time.perf_counter() - t0),
                }
            ),
        },
    )
    yield checks.check_manifest("cold_start_snapshot", store, manifest["version"])
