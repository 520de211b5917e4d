"""The evolution round's engines agree (SPEC §11): the local engine with any partition count and
the Spark engine (local mode, started here) commit the same version files and counters as one partition.

One SparkSession for the module (small shuffle, no UI); every round runs on the demo windows and, when
../shared is present, on real traces.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.cli import main as cli
from segos_pipeline.config import EngineConfig, EvolutionConfig, RetrievalConfig
from segos_pipeline.evolution.adapters import iter_records, write_library
from segos_pipeline.evolution.engines import make_engine
from segos_pipeline.evolution.engines.local import LocalEngine
from segos_pipeline.evolution.evidence import finish, partition_evidence, split_by_task, sum_partials
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR, DEMO_TRACES
from segos_pipeline.retrieval.round_traces import round_part_names
from segos_pipeline.store.layout import MANIFEST, sha256_file
from segos_pipeline.store.remote import RemoteStore, cache_folder

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pandas", reason="the spark extra is not installed (mapInArrow needs pandas)")

WINDOW = "demo"
# Manifest keys that differ between two commits of the same content.
VOLATILE = {"version", "seq", "created", "created_at", "timings_s", "engine", "files", "code_version"}


@pytest.fixture(scope="module")
def spark():
    from segos_pipeline.evolution.engines.spark import spark_session

    session = spark_session(
        EngineConfig(
            engine="spark",
            spark_master="local[2]",
            spark_conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        )
    )
    yield session
    session.stop()


def spark_engine(session: Any, partitions: int | None = 3, **settings: Any):
    from segos_pipeline.evolution.engines.spark import SparkEngine

    return SparkEngine(EngineConfig(engine="spark", partitions=partitions, **settings), session=session)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> SnapshotStore:
    store = SnapshotStore(tmp_path_factory.mktemp("spark-demo"))
    build_cold_start(DEFAULT_LIBRARY, store)
    for name in ("2026-11-27.jsonl", "2026-11-28.jsonl"):
        TraceStore(store).ingest(iter_records(DEMO_DIR / "traces" / name, "native"), window=WINDOW)
    return store


def version_files(store: SnapshotStore, vid: str) -> dict[str, str]:
    folder = store.versions_dir / vid
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def stable_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k not in VOLATILE}


def assert_same_round_in_two_stores(
    store_a: SnapshotStore, a: dict[str, Any], store_b: SnapshotStore, b: dict[str, Any]
) -> None:
    """Two stores' versions of one round (two Dagster runs): the same counters, manifest, files and edges.
    Each store names its ingested parts itself, so the window files referenced are compared by content."""
    assert a["counters"] == b["counters"]
    other_store = {"parent", "orchestrator", "window_files"}
    assert {k: v for k, v in stable_manifest(a).items() if k not in other_store} == {
        k: v for k, v in stable_manifest(b).items() if k not in other_store
    }
    assert [(r["bytes"], r["sha256"]) for r in a["window_files"]] == [
        (r["bytes"], r["sha256"]) for r in b["window_files"]
    ]
    assert version_files(store_a, a["version"]) == version_files(store_b, b["version"])
    ea, eb = store_a.load(a["version"]).edges, store_b.load(b["version"]).edges
    assert ea.equals(eb)  # no edge added, removed or reweighted between the two


def assert_same_version(store: SnapshotStore, a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["parent"] == b["parent"]
    assert a["counters"] == b["counters"]
    assert stable_manifest(a) == stable_manifest(b)
    assert version_files(store, a["version"]) == version_files(store, b["version"])
    ea, eb = store.load(a["version"]).edges, store.load(b["version"]).edges
    assert ea.equals(eb)  # no edge added, removed or reweighted between the two


def rounds(store: SnapshotStore, window: str, engines: list, config: EvolutionConfig | None = None):
    parent = store.list_versions()[0]["version"]
    return [evolve(store, window, parent, config, engine=e) for e in engines]


# ------------------------------------------------------------------------------------ local partitions


def test_partial_tables_sum_to_the_whole_window(demo):
    """Every evidence table of 4 partitions summed equals that of the window in one partition."""
    traces = TraceStore(demo).load(WINDOW)
    no_replay = lambda texts: [([], []) for _ in texts]  # noqa: E731 (the demo traces record retrieval)
    whole = finish(sum_partials([partition_evidence(traces, no_replay, False, 0.9)]), 3)
    parts = split_by_task(traces, 4)
    assert len(parts) > 1
    assert sum(p.height for p in parts) == traces.height
    assert not set(parts[0]["task_id"]) & set(parts[1]["task_id"])  # a task lies in one partition
    summed = finish(sum_partials([partition_evidence(p, no_replay, False, 0.9) for p in parts]), 3)
    for name in ("workflow", "ordered", "couse", "unused"):
        assert getattr(summed, name).equals(getattr(whole, name)), name
    assert summed.counts == whole.counts
    assert whole.workflow.height > 0 and whole.couse.height > 0  # the comparison is not between empties


@pytest.mark.parametrize("pool", [False, True])
def test_local_engine_any_partition_count_commits_the_same_version(demo, pool):
    config = EvolutionConfig(pool_attempts=pool)
    one, seven = rounds(demo, WINDOW, [LocalEngine(EngineConfig(partitions=p)) for p in (1, 7)], config)
    assert seven["engine"]["partitions"] == 7
    assert_same_version(demo, one, seven)


# ------------------------------------------------------------------------------------------ Spark engine


def test_spark_engine_commits_the_local_version_on_demo_traces(demo, spark):
    local, on_spark = rounds(demo, WINDOW, [make_engine(), spark_engine(spark)])
    assert on_spark["engine"]["engine"] == "spark" and on_spark["engine"]["partitions"] == 3
    # the same experience too (it is part of the version's bytes), and there is some to compare
    assert local["counters"]["experience"]["rows_after"] > 0
    assert on_spark["counters"]["experience"] == local["counters"]["experience"]
    assert on_spark["engine"]["traces"] == local["counters"]["traces"]["in_window"]
    assert_same_version(demo, local, on_spark)


def test_spark_writes_the_local_round_buckets_byte_for_byte(demo, spark, monkeypatch):
    """A round of several buckets (a small bucket size on the demo window): the executors write the same
    bucket files as the local engine, the driver holds none of the rows, and no scratch is left."""
    from segos_pipeline.evolution.engines import round_parts

    monkeypatch.setattr(round_parts, "ROUND_BUCKET_TRACES", 40)
    local, on_spark = rounds(demo, WINDOW, [make_engine(), spark_engine(spark)])
    names = round_part_names(on_spark["files"])
    assert len(names) == on_spark["engine"]["round_buckets"] > 2
    assert names == round_part_names(local["files"])
    assert_same_version(demo, local, on_spark)
    assert not any((demo.root / ".spark").rglob("*.parquet"))


def test_spark_reads_a_folder_of_parquet_parts(demo, spark, tmp_path):
    """A window stored as several Parquet files gives the same round as the single table."""
    traces = TraceStore(demo).load(WINDOW)
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, part in enumerate(split_by_task(traces, 3)):
        part.write_parquet(folder / f"part-{i:05d}.parquet")
    (folder / "quarantine.jsonl").write_text("{}\n")  # other files in the folder are not read
    parent = demo.load(demo.list_versions()[0]["version"])
    config = EvolutionConfig(l3_descriptions=False)
    from segos_pipeline.evolution.round import evolve_round

    whole = evolve_round(parent, traces, config)
    parts = evolve_round(parent, str(folder), config, engine=spark_engine(spark, partitions=2))
    local_parts = evolve_round(parent, str(folder), config, engine=make_engine())
    for state in (parts, local_parts):
        assert state.selected is None  # read from files: the engines keep what the round added only
        assert state.added.equals(whole.added)
        assert state.edges.equals(whole.edges)
        assert state.counters == whole.counters


def test_spark_reconstructs_retrieval_on_the_executors(demo, spark, tmp_path):
    """Traces without recorded retrieval are replayed against the parent on the executors, as locally."""
    traces = (
        TraceStore(demo)
        .load(WINDOW)
        .with_columns(
            pl.col("queries").list.eval(
                pl.struct(
                    pl.element().struct.field("text"),
                    retrieved=pl.lit(None, dtype=pl.List(pl.String)),
                    seeds=pl.lit(None, dtype=pl.List(pl.String)),
                )
            )
        )
    )
    path = tmp_path / "bare.parquet"
    traces.write_parquet(path)
    parent = demo.load(demo.list_versions()[0]["version"])
    config = EvolutionConfig(l3_descriptions=False)
    from segos_pipeline.evolution.round import evolve_round

    local = evolve_round(parent, traces, config)
    remote = evolve_round(parent, str(path), config, engine=spark_engine(spark))
    assert local.counters["traces"]["retrieval_reconstructed"] == local.counters["traces"]["selected"] > 0
    assert remote.selected is None and remote.added.equals(local.added)
    assert remote.added["queries"].is_not_null().all()  # the reconstructed retrieval is what it adds
    assert remote.edges.equals(local.edges) and remote.counters == local.counters


def test_cli_evolve_engine_spark(demo, spark):
    """`segos evolve --engine spark` commits the version `segos evolve` does (the session is reused)."""
    parent = demo.list_versions()[0]["version"]
    runner = CliRunner()
    common = ["evolve", "--store", str(demo.root), "--window", WINDOW, "--from", parent, "--json", "--quiet"]
    local = json.loads(runner.invoke(cli, common, catch_exceptions=False).stdout)
    res = runner.invoke(cli, [*common, "--engine", "spark", "--partitions", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    on_spark = json.loads(res.stdout)
    assert on_spark["engine"]["engine"] == "spark"
    assert_same_version(demo, local, on_spark)
    bad = runner.invoke(cli, [*common, "--spark-master", "local[1]"])
    assert bad.exit_code != 0 and "--engine spark" in bad.output


# ------------------------------------------------------------------------------------------ real traces


@pytest.mark.shared
def test_spark_equals_local_on_real_apibank_traces(shared_data, spark, tmp_path):
    source = shared_data / "traces" / "apibank" / "level-3.json"
    write_library(source, "apibank", tmp_path / "lib")
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(tmp_path / "lib", store)
    TraceStore(store).ingest(iter_records(source, "apibank"), window="api-l3")
    local, on_spark = rounds(store, "api-l3", [make_engine(), spark_engine(spark)])
    assert local["counters"]["traces"]["real"] > 0
    assert_same_version(store, local, on_spark)


@pytest.mark.shared
@pytest.mark.slow
def test_spark_equals_local_on_real_skillsbench_trials(shared_data, spark, tmp_path):
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(shared_data / "skills", store)
    trials = shared_data / "traces" / "skillsbench-trials" / "dev.jsonl"
    queries = shared_data / "eval" / "skillsbench-dev.jsonl"
    TraceStore(store).ingest(iter_records(trials, "skillsbench-trials", queries=queries), window="sb-dev")
    local, on_spark = rounds(store, "sb-dev", [make_engine(), spark_engine(spark, partitions=4)])
    assert local["counters"]["traces"]["real"] > 0
    assert_same_version(store, local, on_spark)


@pytest.mark.shared
def test_spark_equals_local_on_real_apibank_traces_in_a_uri_store(shared_data, spark, tmp_path):
    """The cluster path (parent and window opened by the executors at a `file://` URI) on real traces."""
    source = shared_data / "traces" / "apibank" / "level-3.json"
    write_library(source, "apibank", tmp_path / "lib")
    uri = (tmp_path / "remote").as_uri()
    writer = RemoteStore(uri, tmp_path / "writer")
    parent = build_cold_start(tmp_path / "lib", writer)["version"]
    TraceStore(writer).ingest(iter_records(source, "apibank"), window="api-l3")
    driver, local = RemoteStore(uri, tmp_path / "driver"), RemoteStore(uri, tmp_path / "local")
    engine = spark_engine(spark, executor_cache=str(tmp_path / "executors"))
    on_spark = evolve(driver, "api-l3", parent, engine=engine)
    locally = evolve(local, "api-l3", parent, engine=make_engine())
    assert locally["counters"]["traces"]["real"] > 0
    assert_same_round_in_two_stores(driver, on_spark, local, locally)
    assert on_spark["window_files"] == locally["window_files"]
    assert not list(driver.root.glob("traces/**/*.parquet"))


def test_engine_input_errors(tmp_path):
    from segos_pipeline.evolution.engines.spark_window import read_window

    with pytest.raises(ValueError, match="unknown engine"):
        make_engine(EngineConfig(engine="flink"))
    with pytest.raises(FileNotFoundError, match="no trace table"):
        read_window(None, tmp_path / "absent")


# ------------------------------------------------------------------------------------------------ Dagster


@pytest.mark.filterwarnings("ignore:Parameter `data_version`")
def test_dagster_round_on_spark_commits_the_local_version(spark, tmp_path):
    """The evolution assets with the engine resource set to Spark: same version, Spark metrics attached."""
    dagster = pytest.importorskip("dagster", reason="the dagster extra is not installed")
    from assets.definitions import ASSETS
    from assets.resources import EngineSettings, build_resources
    from segos_pipeline.paths import DEMO_TRACES

    window = "2026-11-27"
    records = {}
    for name, engine in (
        ("local", EngineSettings()),
        ("spark", EngineSettings(engine="spark", partitions=2)),
    ):
        resources = build_resources(tmp_path / name, landing_dir=DEMO_TRACES, engine=engine)
        instance = dagster.DagsterInstance.ephemeral()
        for selection, pk in ((dagster.AssetSelection.groups("cold_start"), None), (None, window)):
            result = dagster.materialize(
                ASSETS,
                selection=selection or dagster.AssetSelection.groups("evolution"),
                partition_key=pk,
                instance=instance,
                resources=resources,
            )
            assert result.success
        [mat] = [
            m
            for m in result.get_asset_materialization_events()
            if m.asset_key == dagster.AssetKey("graph_snapshot")
        ]
        records[name] = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert records["spark"]["engine"]["engine"] == "spark"
    assert records["spark"]["engine"]["partitions"] == 2
    assert records["local"]["engine"]["engine"] == "local"
    stores = {name: SnapshotStore(tmp_path / name) for name in records}
    a, b = (stores[n].manifest(records[n]["version"]) for n in ("local", "spark"))
    assert_same_round_in_two_stores(stores["local"], a, stores["spark"], b)


# ------------------------------------------------------------------- a store on a URI, as on a cluster


@pytest.fixture
def uri_store(tmp_path) -> tuple[str, str, dict[str, Any]]:
    """A store behind `file://` written from one cache: a cold start, the demo windows, and a round on
    window 2026-11-27 (so the next round's parent references window files, which executors must not
    download). Returns (uri, cold-start id, that round's manifest)."""
    uri = (tmp_path / "remote").as_uri()
    writer = RemoteStore(uri, tmp_path / "writer")
    cold = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    TraceStore(writer).ingest_path(DEMO_TRACES)
    first = evolve(writer, "2026-11-27", cold)
    assert first["window_files"]
    return uri, cold, first


def test_executors_open_a_uri_store_by_its_uri(spark, uri_store, tmp_path):
    """The executors download the parent into their own cache folder (not the driver's), without the
    parent's window files, and the round equals the local engine's round from a third cache."""
    uri, _, first = uri_store
    executors = tmp_path / "executors"
    driver = RemoteStore(uri, tmp_path / "driver")
    engine = spark_engine(spark, executor_cache=str(executors))
    on_spark = evolve(driver, "2026-11-28", first["version"], engine=engine)
    local = RemoteStore(uri, tmp_path / "local")
    locally = evolve(local, "2026-11-28", first["version"], engine=LocalEngine())
    assert_same_round_in_two_stores(driver, on_spark, local, locally)

    cache = cache_folder(uri, executors)
    assert cache != driver.root
    parent_copy = cache / "versions" / first["version"]
    for name, meta in json.loads((parent_copy / MANIFEST).read_text())["files"].items():
        assert sha256_file(parent_copy / name) == meta["sha256"]
    assert sorted(p.name for p in cache.glob("versions/*")) == [first["version"]]  # the parent only
    assert not list(cache.glob("traces/**/*.parquet"))  # the parent's window stayed at the URI

    # The window was read by the executors at the URI: the driver's cache never held it, yet the version
    # references its files by the hashes the executors computed, as the local engine's version does.
    assert not list(driver.root.glob("traces/2026-11-28/**/*.parquet"))
    assert list(local.root.glob("traces/2026-11-28/**/*.parquet"))  # the local engine downloaded it
    assert on_spark["window_files"] == locally["window_files"]
    assert on_spark["engine"]["traces"] == locally["counters"]["traces"]["in_window"]

    # What the round adds per selected trace was written by the partitions to a scratch folder at the URI
    # (read from there by the driver, then removed), not collected: collect() brought the pair tables and
    # metrics only.
    engine_record = on_spark["engine"]
    assert engine_record["added_rows"] == locally["counters"]["traces"]["selected"] > 0
    assert engine_record["written_parquet_bytes"]["added"] > 0
    assert engine_record["written_parquet_bytes"]["selected"] == 0  # the version references the window
    shipped = set(engine_record["shipped_tables"])
    assert shipped == {"workflow", "ordered", "couse", "surfacing", "counts"}
    assert engine_record["collected_bytes"] >= engine_record["payload_bytes"]
    # The round's bucket files were written by the executors at the URI (nothing in the driver's cache
    # but the version), and the driver read back L3's and the experience stage's tables only, never `added`.
    assert engine_record["round_buckets"] == 1 and round_part_names(on_spark["files"]) == [
        "round-00000.parquet"
    ]
    written = engine_record["written_parquet_bytes"]
    assert engine_record["driver_read_bytes"] == sum(
        written[k] for k in ("witnesses", "usage", "experience", "holdout")
    )
    assert not list((driver.root / ".spark").glob("*/*"))
    assert not list((tmp_path / "remote" / ".spark").glob("*/*"))


def test_a_store_in_this_process_only_is_refused_before_spark_starts(tmp_path):
    """`memory://` lives in the driver's process: the Spark engine says so instead of failing on the
    executors (no session is needed to refuse)."""
    store = RemoteStore("memory://segos-spark-refusal/store", tmp_path / "cache")
    build_cold_start(DEFAULT_LIBRARY, store)
    engine = spark_engine(None)
    with pytest.raises(ValueError, match="lives in this process only"):
        engine.window_evidence(store.load(), pl.DataFrame(), EvolutionConfig(), RetrievalConfig())
    store.location.fs.rm("/segos-spark-refusal", recursive=True)
