"""The Dagster code location: definitions, the cold-start chain and two consecutive evolution windows
materialized on the demo data shipped in `segos_pipeline/demo` with an ephemeral instance, checks,
automation, and the CLI reading what Dagster committed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from dagster import (
    AssetKey,
    AssetSelection,
    DagsterInstance,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    SkipReason,
    build_output_context,
    build_schedule_context,
    build_sensor_context,
    materialize,
)

from assets.automation import due_windows, trace_landing_sensor
from assets.checks import check_edges
from assets.definitions import ASSETS, defs
from assets.evolution import windows
from assets.io_managers import SegosIOManager
from assets.resources import SegosPaths, build_resources
from segos_pipeline.evaluation.synthetic import generate_library
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_TRACES
from segos_pipeline.store.layout import sha256_file
from segos_pipeline.store.served import served
from segos_pipeline.store.snapshot import SnapshotStore

from ..conftest import demo_library_with_malformed, simple_library

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout

# Outputs carry data versions on purpose (a beta parameter); the schedule helper uses a deprecated call
# inside Dagster itself. Neither is ours to fix.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Parameter `data_version`"),
    pytest.mark.filterwarnings("ignore:Function `.*run_request_for_partition`"),
]

W1, W2 = "2026-11-27", "2026-11-28"
COLD = AssetSelection.groups("cold_start")
EVOLUTION = AssetSelection.groups("evolution")
BIN = Path(sys.executable).parent


def run(
    selection: AssetSelection, resources: dict[str, Any], instance: DagsterInstance, pk: str | None = None
):
    result = materialize(
        ASSETS, selection=selection, partition_key=pk, instance=instance, resources=resources
    )
    assert result.success
    return result


def metadata(result: Any, asset: str) -> dict[str, Any]:
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key == AssetKey(asset)]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Cold start, then windows 2026-11-27 and 2026-11-28, into a tmp store (the demo data as input; the
    demo traces folder serves as landing folder, read only)."""
    store = tmp_path_factory.mktemp("dagster-store")
    resources = build_resources(store, landing_dir=DEMO_TRACES)
    instance = DagsterInstance.ephemeral()
    t0 = time.perf_counter()
    cold = run(COLD, resources, instance)
    w1 = run(EVOLUTION, resources, instance, W1)
    w2 = run(EVOLUTION, resources, instance, W2)
    return {
        "store": store,
        "resources": resources,
        "instance": instance,
        "cold": cold,
        "w1": w1,
        "w2": w2,
        "seconds": time.perf_counter() - t0,
    }


def test_definitions_load() -> None:
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        "skill_nodes",
        "semantic_edges",
        "transition_matrix",
        "cold_start_snapshot",
        "traces",
        "topology_update",
        "edge_weights",
        "descriptions",
        "graph_snapshot",
        "edge_diff",
        "replay_report",
    }
    for key in graph.get_all_asset_keys():
        assert graph.get(key).code_version, f"{key} has no code_version"
    # the self-dependency: each window's graph depends on the previous window's graph
    assert AssetKey("graph_snapshot") in graph.get(AssetKey("graph_snapshot")).parent_keys
    assert graph.get(AssetKey("graph_snapshot")).partitions_def == windows
    assert defs.resolve_job_def("cold_start_job") and defs.resolve_job_def("evolution_job")
    assert defs.resolve_schedule_def("nightly_evolution").default_status == DefaultScheduleStatus.STOPPED
    assert defs.resolve_sensor_def("trace_landing_sensor").default_status == DefaultSensorStatus.STOPPED


def test_every_asset_has_kinds_owners_and_tags_and_the_tables_declare_columns() -> None:
    from assets.metadata import OWNERS
    from segos_pipeline.evolution.descriptions import REVISION_SCHEMA
    from segos_pipeline.evolution.traces import TRACE_SCHEMA
    from segos_pipeline.graph.edges import EDGE_SCHEMA
    from segos_pipeline.graph.parsing import NODE_SCHEMA

    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.kinds and node.kinds <= {"polars", "parquet", "scipy", "json"}, key
        assert list(node.owners) == OWNERS, key
        assert {"segos/stage", "segos/layer"} <= set(node.tags), key
    declared = {
        key.to_user_string(): graph.get(key).metadata["dagster/column_schema"]
        for key in graph.get_all_asset_keys()
        if "dagster/column_schema" in graph.get(key).metadata
    }
    expected = {
        "skill_nodes": NODE_SCHEMA,
        "semantic_edges": EDGE_SCHEMA,
        "traces": TRACE_SCHEMA,
        "topology_update": EDGE_SCHEMA,
        "edge_weights": EDGE_SCHEMA,
        "descriptions": REVISION_SCHEMA,
    }
    assert set(declared) == set(expected)
    for name, schema in expected.items():  # the library's own schemas, column for column
        assert [c.name for c in declared[name].columns] == list(schema), name
        assert [c.type for c in declared[name].columns] == [str(t) for t in schema.values()], name
        # each column with its meaning from docs/data-contracts.md
        assert all(c.description for c in declared[name].columns), (name, declared[name].columns)
    notes = {c.name: c.description for c in declared["traces"].columns}
    assert notes["used"] == "skill ids the agent used, in first-use order"
    assert {c.name: c.description for c in declared["skill_nodes"].columns}["problems"] == (
        "problem codes (the build report has the details)"  # backticks and links made plain
    )
    snapshot = graph.get(AssetKey("graph_snapshot"))  # the nightly one: stale after a missed night
    assert snapshot.freshness_policy is not None
    assert snapshot.freshness_policy.warn_window.to_timedelta().total_seconds() == 25 * 3600
    assert snapshot.freshness_policy.fail_window.to_timedelta().total_seconds() == 49 * 3600


def test_descriptions_say_the_thing_without_citing_the_spec() -> None:
    """Users do not have the specification: asset and check descriptions stand on their own."""
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        text = graph.get(key).description or ""
        assert len(text) > 40 and "SPEC" not in text and "(stage " not in text, (key, text)
    for spec in graph.asset_check_keys:
        text = graph.get_check_spec(spec).description or ""
        assert text and "SPEC" not in text, (spec, text)
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert "dg check" not in readme, "the README must not advertise `dg`: no extra installs it"


def test_column_tables_are_read_from_the_data_contracts() -> None:
    from assets.metadata import contract_columns

    text = "## The x table (`x.parquet`)\n\n| column | type | meaning |\n|---|---|---|\n"
    text += "| `a`, `b` | str | the [thing](y.md) `z` |\n| `c` | int | count |\n\nafter\n| `d` | e |\n"
    assert contract_columns(text) == {
        "The x table (`x.parquet`)": {"a": "the thing z", "b": "the thing z", "c": "count"}
    }


def test_workspace_validates(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}  # keep validate's temp instance out of the repo
    proc = subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful" in proc.stdout + proc.stderr


def test_dg_loads_the_project(tmp_path: Path) -> None:
    """`dg` (dagster-dg-cli, pinned with Dagster; not in any extra) sees the project through the
    `[tool.dg]` section of pyproject.toml."""
    if not (BIN / "dg").is_file():
        pytest.skip("dg is not installed (pip install 'dagster-dg-cli==1.13.27')")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(BIN / "dg"), "check", "defs"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All definitions loaded successfully" in proc.stdout + proc.stderr


def test_windows_chain_versions(pipeline: dict[str, Any]) -> None:
    store = SnapshotStore(pipeline["store"])
    cold, v1, v2 = store.list_versions()
    assert (cold["kind"], v1["kind"], v2["kind"]) == ("cold_start", "evolved", "evolved")
    assert v1["parent"] == cold["version"] and v1["window"] == W1 and v1["round"] == 1
    assert v2["parent"] == v1["version"] and v2["window"] == W2 and v2["round"] == 2
    assert v2["orchestrator"]["partition"] == W2
    # a Dagster round commits through the CLI round's call: each extends the served version and passed its
    # held-out check, so each is served in turn (store/served.py)
    assert served(store) == v2["version"]
    # the version records the assets passed along name the same versions
    snap_meta = metadata(pipeline["w2"], "graph_snapshot")
    assert snap_meta["version"] == v2["version"] and snap_meta["parent"] == v1["version"]
    assert metadata(pipeline["cold"], "cold_start_snapshot")["version"] == cold["version"]
    # the records the assets pass land inside the store, next to the versions
    base = pipeline["store"] / "dagster"
    assert json.loads((base / "graph_snapshot" / f"{W2}.json").read_text())["version"] == v2["version"]
    window = json.loads((base / "traces" / f"{W2}.json").read_text())
    assert window["traces"] == metadata(pipeline["w2"], "traces")["dagster/row_count"] > 0
    assert all((pipeline["store"] / f["path"]).is_file() for f in window["files"])  # the store's own files
    assert pipeline["seconds"] < 60


def test_nothing_under_store_dagster_copies_the_store(pipeline: dict[str, Any]) -> None:
    """After a cold start and two windows, STORE/dagster/ holds only small JSON records: no table, matrix
    or trace file, and no file equal to one the store holds (a version's or a window's)."""
    root = pipeline["store"]
    records = [p for p in (root / "dagster").rglob("*") if p.is_file()]
    assert {p.parent.name for p in records} >= {"cold_start_snapshot", "traces", "edge_weights"}
    assert all(p.suffix == ".json" for p in records), sorted(map(str, records))
    assert max(p.stat().st_size for p in records) < 16_384
    assert not any(p.read_bytes().startswith(b"PAR1") for p in records)
    held = {
        sha256_file(p) for folder in ("versions", "traces") for p in (root / folder).rglob("*") if p.is_file()
    }
    assert not [p for p in records if sha256_file(p) in held]


def test_io_manager_refuses_a_table(tmp_path: Path) -> None:
    """A table handed to the IO manager is an asset's bug: refused by name, nothing written."""
    manager = SegosIOManager(store_root=str(tmp_path / "store"))
    context = build_output_context(asset_key=AssetKey("semantic_edges"))
    with pytest.raises(
        TypeError, match=r"semantic_edges passed a DataFrame: .* belong in the snapshot store"
    ):
        manager.handle_output(context, {"counts": 3, "edges": pl.DataFrame({"src": ["a"]})})
    assert not (tmp_path / "store" / "dagster").exists()
    manager.handle_output(context, {"edges": 3})
    assert json.loads((tmp_path / "store" / "dagster" / "semantic_edges" / "__all__.json").read_text()) == {
        "edges": 3
    }


def segos_build(library: Path, store: Path) -> str:
    """`segos build LIBRARY --store STORE` in a subprocess of this checkout: the version id it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", "build", str(library), "--store", str(store), "--quiet"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_cold_start_job_commits_the_version_segos_build_commits(pipeline, tmp_path: Path) -> None:
    """`cold_start_job` and `segos build` run the same stages (the parse workers' tokens, the same
    commit): the same library gives the same version id, on the demo and on a generated library."""
    [cold] = [m for m in SnapshotStore(pipeline["store"]).list_versions() if m["kind"] == "cold_start"]
    assert segos_build(DEFAULT_LIBRARY, tmp_path / "cli-demo") == cold["version"]

    library = tmp_path / "generated"
    generate_library(library, 400, seed=11, workers=1)
    resources = build_resources(tmp_path / "dagster-generated", library_root=library)
    result = run(COLD, resources, DagsterInstance.ephemeral())
    version = metadata(result, "cold_start_snapshot")["version"]
    assert segos_build(library, tmp_path / "cli-generated") == version
    assert metadata(result, "skill_nodes")["dagster/row_count"] == 400


def test_metadata_and_diff(pipeline: dict[str, Any]) -> None:
    nodes = metadata(pipeline["cold"], "skill_nodes")
    assert nodes["dagster/row_count"] == 60 and nodes["problems"] == 0  # the shipped demo is clean
    edges = metadata(pipeline["cold"], "semantic_edges")
    assert edges["dagster/row_count"] > 0 and edges["stats"]["unordered_pairs"] > 0
    assert edges["stats"]["max_degree"] >= 1
    assert metadata(pipeline["cold"], "transition_matrix")["nnz"] > 0

    traces = metadata(pipeline["w2"], "traces")
    assert traces["dagster/row_count"] > 0 and traces["quarantine_reasons"]
    assert traces["ingest"]["accepted"] > 0 and traces["ingest"]["quarantined"] > 0
    l1 = metadata(pipeline["w1"], "topology_update")
    assert {"workflow", "avoid", "dependency"} <= set(l1["counters"])
    assert "induced" in l1["counters"]["workflow"] and "blocked_by_zeta" in l1["counters"]["dependency"]
    assert "edges_reinforced" in metadata(pipeline["w2"], "edge_weights")["counters"]
    assert "committed" in metadata(pipeline["w1"], "descriptions")

    for window in ("w1", "w2"):
        # materialization row counts on every table asset
        for name in ("traces", "topology_update", "edge_weights", "descriptions"):
            assert isinstance(metadata(pipeline[window], name)["dagster/row_count"], int), (window, name)
        diff = metadata(pipeline[window], "edge_diff")
        counts = diff["counts"]
        assert counts["added"] + counts["removed"] + counts["reweighted"] > 0, "the diff must not be empty"
        largest = diff["largest_changes"]
        assert [c.name for c in largest.schema.columns] == [
            "change",
            "relation",
            "src",
            "dst",
            "before",
            "after",
        ]
        assert 0 < len(largest.records) <= 15
        assert all(r.data["change"] in ("added", "removed", "reweighted") for r in largest.records)
        learned = diff["learned"]  # what skills learned this window, per skill
        assert [c.name for c in learned.schema.columns] == [
            "skill",
            "requests",
            "tasks_before",
            "tasks_after",
            "example",
        ]
        assert 0 < len(learned.records) <= 15 and all(r.data["requests"] > 0 for r in learned.records)
        assert counts["experience"] >= sum(r.data["requests"] for r in learned.records)
        snap = metadata(pipeline[window], "graph_snapshot")
        assert snap["traces"] > 0 and any(k.startswith("edges.") for k in snap)
        report = metadata(pipeline[window], "replay_report")
        for metric in ("recall@5", "comp@5"):  # the plotted numbers, rounded
            assert isinstance(report[metric], float) and 0.0 <= report[metric] <= 1.0
            assert report[metric] == round(report[metric], 4)
        assert 0.0 <= report["replay"]["hit@5"] <= 1.0 and isinstance(report["replay"]["mrr"], float)
        methods = [r.data["method"] for r in report["versus_baselines"].records]
        assert methods == ["version", "ppr", "lexical", "bm25"]


def test_cold_start_of_a_library_without_skills_commits_nothing(tmp_path: Path) -> None:
    """As `segos build` without --allow-empty: the step stops with the CLI's message, no version."""
    (tmp_path / "empty").mkdir()
    resources = build_resources(tmp_path / "store", library_root=tmp_path / "empty")
    result = materialize(
        ASSETS,
        selection=COLD,
        instance=DagsterInstance.ephemeral(),
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    failures = [str(e.event_specific_data) for e in result.all_events if e.is_step_failure]
    assert any("no skill packages (folders with a SKILL.md)" in f for f in failures), failures
    assert SnapshotStore(tmp_path / "store").list_versions() == []


def test_build_problems_are_a_table(tmp_path: Path) -> None:
    """The malformed fixture's problems show as a table with its schema (not Markdown) on skill_nodes."""
    library = demo_library_with_malformed(tmp_path / "lib")
    resources = build_resources(tmp_path / "store", library_root=library)
    result = run(COLD, resources, DagsterInstance.ephemeral())
    nodes = metadata(result, "skill_nodes")
    assert nodes["dagster/row_count"] == 69 and nodes["problems"] == 14
    problems = nodes["problems_table"]
    assert [c.name for c in problems.schema.columns] == ["severity", "file", "problem", "action"]
    assert len(problems.records) == 14
    assert {r.data["severity"] for r in problems.records} == {"error", "warning"}
    assert any(r.data["file"] == "_malformed/unsafe-yaml/SKILL.md" for r in problems.records)


def test_only_a_few_numbers_are_plotted(pipeline: dict[str, Any]) -> None:
    """Dagster draws a plot per numeric metadata entry: only the ones that matter are numbers."""
    for window in ("w1", "w2"):
        numeric = {
            (m.asset_key.to_user_string(), k)
            for m in (e.materialization for e in pipeline[window].get_asset_materialization_events())
            for k, v in m.metadata.items()
            if isinstance(v.value, int | float) and not isinstance(v.value, bool)
        }
        assert len(numeric) <= 16, sorted(numeric)
        assert {
            ("replay_report", "recall@5"),
            ("replay_report", "comp@5"),
            ("graph_snapshot", "traces"),
        } <= numeric
        for _asset, key in numeric:
            assert not key.startswith("eval.") and "." not in key.replace("edges.", ""), key


def test_checks_passed(pipeline: dict[str, Any]) -> None:
    expected = {
        "cold": {
            ("skill_nodes", "unique_skill_ids"),
            ("semantic_edges", "edge_invariants"),
            ("transition_matrix", "rows_stochastic_or_empty"),
            ("cold_start_snapshot", "manifest_hashes_match"),
        },
        "w2": {
            ("topology_update", "edge_invariants"),
            ("edge_weights", "edge_invariants"),
            ("descriptions", "unique_skill_ids"),
            ("graph_snapshot", "manifest_hashes_match"),
            ("graph_snapshot", "rows_stochastic_or_empty"),
        },
    }
    for run_name, wanted in expected.items():
        evaluations = pipeline[run_name].get_asset_check_evaluations()
        seen = {(e.asset_key.to_user_string(), e.check_name) for e in evaluations}
        assert wanted <= seen
        assert all(e.passed for e in evaluations)


def test_failing_check_is_reported() -> None:
    bad = pl.DataFrame(
        {"src": ["a"], "dst": ["a"], "relation": ["semantic"], "weight": [-1.0]},
    )
    result = check_edges("semantic_edges", bad, pl.Series(["a"]))
    assert not result.passed and result.metadata["self_loops"].value == 1


def test_cli_lists_dagster_versions(pipeline: dict[str, Any]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", "versions", "--store", str(pipeline["store"]), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [m["kind"] for m in listed] == ["cold_start", "evolved", "evolved"]
    assert listed[2]["parent"] == listed[1]["version"]


def test_stages_match_library_evolve(pipeline: dict[str, Any], tmp_path: Path) -> None:
    """The staged round commits what `segos evolve` would: same edges and nodes from the same inputs."""
    source = SnapshotStore(pipeline["store"])
    cold, v1, _ = source.list_versions()
    traces = TraceStore(source).load(W1)
    manifest = evolve(SnapshotStore(source.root), W1, from_version=cold["version"], traces=traces)
    ours, theirs = source.load(v1["version"]), source.load(manifest["version"])
    assert ours.edges.equals(theirs.edges)
    assert ours.nodes.equals(theirs.nodes)
    assert v1["counters"] == manifest["counters"]


def test_traces_reingest_is_idempotent(pipeline: dict[str, Any]) -> None:
    again = run(AssetSelection.assets("traces"), pipeline["resources"], pipeline["instance"], W2)
    meta = metadata(again, "traces")
    assert meta["ingest"]["accepted"] == 0 and meta["ingest"]["duplicates"] > 0


def test_window_without_traces_commits_nothing(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    resources = build_resources(tmp_path / "store", landing_dir=landing)
    instance = DagsterInstance.ephemeral()
    run(COLD, resources, instance)
    result = run(EVOLUTION, resources, instance, W1)
    assert metadata(result, "graph_snapshot")["committed"] is False
    assert metadata(result, "edge_diff")["counts"]["added"] == 0
    assert len(SnapshotStore(tmp_path / "store").list_versions()) == 1
    # a materialized no-op, not a missing partition: every asset of the window has it, saying 0 traces
    traces = metadata(result, "traces")
    assert traces["dagster/row_count"] == 0 and "0 new traces" in traces["note"]
    assert metadata(result, "graph_snapshot")["traces"] == 0
    for key in ("traces", "graph_snapshot", "edge_diff", "replay_report"):
        assert instance.get_materialized_partitions(AssetKey(key)) == {W1}, key


def test_landing_folder_follows_segos_landing_as_segos_mcp_does(tmp_path: Path, monkeypatch) -> None:
    """What agents record through `segos mcp` (default landing `$SEGOS_LANDING`) is what windows ingest."""
    monkeypatch.setenv("SEGOS_LANDING", str(tmp_path / "landing"))
    assert SegosPaths().landing_file(W1) == tmp_path / "landing" / f"{W1}.jsonl"
    assert SegosPaths(landing_dir="elsewhere").landing_path() == PROJECT_ROOT / "elsewhere"
    monkeypatch.delenv("SEGOS_LANDING")
    monkeypatch.delenv("SEGOS_STORE", raising=False)
    assert SegosPaths().landing_path() == PROJECT_ROOT / "data" / "store" / "landing"  # STORE/landing
    assert SegosPaths(store_root=str(tmp_path / "s")).landing_path() == tmp_path / "s" / "landing"
    monkeypatch.setenv("SEGOS_STORE", str(tmp_path / "env-store"))
    assert SegosPaths().landing_path() == tmp_path / "env-store" / "landing"


def _tick(paths: SegosPaths, instance: DagsterInstance, cursor: str | None = None) -> Any:
    return trace_landing_sensor(
        build_sensor_context(cursor=cursor, resources={"segos": paths}, instance=instance)
    )


def test_sensor_requests_new_and_changed_windows(tmp_path: Path) -> None:
    paths = SegosPaths(landing_dir=str(tmp_path))
    instance = DagsterInstance.ephemeral()
    (tmp_path / f"{W1}.jsonl").write_text("{}\n")
    (tmp_path / "README.md").write_text("not a window")
    (tmp_path / "2999-01-01.jsonl").write_text("{}\n")  # its day has not ended: no partition yet

    result = _tick(paths, instance)
    assert [r.partition_key for r in result.run_requests] == [W1]
    cursor = result.cursor
    assert "2999-01-01.jsonl" not in json.loads(cursor)

    again = _tick(paths, instance, cursor)
    assert isinstance(again, SkipReason) and "2999-01-01" in again.skip_message

    (tmp_path / f"{W2}.jsonl").write_text("{}\n")
    st = (tmp_path / f"{W1}.jsonl").stat()
    os.utime(tmp_path / f"{W1}.jsonl", (st.st_atime, st.st_mtime + 10))  # rewritten file
    changed = _tick(paths, instance, cursor)
    # W2 builds on W1, which is not materialized yet: it waits for a later tick (and says so)
    assert [r.partition_key for r in changed.run_requests] == [W1]
    assert f"{W2}.jsonl" not in json.loads(changed.cursor)


def test_sensor_first_tick_skips_windows_already_materialized(
    pipeline: dict[str, Any], tmp_path: Path
) -> None:
    """Turning the sensor on after the quick start does not re-run its windows (the served graph would
    go back to an older state while they re-run); a file rewritten afterwards is a new request."""
    landing = tmp_path / "landing"
    landing.mkdir()
    ingested = time.time() - 3600  # landed before the pipeline fixture's runs ingested them
    for window in (W1, W2):
        (landing / f"{window}.jsonl").write_bytes((DEMO_TRACES / f"{window}.jsonl").read_bytes())
        os.utime(landing / f"{window}.jsonl", (ingested, ingested))
    paths = SegosPaths(landing_dir=str(landing))
    first = _tick(paths, pipeline["instance"])
    assert not first.run_requests, [r.partition_key for r in first.run_requests]
    cursor = json.loads(first.cursor)
    assert set(cursor) == {f"{W1}.jsonl", f"{W2}.jsonl"}
    os.utime(landing / f"{W2}.jsonl", (time.time() + 10, time.time() + 10))  # rewritten since
    second = _tick(paths, pipeline["instance"], first.cursor)
    assert [r.partition_key for r in second.run_requests] == [W2]


def test_sensor_runs_days_without_traces_in_order() -> None:
    """A day without a landing file before a landed one runs as a no-op window, each window once its
    previous one is materialized, so the chain never waits on a missing partition."""
    keys = ["2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30", "2026-12-01"]
    files = {"2026-11-27.jsonl": 1.0, "2026-11-30.jsonl": 2.0}
    never: Any = lambda _w: None  # noqa: E731

    def tick(done: set[str], seen: dict[str, float]) -> list[tuple[str, str]]:
        due, _, _ = due_windows(keys, files, seen, done, never)
        return [(d.window, d.run_key) for d in due]

    assert tick(set(), {}) == [("2026-11-27", "2026-11-27:1.0")]
    seen = {"2026-11-27.jsonl": 1.0}
    assert tick({"2026-11-27"}, seen) == [("2026-11-28", "2026-11-28:no-traces")]
    assert tick({"2026-11-27", "2026-11-28"}, seen) == [("2026-11-29", "2026-11-29:no-traces")]
    assert tick({"2026-11-27", "2026-11-28", "2026-11-29"}, seen) == [("2026-11-30", "2026-11-30:2.0")]
    done = {"2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"}
    assert tick(done, {**seen, "2026-11-30.jsonl": 2.0}) == []  # after the newest file: nothing to run
    _, _, waiting = due_windows(keys, files, {}, set(), never)
    assert waiting == [
        "2026-11-28 (after 2026-11-27)",
        "2026-11-29 (after 2026-11-28)",
        "2026-11-30 (after 2026-11-29)",
    ]


def test_nightly_schedule_targets_the_day_that_ended() -> None:
    schedule = defs.resolve_schedule_def("nightly_evolution")
    tick = schedule.evaluate_tick(build_schedule_context(scheduled_execution_time=datetime(2026, 11, 29, 3)))
    assert [r.partition_key for r in tick.run_requests] == [W2]


def test_window_needs_the_previous_window(tmp_path: Path) -> None:
    """Window 2 before window 1 fails loudly (no silent fallback to the cold start), committing nothing."""
    resources = build_resources(tmp_path / "store")
    instance = DagsterInstance.ephemeral()
    run(COLD, resources, instance)
    result = materialize(
        ASSETS,
        selection=EVOLUTION,
        partition_key=W2,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert any(
        "graph_snapshot [2026-11-27] has not been materialized" in str(e.event_specific_data)
        for e in failures
    )
    assert len(SnapshotStore(tmp_path / "store").list_versions()) == 1


def _dagster_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a `dagster` command on this checkout: a scratch instance, the test's env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGOS_")}
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    return {**env, "DAGSTER_HOME": str(home), **extra}


def test_cold_start_job_builds_the_library_segos_library_names(tmp_path: Path) -> None:
    """`SEGOS_LIBRARY=<library> dagster job execute -m assets.definitions -d . -j cold_start_job` (the
    README's form: `job execute` takes no workspace file) builds that library into `$SEGOS_STORE`: your
    own data needs only the environment."""
    library = simple_library(
        tmp_path / "my-skills",
        {
            "invoice-ocr": "Read invoice fields from scanned invoices.",
            "ledger-export": "Export ledger entries to a CSV file.",
            "fx-converter": "Convert amounts between currencies at daily rates.",
        },
    )
    store = tmp_path / "store"
    env = _dagster_env(tmp_path, SEGOS_LIBRARY=str(library), SEGOS_STORE=str(store))
    proc = subprocess.run(
        [
            str(BIN / "dagster"),
            "job",
            "execute",
            "-m",
            "assets.definitions",
            "-d",
            ".",
            "-j",
            "cold_start_job",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [version] = SnapshotStore(store).list_versions()
    assert version["kind"] == "cold_start" and version["library"]["root"] == str(library)
    assert version["counts"]["skills"] == 3 and version["counts"]["problems"] == 0
    assert sorted(SnapshotStore(store).load().nodes["id"]) == ["fx-converter", "invoice-ocr", "ledger-export"]


def test_library_and_queries_follow_the_environment(tmp_path: Path, monkeypatch) -> None:
    from segos_pipeline.paths import DEFAULT_LIBRARY, DEFAULT_QUERIES

    monkeypatch.delenv("SEGOS_LIBRARY", raising=False)
    monkeypatch.delenv("SEGOS_QUERIES", raising=False)
    assert SegosPaths().library() == DEFAULT_LIBRARY and SegosPaths().queries_path() == DEFAULT_QUERIES
    monkeypatch.setenv("SEGOS_LIBRARY", str(tmp_path / "lib"))
    monkeypatch.setenv("SEGOS_QUERIES", "queries/mine.jsonl")  # relative: from the checkout's root
    assert SegosPaths().library() == tmp_path / "lib"
    assert SegosPaths().queries_path() == PROJECT_ROOT / "queries" / "mine.jsonl"
    # run config (a resource field) wins over the environment
    assert SegosPaths(library_root=str(tmp_path / "other")).library() == tmp_path / "other"


def test_partition_start_date_follows_segos_start_date(tmp_path: Path) -> None:
    code = "from assets.evolution import windows; print(windows.start.date())"

    def start(value: str) -> subprocess.CompletedProcess[str]:
        env = _dagster_env(tmp_path, SEGOS_START_DATE=value)
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert start("2026-10-01").stdout.strip() == "2026-10-01"
    assert start("").stdout.strip() == W1  # the default: the demo's first window
    bad = start("2026-13-01")
    assert bad.returncode != 0 and "SEGOS_START_DATE='2026-13-01' is not a date" in bad.stderr
