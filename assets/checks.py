"""Asset checks, evaluated inside the asset's own step and reported with its materialization.

They are `check_specs` on the assets rather than standalone `@asset_check`s: a standalone check on a
partitioned asset would load every partition (SPEC §13), and evaluating where the data is in memory
costs nothing extra. Blocking checks stop the run before bad data flows on (downstream steps are
skipped); inside an evolution round a failed blocking check stops the round before it commits a version.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import scipy.sparse as sp
from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, MetadataValue

from segos_pipeline.graph.edges import violations
from segos_pipeline.pipeline.stages import duplicate_ids, transition_health
from segos_pipeline.store.snapshot import SnapshotStore

UNIQUE_IDS = "unique_skill_ids"
EDGE_INVARIANTS = "edge_invariants"
TRANSITION_STOCHASTIC = "rows_stochastic_or_empty"
MANIFEST_HASHES = "manifest_hashes_match"


def spec(name: str, asset: str, description: str) -> AssetCheckSpec:
    return AssetCheckSpec(name=name, asset=asset, blocking=True, description=description)


def unique_ids_spec(asset: str) -> AssetCheckSpec:
    return spec(UNIQUE_IDS, asset, "Every skill id (package path) occurs once in the node table.")


def edge_invariants_spec(asset: str) -> AssetCheckSpec:
    return spec(
        EDGE_INVARIANTS,
        asset,
        "No self-loops, weights >= 0, avoid weight 0 and canonical, no avoid on a pair with a navigation "
        "relation, known relations and endpoints, no duplicate (src, dst, relation).",
    )


def transition_spec(asset: str) -> AssetCheckSpec:
    return spec(TRANSITION_STOCHASTIC, asset, "Every operator row sums to 1 or is empty (teleports).")


def manifest_spec(asset: str) -> AssetCheckSpec:
    return spec(MANIFEST_HASHES, asset, "The committed version's files match the manifest's sha256 hashes.")


def _result(asset: str, name: str, passed: bool, metadata: dict[str, Any]) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=asset, check_name=name, passed=passed, severity=AssetCheckSeverity.ERROR, metadata=metadata
    )


def check_unique_ids(asset: str, nodes: pl.DataFrame) -> AssetCheckResult:
    dups = duplicate_ids(nodes)
    metadata = {"skills": nodes.height, "duplicate_ids": len(dups), "examples": ", ".join(dups[:10])}
    return _result(asset, UNIQUE_IDS, not dups, metadata)


def check_edges(asset: str, edges: pl.DataFrame, node_ids: pl.Series) -> AssetCheckResult:
    found = violations(edges, node_ids)
    metadata = {"edges": edges.height, **{k: int(v) for k, v in found.items()}}
    return _result(asset, EDGE_INVARIANTS, not any(found.values()), metadata)


def check_transition(asset: str, transition: sp.csr_matrix) -> AssetCheckResult:
    health = transition_health(transition)
    passed = health["rows_bad"] == 0 and health["negative_entries"] == 0
    return _result(asset, TRANSITION_STOCHASTIC, passed, health)


def check_manifest(asset: str, store: SnapshotStore, version: str) -> AssetCheckResult:
    bad = store.verify(version)
    metadata = {
        "version": version,
        "files_checked": len(store.manifest(version)["files"]),
        "mismatched": MetadataValue.text(", ".join(bad) or "none"),
    }
    return _result(asset, MANIFEST_HASHES, not bad, metadata)
