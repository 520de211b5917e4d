"""The Dagster code location on a store at a URI (docs/storage.md): the cold start and an evolution round
materialized with `store_root` a `file://` URI publish their versions there (read back by a fresh
`open_store` with another cache), equal to the versions a local store gets; `$SEGOS_STORE` may hold the
URI; the IO manager and the landing folder use the store's local cache."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, AssetSelection, DagsterInstance, materialize

from assets.definitions import ASSETS
from assets.io_managers import SegosIOManager
from assets.resources import EngineSettings, EvolutionSettings, RetrievalSettings, SegosPaths, build_resources
from segos_pipeline.config import EvolutionConfig, RetrievalConfig, retrieval_preset
from segos_pipeline.paths import DEMO_TRACES
from segos_pipeline.store.remote import RemoteStore, cache_folder, open_store
from segos_pipeline.store.snapshot import SnapshotStore

from .test_pipes import needs_spark
from .test_spark import assert_same_round_in_two_stores

pytestmark = [
    pytest.mark.filterwarnings("ignore:Parameter `data_version`"),
    pytest.mark.filterwarnings("ignore:AssetExecutionContext.run_id is deprecated"),  # Dagster's Pipes code
    pytest.mark.filterwarnings("ignore:Function `PipesMessageReader.expected_writer_count`"),
]

WINDOW = "2026-11-27"


def materialize_round(
    store_root: str | Path, cache_dir: Path | None = None, engine: EngineSettings | None = None
) -> dict[str, Any]:
    """The cold start, then the evolution group for WINDOW (round, diff, replay), in one instance."""
    resources = build_resources(store_root, cache_dir=cache_dir, landing_dir=DEMO_TRACES, engine=engine)
    instance = DagsterInstance.ephemeral()
    t0 = time.perf_counter()
    cold = materialize(
        ASSETS, selection=AssetSelection.groups("cold_start"), instance=instance, resources=resources
    )
    assert cold.success
    round_ = materialize(
        ASSETS,
        selection=AssetSelection.groups("evolution"),
        partition_key=WINDOW,
        instance=instance,
        resources=resources,
    )
    assert round_.success
    return {"cold": cold, "round": round_, "seconds": time.perf_counter() - t0}


def metadata(result: Any, asset: str) -> dict[str, Any]:
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key == AssetKey(asset)]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


def record(result: Any, asset: str) -> dict[str, Any]:
    return (
        result.output_for_node("cold_start", asset)
        if asset == "cold_start_snapshot"
        else result.output_for_node("evolution_round", "graph_snapshot")
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same cold start and round into a local store and into a `file://` URI (with its own cache)."""
    local = tmp_path_factory.mktemp("dagster-local")
    work = tmp_path_factory.mktemp("dagster-uri")
    uri = (work / "remote" / "store").as_uri()
    cache = work / "dagster-cache"
    return {
        "local": local,
        "uri": uri,
        "cache": cache,
        "work": work,
        "local_runs": materialize_round(local),
        "uri_runs": materialize_round(uri, cache),
    }


def test_the_versions_are_published_at_the_uri_and_equal_the_local_stores(runs):
    uri_runs, local_runs = runs["uri_runs"], runs["local_runs"]
    cold, evolved = (
        record(uri_runs["cold"], "cold_start_snapshot"),
        record(uri_runs["round"], "graph_snapshot"),
    )
    assert cold["store"] == evolved["store"] == runs["uri"]  # the record names the URI, not the cache
    assert evolved["parent"] == cold["version"]

    fresh = open_store(runs["uri"], runs["work"] / "another-cache")  # another machine, as far as it can tell
    assert isinstance(fresh, RemoteStore) and not fresh.versions_dir.exists()
    assert [m["version"] for m in fresh.list_versions()] == [cold["version"], evolved["version"]]
    assert fresh.verify(evolved["version"]) == []  # downloaded, every file hash-checked

    local = SnapshotStore(runs["local"])
    local_evolved = record(local_runs["round"], "graph_snapshot")
    assert_same_round_in_two_stores(
        local, local.manifest(local_evolved["version"]), fresh, fresh.manifest(evolved["version"])
    )


def test_metadata_checks_and_downstream_assets_on_a_uri_store(runs):
    uri, cache_dir = runs["uri"], runs["cache"]
    cache = cache_folder(uri, cache_dir)
    result = runs["uri_runs"]["round"]
    meta = metadata(result, "graph_snapshot")
    vid = meta["version"]
    assert meta["path"] == str(cache / "versions" / vid)  # the local copy, as for a local store
    assert meta["uri"] == f"{uri}/versions/{vid}"
    assert set(metadata(runs["local_runs"]["round"], "graph_snapshot")) == set(meta) - {"uri"}
    checks = [e for e in result.get_asset_check_evaluations()]
    assert checks and all(c.passed for c in checks)
    assert metadata(result, "edge_diff")["to"] == vid  # read back through the URI store
    assert metadata(result, "replay_report")["version"] == vid
    # the records the assets pass in the store's local cache; trace parts and versions at the URI
    assert json.loads((cache / "dagster" / "traces" / f"{WINDOW}.json").read_text())["traces"] > 0
    assert not list((cache / "dagster").rglob("*.parquet"))
    remote = Path(uri.removeprefix("file://"))
    assert list((remote / "traces" / WINDOW / "parts").glob("*.parquet"))
    assert (remote / "versions" / vid / "manifest.json").is_file()
    assert not (remote / "dagster").exists()


def test_settings_resources_change_only_the_settings_given():
    assert EvolutionSettings().config() == EvolutionConfig()
    assert EvolutionSettings(zeta=0.4, blend=True).config() == EvolutionConfig(zeta=0.4, blend=True)
    assert RetrievalSettings().config() == RetrievalConfig()
    # on top of the version's preset, not of the defaults
    paper = {"config": {"preset": "paper"}}
    assert RetrievalSettings(alpha=0.3).config(paper) == retrieval_preset("paper").with_overrides(alpha=0.3)


def test_segos_store_may_hold_a_uri(tmp_path, monkeypatch):
    uri = (tmp_path / "remote" / "store").as_uri()
    monkeypatch.setenv("SEGOS_STORE", uri)
    monkeypatch.setenv("SEGOS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SEGOS_LANDING", raising=False)
    paths = SegosPaths()
    store = paths.store()
    cache = cache_folder(uri, tmp_path / "cache")
    assert isinstance(store, RemoteStore) and store.uri == uri and store.root == cache
    assert paths.store_location() == uri
    # the landing folder `segos mcp --store URI` appends to, and the IO manager's folder, in that cache
    assert paths.landing_path() == cache / "landing"
    assert SegosIOManager().base() == cache / "dagster"
    # a configured cache wins over $SEGOS_CACHE
    other = SegosPaths(cache_dir=str(tmp_path / "mine"))
    assert other.store().root == cache_folder(uri, tmp_path / "mine")
    assert (
        SegosIOManager(cache_dir=str(tmp_path / "mine")).base()
        == cache_folder(uri, tmp_path / "mine") / "dagster"
    )


def test_an_unknown_scheme_stops_the_run_before_any_step_with_one_clear_message(tmp_path):
    resources = build_resources("nosuchscheme://bucket/store", cache_dir=tmp_path / "cache")
    result = materialize(
        ASSETS,
        selection=AssetSelection.groups("cold_start"),
        instance=DagsterInstance.ephemeral(),
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    assert not result.get_asset_materialization_events()  # no step computed anything
    errors = [
        e.event_specific_data.error for e in result.all_events if e.is_failure or e.is_resource_init_failure
    ]
    messages = []
    for error in errors:
        while error is not None:
            messages.append(error.message)
            error = error.cause
    assert any("store nosuchscheme://bucket/store: Protocol not known" in m for m in messages), messages


@needs_spark
@pytest.mark.slow
@pytest.mark.parametrize("launch", ["in_process", "pipes"])
def test_the_spark_round_publishes_to_the_uri(runs, tmp_path, launch):
    """The Spark engine, in the step or started by spark-submit through Dagster Pipes, on a URI store: it
    reads the parent and the window's parts from the step's cache, and the version the step commits is
    published at the URI, equal to the local engine's."""
    uri = (tmp_path / "remote" / "store").as_uri()
    engine = EngineSettings(
        engine="spark",
        launch=launch,
        spark_master="local[2]",
        partitions=2,
        spark_conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    piped = materialize_round(uri, tmp_path / "cache", engine)
    evolved = record(piped["round"], "graph_snapshot")
    meta = metadata(piped["round"], "graph_snapshot")
    assert meta["engine"]["engine"] == "spark"
    assert ("spark.application_id" in meta) == (launch == "pipes")  # reported by the process Pipes ran
    fresh = open_store(uri, tmp_path / "fresh")
    assert fresh.verify(evolved["version"]) == []  # downloaded from the URI, every file hash-checked
    local = SnapshotStore(runs["local"])
    local_evolved = record(runs["local_runs"]["round"], "graph_snapshot")
    assert_same_round_in_two_stores(
        local, local.manifest(local_evolved["version"]), fresh, fresh.manifest(evolved["version"])
    )
    assert not list((cache_folder(uri, tmp_path / "cache") / ".spark").glob("pipes-*"))
