"""The evolution round's Spark part launched from Dagster through Dagster Pipes.

`EngineSettings(engine="spark", launch="pipes")` makes `evolution_round` run `spark-submit
assets/pipes/spark_round.py` (Spark local[2], started by the test) through `PipesSubprocessClient`. The
version it commits must be the local engine's, and the `graph_snapshot` materialization must carry the
Spark job's metrics as reported by that external process.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.config import EngineConfig, EvolutionConfig, RetrievalConfig
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.engines.local import LocalEngine
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR, DEMO_TRACES

dagster = pytest.importorskip("dagster", reason="the dagster extra is not installed")
pytest.importorskip("dagster_pipes", reason="the dagster extra is not installed (dagster-pipes)")

from assets.pipes.spark_round import (  # noqa: E402  (after the skip: needs the dagster extra)
    EVIDENCE_TABLES,
    RESULT_JSON,
    extras_for,
    read_result,
    spark_metadata,
    write_result,
)
from assets.resources import EngineSettings, build_resources  # noqa: E402
from assets.spark_pipes import SCRIPT, SUBMIT_DEFAULTS, spark_submit_command, spark_submit_path  # noqa: E402

WINDOW = "2026-11-27"


def spark_missing() -> str | None:
    """Why the Spark end-to-end tests cannot run here, or None."""
    import importlib.util

    for module in ("pyspark", "pandas"):
        if importlib.util.find_spec(module) is None:
            return f"the spark extra is not installed ({module} missing)"
    if shutil.which("java") is None and not __import__("os").environ.get("JAVA_HOME"):
        return "no Java (JAVA_HOME unset, no `java` on PATH): spark-submit needs Java 17"
    return None


needs_spark = pytest.mark.skipif(spark_missing() is not None, reason=str(spark_missing()))


# ------------------------------------------------------------------------------------------ settings


def test_launch_setting_is_checked_before_the_round():
    assert EngineSettings().launch_mode() == "in_process"  # the default is unchanged
    assert EngineSettings(engine="spark", launch="pipes").launch_mode() == "pipes"
    with pytest.raises(ValueError, match="unknown launch 'yarn'"):
        EngineSettings(engine="spark", launch="yarn").launch_mode()
    with pytest.raises(ValueError, match="set engine='spark'"):
        EngineSettings(launch="pipes").launch_mode()
    conf = EngineSettings(engine="spark", spark_conf={"spark.executor.memory": "8g"}).config()
    assert conf.spark_conf == {"spark.executor.memory": "8g"}


def test_evolution_job_takes_the_launch_as_run_config():
    """What a user pastes into the launchpad (docs/dagster.md) is valid config of evolution_job."""
    from assets.definitions import defs

    job = defs.resolve_job_def("evolution_job")
    settings = {"engine": "spark", "launch": "pipes", "spark_master": "local[2]", "partitions": 4}
    settings["spark_conf"] = {"spark.executor.memory": "8g"}
    dagster.validate_run_config(job, {"resources": {"engine_settings": {"config": settings}}})
    with pytest.raises(dagster.DagsterInvalidConfigError, match="laucnh"):
        dagster.validate_run_config(job, {"resources": {"engine_settings": {"config": {"laucnh": "pipes"}}}})


def test_spark_submit_command(monkeypatch, tmp_path):
    submit = tmp_path / "spark-submit"
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    cmd = spark_submit_command(submit, "local[2]", {"spark.sql.shuffle.partitions": "2"})
    assert cmd[:3] == [str(submit), "--master", "local[2]"]
    assert cmd[-1] == str(SCRIPT) and SCRIPT.is_file()
    confs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")
    assert confs == {**SUBMIT_DEFAULTS, "spark.sql.shuffle.partitions": "2"}  # the user's setting wins
    assert spark_submit_command(submit, None, {})[1:3] == ["--master", "local[*]"]
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example:15002")
    assert spark_submit_command(submit, None, {})[1:3] == ["--remote", "sc://spark.example:15002"]
    assert spark_submit_command(submit, "spark://h:7077", {})[1:3] == ["--master", "spark://h:7077"]


def test_spark_submit_is_found_or_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a file"):
        spark_submit_path(str(tmp_path / "absent" / "spark-submit"))
    mine = tmp_path / "spark-submit"
    mine.write_text("#!/bin/sh\n")
    assert spark_submit_path(str(mine)) == mine  # a cluster's own Spark installation
    if spark_missing() is None:  # the one PySpark ships, the default
        assert spark_submit_path(None).name == "spark-submit" and spark_submit_path(None).is_file()


# ----------------------------------------------------------------------------------- result folder


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> SnapshotStore:
    store = SnapshotStore(tmp_path_factory.mktemp("pipes-demo"))
    build_cold_start(DEFAULT_LIBRARY, store)
    TraceStore(store).ingest(iter_records(DEMO_DIR / "traces" / f"{WINDOW}.jsonl", "native"), window=WINDOW)
    return store


def test_result_folder_round_trip(demo, tmp_path):
    """What the Spark process writes is what the asset reads: every table, count, timing and metric."""
    parent = demo.load(demo.list_versions()[0]["version"])
    traces = TraceStore(demo).load(WINDOW)
    result = LocalEngine(EngineConfig(partitions=3)).window_evidence(
        parent, traces, EvolutionConfig(), RetrievalConfig()
    )
    assert result.selected.height > 0 and result.evidence.workflow.height > 0  # a round with evidence
    write_result(result, tmp_path / "out")
    back = read_result(tmp_path / "out")
    assert back.selected.equals(result.selected) and back.selected.schema == result.selected.schema
    for name in EVIDENCE_TABLES:
        a, b = getattr(back.evidence, name), getattr(result.evidence, name)
        assert a.schema == b.schema and a.equals(b), name
    assert back.evidence.counts == result.evidence.counts
    assert (back.timings, back.metrics) == (result.timings, result.metrics)

    # A window read from its files (what the assets pass): no selected traces, the files and the per-trace
    # `added` table come back instead.
    files = TraceStore(demo).files(WINDOW)
    from_files = LocalEngine(EngineConfig(partitions=3)).window_evidence(
        parent, files, EvolutionConfig(), RetrievalConfig()
    )
    assert from_files.selected is None and from_files.round_parts is not None
    added = from_files.round_parts.read()
    assert added.height > 0
    write_result(from_files, tmp_path / "files")
    back = read_result(tmp_path / "files")
    assert back.selected is None and back.files == from_files.files
    # the bucket files stay on the store for the asset to commit: the result names them
    assert back.round_parts is not None and back.round_parts.read().equals(added)
    for name in EVIDENCE_TABLES:
        assert getattr(back.evidence, name).equals(getattr(from_files.evidence, name)), name

    (tmp_path / "out" / RESULT_JSON).unlink()  # a process that died before its last write
    with pytest.raises(FileNotFoundError, match="did not finish"):
        read_result(tmp_path / "out")


def test_extras_are_json_and_rebuild_the_settings():
    import json

    evolution = EvolutionConfig(pool_attempts=True, surfaced_min=5)
    retrieval = RetrievalConfig(top_n=7)
    engine = EngineConfig(engine="spark", partitions=4, spark_conf={"a": "b"})
    extras = json.loads(
        json.dumps(
            extras_for(
                store="s",
                parent="v1",
                window=WINDOW,
                traces="t",
                engine=engine,
                evolution=evolution,
                retrieval=retrieval,
                out="o",
                report_to="graph_snapshot",
            )
        )
    )
    assert EvolutionConfig().with_overrides(**extras["evolution"]) == evolution
    assert RetrievalConfig(**extras["retrieval"]) == retrieval
    assert EngineConfig(**extras["engine"]) == engine


def test_spark_metadata_keeps_the_plotted_numbers_as_numbers():
    meta = spark_metadata(
        {"engine": "spark", "master": "local[2]", "job_s": 1.5, "partitions": 2, "launch": "pipes"}
    )
    assert meta["spark.job_s"] == {"raw_value": 1.5, "type": "float"}
    assert meta["spark.partitions"] == {"raw_value": 2, "type": "int"}
    assert meta["engine"]["type"] == "json" and meta["engine"]["raw_value"]["master"] == "local[2]"
    assert "spark.worker_peak_rss_mb_max" not in meta  # not measured: not invented


# ------------------------------------------------------------------------------- through Dagster


def materialize_window(store: Path, engine: EngineSettings) -> tuple[Any, Any]:
    """Cold start, then the evolution group for WINDOW, in one ephemeral instance."""
    from assets.definitions import ASSETS

    resources = build_resources(store, landing_dir=DEMO_TRACES, engine=engine)
    instance = dagster.DagsterInstance.ephemeral()
    cold = dagster.materialize(
        ASSETS, selection=dagster.AssetSelection.groups("cold_start"), instance=instance, resources=resources
    )
    assert cold.success
    result = dagster.materialize(
        ASSETS,
        selection=dagster.AssetSelection.groups("evolution"),
        partition_key=WINDOW,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    return result, instance


def snapshot_metadata(result: Any) -> dict[str, Any]:
    [mat] = [
        m
        for m in result.get_asset_materialization_events()
        if m.asset_key == dagster.AssetKey("graph_snapshot")
    ]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


@needs_spark
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Parameter `data_version`")
@pytest.mark.filterwarnings("ignore:AssetExecutionContext.run_id is deprecated")  # Dagster's Pipes code
@pytest.mark.filterwarnings("ignore:Function `PipesMessageReader.expected_writer_count`")
def test_pipes_round_commits_the_local_version_with_spark_metrics(tmp_path):
    from tests.integration.test_spark import assert_same_round_in_two_stores

    local, _ = materialize_window(tmp_path / "local", EngineSettings())
    assert local.success
    pipes_settings = EngineSettings(
        engine="spark",
        launch="pipes",
        spark_master="local[2]",
        partitions=2,
        spark_conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    piped, instance = materialize_window(tmp_path / "pipes", pipes_settings)
    assert piped.success

    records = {"local": snapshot_metadata(local), "pipes": snapshot_metadata(piped)}
    stores = {name: SnapshotStore(tmp_path / name) for name in records}
    a, b = (stores[n].manifest(records[n]["version"]) for n in ("local", "pipes"))
    assert_same_round_in_two_stores(stores["local"], a, stores["pipes"], b)

    # The Spark job's metrics, as the external process reported them over Pipes.
    meta = records["pipes"]
    traces = TraceStore(stores["pipes"]).load(WINDOW).height
    assert meta["engine"]["engine"] == "spark" and meta["engine"]["launch"] == "pipes"
    assert meta["engine"]["partitions"] == 2 and meta["spark.partitions"] == 2
    assert meta["spark.traces"] == traces == meta["traces"]
    assert meta["spark.master"] == "local[2]"
    assert str(meta["spark.application_id"]).startswith("local-")
    assert meta["spark.job_s"] > 0 and meta["spark.worker_peak_rss_mb_max"] > 0
    assert meta["spark.shuffle_input_bytes"] > 0
    assert "spark.job_s" not in records["local"]
    # The manifest records the same engine record (with the whole process's time added on this side).
    assert b["engine"]["application_id"] == meta["spark.application_id"]
    assert b["engine"]["process_s"] >= meta["spark.job_s"]

    # Its log lines came back over Pipes too, and its result folder is gone.
    messages = [e.user_message for e in instance.all_logs(piped.run_id)]
    assert any("Spark job done" in m for m in messages)
    assert any(f"evidence of window {WINDOW}" in m for m in messages)
    assert not list((tmp_path / "pipes" / ".spark").glob("pipes-*"))

    # Downstream assets read the version the round committed.
    diff = [
        m for m in piped.get_asset_materialization_events() if m.asset_key == dagster.AssetKey("edge_diff")
    ]
    assert diff and diff[0].materialization.metadata["to"].value == b["version"]


@needs_spark
@pytest.mark.filterwarnings("ignore:Parameter `data_version`")
@pytest.mark.filterwarnings("ignore:AssetExecutionContext.run_id is deprecated")  # Dagster's Pipes code
@pytest.mark.filterwarnings("ignore:Function `PipesMessageReader.expected_writer_count`")
def test_a_failed_spark_process_commits_nothing(tmp_path):
    """spark-submit refusing its master: the step fails, no version is committed, no result is left."""
    settings = EngineSettings(engine="spark", launch="pipes", spark_master="nowhere://x", partitions=2)
    result, _ = materialize_window(tmp_path / "store", settings)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "External execution process failed" in str(failure.step_failure_data.error)
    kinds = [v["kind"] for v in SnapshotStore(tmp_path / "store").list_versions()]
    assert kinds == ["cold_start"]  # only the cold start: the round committed nothing
    assert not list((tmp_path / "store" / ".spark").glob("pipes-*"))
