"""A round over a stored window: the local engine streams it partition by partition, and the version
references the window's files by hash instead of copying its traces; what the round adds per
selected trace is stored in bucket files by a hash of trace id, and versions with the older
single `round.parquet` still read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.config import EngineConfig, EvolutionConfig, RetrievalConfig
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.engines import round_parts
from segos_pipeline.evolution.engines.local import LocalEngine, spilled_partitions
from segos_pipeline.evolution.evidence import added_rows, partition_ids, split_by_task
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve, evolve_round
from segos_pipeline.evolution.trace_parts import hashed_name, recorded_hash
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR
from segos_pipeline.retrieval.ordering import lineage_traces, mine_precedence
from segos_pipeline.retrieval.round_traces import (
    ROUND_ADDED,
    ROUND_TRACES,
    has_round_traces,
    round_added,
    round_part_names,
    round_traces,
)
from segos_pipeline.store.layout import sha256_file
from segos_pipeline.store.snapshot import DamagedSnapshot
from segos_pipeline.store.version_files import VersionFiles

WINDOW = "2026-11-27"


@pytest.fixture
def demo(tmp_path) -> SnapshotStore:
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, store)
    for name in ("2026-11-27.jsonl", "2026-11-28.jsonl"):  # two ingests: a window of several parts
        TraceStore(store).ingest(iter_records(DEMO_DIR / "traces" / name, "native"), window=WINDOW)
    return store


def strip_retrieval(table: pl.DataFrame, every: int) -> pl.DataFrame:
    """Every `every`-th trace without recorded retrieval, so that the round reconstructs it."""
    bare = pl.col("queries").list.eval(
        pl.struct(
            pl.element().struct.field("text"),
            retrieved=pl.lit(None, dtype=pl.List(pl.String)),
            seeds=pl.lit(None, dtype=pl.List(pl.String)),
        )
    )
    return (
        table.with_row_index("_i")
        .with_columns(queries=pl.when(pl.col("_i") % every == 0).then(bare).otherwise(pl.col("queries")))
        .drop("_i")
    )


def rewrite_window(store: SnapshotStore, transform, keep_name: bool = False) -> None:
    """Rewrite the window's parts; each renamed to the hash of its new bytes, as ingest names a part it
    writes (`keep_name`: left under its old name, as damage leaves it)."""
    for f in TraceStore(store).files(WINDOW):
        table = transform(pl.read_parquet(f))
        f.chmod(0o644)
        table.write_parquet(f)
        if not keep_name and recorded_hash(f) is not None:
            f.rename(f.with_name(hashed_name(f.name.split(".")[0], sha256_file(f))))


@pytest.mark.parametrize("partitions", [1, 3])
def test_version_references_the_window_and_reads_back_the_in_memory_round(demo, partitions):
    """The version stores its round bucket files and the window's files by hash; the traces read back
    through them equal the table a round over the window in memory stores whole (reconstructed retrieval
    too)."""
    rewrite_window(demo, lambda t: strip_retrieval(t, 3))
    parent_id = demo.list_versions()[0]["version"]
    parent = demo.load(parent_id)
    m = evolve(demo, WINDOW, parent_id, engine=LocalEngine(EngineConfig(partitions=partitions)))
    assert round_part_names(m["files"]) == ["round-00000.parquet"]  # a small window: one bucket
    assert ROUND_ADDED not in m["files"] and ROUND_TRACES not in m["files"]
    files = TraceStore(demo).files(WINDOW)
    assert len(files) == 2 and len(m["window_files"]) == 2
    assert all(not Path(r["path"]).is_absolute() for r in m["window_files"])  # relative to the store

    in_memory = evolve_round(parent, TraceStore(demo).load(WINDOW), EvolutionConfig())
    assert in_memory.selected is not None
    assert in_memory.counters["traces"]["retrieval_reconstructed"] > 0  # the comparison covers it
    stored = round_traces(VersionFiles(demo.versions_dir / m["version"], m))
    assert stored.equals(in_memory.selected)
    assert m["counters"] == {**in_memory.counters}
    assert demo.load(m["version"]).edges.equals(in_memory.edges)
    added = pl.read_parquet(demo.versions_dir / m["version"] / "round-00000.parquet")
    assert added.equals(added_rows(in_memory.selected))
    assert added["queries"].is_not_null().sum() == in_memory.counters["traces"]["retrieval_reconstructed"]


def test_order_mining_reads_referenced_traces_and_skips_a_changed_window(demo):
    parent_id = demo.list_versions()[0]["version"]
    m = evolve(demo, WINDOW, parent_id)
    snap = demo.load(m["version"])
    lineage = lineage_traces(demo, snap)
    assert lineage.read == (m["version"],) and lineage.skipped == ()
    whole = evolve_round(demo.load(parent_id), TraceStore(demo).load(WINDOW), EvolutionConfig()).selected
    assert mine_precedence(lineage.table).counts == mine_precedence(whole).counts
    assert mine_precedence(lineage.table).counts  # the demo window carries order: a real comparison

    # A later ingest into the window adds a part the version never saw: its traces are unchanged.
    TraceStore(demo).ingest(iter_records(DEMO_DIR / "traces" / "2026-11-28.jsonl", "native"), window=WINDOW)
    assert lineage_traces(demo, snap).table.equals(lineage.table)

    # A referenced part rewritten: the version's traces fail their hash, are named and left out.
    part = demo.root / m["window_files"][0]["path"]
    rewrite_window(demo, lambda t: t.head(1), keep_name=True)
    with pytest.raises(DamagedSnapshot, match="gone or changed"):
        round_traces(VersionFiles(demo.versions_dir / m["version"], m))
    assert part.is_file()
    after = lineage_traces(demo, snap)
    assert after.skipped == (m["version"],) and after.read == ()


def test_streamed_partitions_are_the_in_memory_split(demo, tmp_path):
    """One pass over the files puts every trace in the partition of its task hash, as the split in
    memory does: the same rows, one task never in two partitions."""
    files = TraceStore(demo).files(WINDOW)
    table = TraceStore(demo).load(WINDOW)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    streamed = list(spilled_partitions(files, 4, scratch))
    in_memory = split_by_task(table, 4)
    assert len(streamed) == len(in_memory) > 1
    for a, b in zip(streamed, in_memory, strict=True):
        assert a.sort("trace_id").equals(b.sort("trace_id"))
        assert a.select(partition_ids(4))["_part"].n_unique() == 1
    assert not any(scratch.rglob("*.arrow"))  # each partition's spill is removed once read


def test_local_engine_on_files_keeps_no_traces_and_gives_the_in_memory_evidence(demo):
    parent = demo.load(demo.list_versions()[0]["version"])
    files = TraceStore(demo).files(WINDOW)
    config, retrieval = EvolutionConfig(), RetrievalConfig()
    engine = LocalEngine(EngineConfig(partitions=5))
    streamed = engine.window_evidence(parent, files, config, retrieval)
    whole = LocalEngine().window_evidence(parent, TraceStore(demo).load(WINDOW), config, retrieval)
    assert streamed.selected is None and streamed.files == files
    assert whole.selected is not None and whole.files is None
    for name in ("workflow", "ordered", "couse", "unused", "witnesses", "usage"):
        assert getattr(streamed.evidence, name).equals(getattr(whole.evidence, name)), name
    # what the round adds per trace is in its bucket files, not in memory
    assert streamed.evidence.added.height == 0 and streamed.round_parts is not None
    assert streamed.round_parts.read().equals(whole.evidence.added)
    assert streamed.evidence.counts == whole.evidence.counts
    assert streamed.evidence.witnesses.height > 0  # L3 has candidates on the demo window


def test_a_round_over_no_stored_window_names_it(demo):
    with pytest.raises(Exception, match="no traces ingested for window"):
        evolve(demo, "2030-01-01")


def bucket_files(store: SnapshotStore, m: dict) -> dict[str, bytes]:
    return {n: (store.versions_dir / m["version"] / n).read_bytes() for n in round_part_names(m["files"])}


def test_round_buckets_are_by_trace_hash_whatever_the_partitions(demo, monkeypatch):
    """A window of several buckets: each bucket holds the rows of its trace-id hash in trace-id order,
    together the in-memory round's `added` table; the partition count changes no byte of any bucket; the
    traces and order mining read through them; the scratch folder is gone after the commit."""
    monkeypatch.setattr(round_parts, "ROUND_BUCKET_TRACES", 40)  # the demo window: several buckets
    rewrite_window(demo, lambda t: strip_retrieval(t, 3))
    parent_id = demo.list_versions()[0]["version"]
    parent = demo.load(parent_id)
    in_window = TraceStore(demo).load(WINDOW).height
    buckets = round_parts.bucket_count(in_window)
    assert buckets == -(-in_window // 40) > 2

    versions = [
        evolve(demo, WINDOW, parent_id, engine=LocalEngine(EngineConfig(partitions=p))) for p in (1, 4)
    ]
    one, four = (bucket_files(demo, m) for m in versions)
    assert list(one) == [f"round-{b:05d}.parquet" for b in range(buckets)]
    assert one == four  # byte for byte
    assert {k: v for k, v in versions[0]["files"].items() if k.startswith("round-")} == {
        k: v for k, v in versions[1]["files"].items() if k.startswith("round-")
    }

    in_memory = evolve_round(parent, TraceStore(demo).load(WINDOW), EvolutionConfig())
    expected = added_rows(in_memory.selected)
    tables = [pl.read_parquet(demo.versions_dir / versions[0]["version"] / n) for n in one]
    for b, table in enumerate(tables):
        assert table["trace_id"].is_sorted()
        assert (table.select(round_parts.bucket_ids(buckets))[round_parts.BUCKET] == b).all()
    assert sum(t.height for t in tables) == expected.height
    assert pl.concat(tables).sort("trace_id").equals(expected)

    m = versions[0]
    files = VersionFiles(demo.versions_dir / m["version"], m)
    assert round_traces(files).equals(in_memory.selected)
    assert round_added(files).collect().sort("trace_id").equals(expected)
    assert mine_precedence(lineage_traces(demo, demo.load(m["version"])).table).counts == (
        mine_precedence(in_memory.selected).counts
    )
    assert not any((demo.root / ".spark").rglob("*.parquet"))  # the buckets moved into the versions


def test_a_damaged_bucket_is_named(demo, monkeypatch):
    monkeypatch.setattr(round_parts, "ROUND_BUCKET_TRACES", 40)
    m = evolve(demo, WINDOW, demo.list_versions()[0]["version"])
    target = demo.versions_dir / m["version"] / "round-00001.parquet"
    target.chmod(0o644)
    target.write_bytes(target.read_bytes()[:-8])
    with pytest.raises(DamagedSnapshot, match=r"round-00001\.parquet"):
        round_traces(VersionFiles(demo.versions_dir / m["version"], m))


def test_a_version_with_one_round_parquet_still_reads(demo, tmp_path, monkeypatch):
    """The layout before buckets (one `round.parquet`): its traces read as the bucketed version's do."""
    monkeypatch.setattr(round_parts, "ROUND_BUCKET_TRACES", 40)
    m = evolve(demo, WINDOW, demo.list_versions()[0]["version"])
    bucketed = VersionFiles(demo.versions_dir / m["version"], m)
    old = demo.versions_dir / m["version"]
    legacy_dir = demo.root / "versions-legacy" / m["version"]  # beside versions/: window paths still resolve
    legacy_dir.mkdir(parents=True)
    whole = round_added(bucketed).collect().sort("trace_id")
    whole.write_parquet(legacy_dir / ROUND_ADDED)
    files = {k: v for k, v in m["files"].items() if not k.startswith("round-")}
    for name in files:
        (legacy_dir / name).write_bytes((old / name).read_bytes())
    files[ROUND_ADDED] = {
        "bytes": (legacy_dir / ROUND_ADDED).stat().st_size,
        "sha256": hashlib.sha256((legacy_dir / ROUND_ADDED).read_bytes()).hexdigest(),
    }
    legacy = VersionFiles(legacy_dir, {**m, "files": files})
    assert has_round_traces(legacy) and round_part_names(files) == []
    assert round_traces(legacy).equals(round_traces(bucketed))
