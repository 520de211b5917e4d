"""Cold-start assets (SPEC §2 stages 1-3 and the version they make): unpartitioned.

    skill_nodes ─▶ semantic_edges ─▶ transition_matrix ─▶ cold_start_snapshot

The four run as ONE step (a multi-asset with four outputs) calling `segos build`'s own stage functions
(`graph/build.py`): the parse workers tokenise, and the commit writes the same files, so the same library
gives the same version id whichever way it is built (`tests/integration/test_dagster.py`). The tables go
to the store once, in the version; the assets pass their counts and the version record, never a table (nothing
is copied under STORE/dagster/). Each stage is still its own asset with its own metadata and check.
"""

# No `from __future__ import annotations`: Dagster inspects these signatures at runtime.

import time
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetOut,
    DataVersion,
    Failure,
    MetadataValue,
    Output,
    multi_asset,
)

from segos_pipeline.graph.edges import EDGE_SCHEMA
from segos_pipeline.graph.parsing import NODE_SCHEMA
from segos_pipeline.pipeline.stages import (
    GraphTables,
    commit_cold_start,
    content_hash,
    library_fingerprint,
    parse_stage,
    require_skills,
    semantic_stage,
    transition_health,
    transition_matrix,
    warm_caches,
)
from segos_pipeline.store.snapshot import SnapshotStore

from . import checks
from .metadata import (
    MATRIX_KINDS,
    OWNERS,
    TABLE_KINDS,
    column_schema,
    edge_output,
    frame_table,
    rounded,
    tags,
)
from .resources import BuildSettings, SegosPaths

GROUP = "cold_start"
PROBLEM_COLUMNS = ["severity", "file", "problem", "action"]  # the build report, most useful first


def problems_table(report: pl.DataFrame, limit: int = 50) -> MetadataValue:
    """The build report's first `limit` problems as a table (the full list: `segos report <version>`)."""
    return frame_table(report, PROBLEM_COLUMNS, limit)


def version_metadata(store: SnapshotStore, manifest: dict[str, Any]) -> dict[str, Any]:
    """A committed version's metadata: its id, its folder (`path`; for a store at a URI, its local cache
    copy, and `uri` the version's folder there) and its edges by relation (one number each, plotted)."""
    vid = manifest["version"]
    url = store.url(f"versions/{vid}")
    return {
        "version": vid,
        "path": MetadataValue.path(str(store.versions_dir / vid)),
        **({"uri": MetadataValue.url(url)} if url is not None else {}),
        **{f"edges.{rel}": n for rel, n in manifest["counts"]["edges_by_relation"].items()},
    }


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


def _say(context: AssetExecutionContext) -> Callable[[Any], None]:
    """The stages' progress lines (the ones `segos build` prints) in the run's log; ticks are dropped."""
    return lambda message: context.log.info(message) if isinstance(message, str) else None


def _blocking(name: str, result: AssetCheckResult) -> Iterator[AssetCheckResult]:
    """Report a check; a failed one stops the cold start before it commits a version."""
    yield result
    if not result.passed:
        raise Failure(f"{name} failed its check {result.check_name}; the cold start commits nothing")


@multi_asset(
    group_name=GROUP,
    outs={
        "skill_nodes": AssetOut(
            code_version="2",
            kinds=TABLE_KINDS,
            owners=OWNERS,
            tags=tags("1-parse", GROUP),
            metadata=column_schema(NODE_SCHEMA, "The node table"),
            description="Parse every SKILL.md package under the library root (`SEGOS_LIBRARY`, default the "
            "demo library) into one row per skill, its search tokens, and the build report: every problem "
            "found (broken YAML, missing name, ...) and what was done about it. The tables are committed "
            "with the version (STORE/versions/<id>/); output: their counts and the library's fingerprint.",
        ),
        "semantic_edges": AssetOut(
            code_version="2",
            kinds=TABLE_KINDS,
            owners=OWNERS,
            tags=tags("2-semantic-edges", GROUP),
            metadata=column_schema(EDGE_SCHEMA, "The edge table"),
            description="The cold-start skill graph: `semantic` edges from each skill to the k skills whose "
            "package text (every field but the body) shares the most tokens with it (Jaccard overlap). The "
            "edge table is committed with the version; output: its counts and the join's statistics.",
        ),
        "transition_matrix": AssetOut(
            code_version="2",
            kinds=MATRIX_KINDS,
            owners=OWNERS,
            tags=tags("3-transition", GROUP),
            description="The random-walk operator retrieval spreads relevance with (Personalized PageRank): "
            "a row-normalised sparse matrix over the traversable edges, each also walked backwards with a "
            "per-relation coefficient. Committed with the version; output: its shape and row health.",
        ),
        "cold_start_snapshot": AssetOut(
            code_version="2",
            kinds={"parquet", "scipy", "json"},  # the version's tables and operator; the record passed on
            owners=OWNERS,
            tags=tags("commit", GROUP),
            description="Commit the cold-start version (round 0) to the snapshot store, as `segos build` "
            "does. Output: the version record (id, store); the tables live in STORE/versions/<id>/.",
        ),
    },
    internal_asset_deps={
        "skill_nodes": set(),
        "semantic_edges": {AssetKey("skill_nodes")},
        "transition_matrix": {AssetKey("skill_nodes"), AssetKey("semantic_edges")},
        "cold_start_snapshot": {
            AssetKey("skill_nodes"),
            AssetKey("semantic_edges"),
            AssetKey("transition_matrix"),
        },
    },
    check_specs=[
        checks.unique_ids_spec("skill_nodes"),
        checks.edge_invariants_spec("semantic_edges"),
        checks.transition_spec("transition_matrix"),
        checks.manifest_spec("cold_start_snapshot"),
    ],
)
def cold_start(
    context: AssetExecutionContext, segos: SegosPaths, build_settings: BuildSettings
) -> Iterator[Any]:
    config = build_settings.config()
    library, store, say = segos.library(), segos.store(), _say(context)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    parsed, tokens = parse_stage(library, config, say)
    timings["parse"] = time.perf_counter() - t0
    require_skills(parsed, library, build_settings.allow_empty)
    nodes, report = parsed.nodes, parsed.report
    fingerprint = library_fingerprint(nodes)
    yield Output(
        {
            "library_root": str(library),
            "library_fingerprint": fingerprint,
            "skills": nodes.height,
            "token_rows": tokens.height,
            "problems": report.height,
        },
        output_name="skill_nodes",
        # the skills' ids and content hashes, and the report: the tokens follow from them
        data_version=DataVersion(content_hash({"library": fingerprint, "report": content_hash(report)})),
        metadata={
            "dagster/row_count": nodes.height,
            "problems": report.height,
            "problems_by_severity": MetadataValue.json(
                {str(k): int(v) for k, v in report.group_by("severity").len().iter_rows()}
            ),
            "problems_table": problems_table(report),
            "library_root": MetadataValue.path(str(library)),
            "details": MetadataValue.json(
                {"token_rows": tokens.height, "parse_seconds": rounded(timings["parse"])}
            ),
        },
    )
    yield from _blocking("skill_nodes", checks.check_unique_ids("skill_nodes", nodes))

    t1 = time.perf_counter()
    signature, edges, stats = semantic_stage(nodes, tokens, config, say)
    yield edge_output(
        "semantic_edges",
        edges,
        {"semantic": stats.as_dict()},
        stats=MetadataValue.json(
            {
                "unordered_pairs": stats.unordered_pairs,
                "mutual_pairs": stats.mutual_pairs,
                "max_degree": stats.max_degree,
                "isolated_skills": stats.isolated,
                "df_cap": stats.df_cap,
                "capped_tokens": stats.capped_tokens,
            }
        ),
    )
    yield from _blocking("semantic_edges", checks.check_edges("semantic_edges", edges, nodes["id"]))

    transition = transition_matrix(edges, nodes["id"], config.transition)
    timings["graph"] = time.perf_counter() - t1
    health = transition_health(transition)
    yield Output(
        health,
        output_name="transition_matrix",
        data_version=DataVersion(content_hash(transition)),
        metadata={
            "dagster/row_count": health["rows"],
            "nnz": health["nnz"],
            "rows": MetadataValue.json({k: health[k] for k in ("rows", "rows_empty", "rows_stochastic")}),
        },
    )
    yield from _blocking("transition_matrix", checks.check_transition("transition_matrix", transition))

    t2 = time.perf_counter()
    manifest = commit_cold_start(
        store,
        parsed,
        GraphTables(nodes, tokens, edges, transition, stats, signature),
        config,
        timings,
        # the run that made the version: from a manifest one can find its Dagster run and back
        extra={
            "orchestrator": {"name": "dagster", "run_id": context.run.run_id, "asset": "cold_start_snapshot"}
        },
    )
    write_seconds = time.perf_counter() - t2
    vid = manifest["version"]
    context.log.info(f"committed {vid} to {store.address}")
    # the build's tables are in the version now: let them go before the caches load it, as `segos build`
    # does (the peak memory is the build's, not the build's plus the loaded version)
    del parsed, tokens, nodes, report, edges, transition, signature
    warm_caches(store.load(vid))  # as `segos build` does: the first query pays nothing
    record = version_record(manifest, store.address)
    counts = manifest["counts"]
    yield Output(
        record,
        output_name="cold_start_snapshot",
        # the files' hashes, not the version id: rebuilding identical content is not a data change
        data_version=DataVersion(record["files_sha256"]),
        metadata={
            **version_metadata(store, manifest),
            "counts": MetadataValue.json(
                {
                    **{k: counts.get(k) for k in ("skills", "edges", "transition_nnz", "problems")},
                    "write_seconds": rounded(write_seconds),
                }
            ),
        },
    )
    yield checks.check_manifest("cold_start_snapshot", store, vid)
