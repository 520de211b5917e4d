"""Versions and trace windows on a URI (docs/storage.md): fsspec's `memory://` and a `file://` folder, each
with local cache folders; the manifest uploaded last is the commit point."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import polars as pl
import pytest
from click.testing import CliRunner
from fsspec.implementations.memory import MemoryFileSystem

from segos_pipeline.cli import main
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.graph.build import build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_TRACES
from segos_pipeline.store.filesystem import RemoteStoreError
from segos_pipeline.store.layout import MANIFEST
from segos_pipeline.store.remote import RemoteStore, VersionExists, cache_folder, open_store
from segos_pipeline.store.snapshot import (
    DamagedSnapshot,
    SnapshotError,
    SnapshotStore,
    StaleParent,
    UnknownVersion,
)

from ..conftest import demo_library_with_malformed, simple_library

WINDOW = "2026-11-28"


class HookFS(MemoryFileSystem):
    """An in-memory filesystem of its own (`hookmem://`) that calls `on_put` before every upload and
    `on_ls` before every listing: a test makes an upload fail, another writer publish in between, or the
    store unreachable."""

    protocol = ("hookmem",)
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    on_put: ClassVar[Callable[[str], None] | None] = None
    on_ls: ClassVar[Callable[[str], None] | None] = None

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        if isinstance(path, str) and path.startswith("hookmem://"):
            path = "memory://" + path.removeprefix("hookmem://")
        return super()._strip_protocol(path)

    def put_file(self, lpath: Any, rpath: Any, *args: Any, **kwargs: Any) -> Any:
        if HookFS.on_put is not None:
            HookFS.on_put(str(rpath))
        return super().put_file(lpath, rpath, *args, **kwargs)

    def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> Any:
        if HookFS.on_ls is not None:
            HookFS.on_ls(str(path))
        return super().ls(path, detail=detail, **kwargs)


fsspec.register_implementation("hookmem", HookFS, clobber=True)


@pytest.fixture
def hooks() -> Iterator[type[HookFS]]:
    yield HookFS
    HookFS.on_put = HookFS.on_ls = None


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def remote_bytes(store: RemoteStore, vid: str) -> dict[str, bytes]:
    fs, base = store.location.fs, store.location.join("versions", vid)
    return {Path(p).name: fs.cat_file(p) for p in fs.find(base)}


def stable(manifest: dict[str, Any]) -> dict[str, Any]:
    """What two equal rounds share: everything but when they ran and how long they took, and the names of
    the window files a version references (each store names its parts itself): their contents count."""
    out = {k: v for k, v in manifest.items() if k not in ("created_at", "timings_s", "engine")}
    if "window_files" in out:
        out["window_files"] = sorted((r["bytes"], r["sha256"]) for r in out["window_files"])
    return out


# ------------------------------------------------------------------------------------------- versions


def test_build_publish_then_load_from_a_fresh_cache_is_bit_identical(uri, tmp_path):
    writer = open_store(uri, tmp_path / "cache-a")
    assert isinstance(writer, RemoteStore)
    manifest = build_cold_start(DEFAULT_LIBRARY, writer)
    vid = manifest["version"]
    written = files_of(writer.versions_dir / vid)
    assert remote_bytes(writer, vid) == written  # uploaded byte for byte, manifest included

    reader = RemoteStore(uri, tmp_path / "cache-b")
    assert not reader.versions_dir.exists()  # nothing cached before the first load
    assert [m["version"] for m in reader.list_versions()] == [vid]
    snap = reader.load()
    assert snap.version == vid and snap.path == reader.versions_dir / vid
    assert files_of(snap.path) == written
    local = writer.load(vid)
    assert snap.nodes.equals(local.nodes) and snap.edges.equals(local.edges)
    assert (snap.transition != local.transition).nnz == 0


def test_a_local_store_version_published_to_a_uri_loads_identically(uri, tmp_path):
    local = SnapshotStore(tmp_path / "local")
    vid = build_cold_start(DEFAULT_LIBRARY, local)["version"]
    remote = RemoteStore(uri, tmp_path / "cache")
    remote.publish(local.versions_dir / vid)
    fresh = RemoteStore(uri, tmp_path / "fresh")
    assert files_of(fresh.load(vid).path) == files_of(local.versions_dir / vid)


def test_a_child_shares_unchanged_files_with_its_cached_parent(uri, tmp_path):
    """An evolution round leaves the library alone: the child's parts are hard links to the parent's
    in the cache that downloads both (linked by hash, not downloaded again)."""
    writer = RemoteStore(uri, tmp_path / "a")
    build_cold_start(DEFAULT_LIBRARY, writer)
    TraceStore(writer).ingest_path(DEMO_TRACES)
    child = evolve(writer, WINDOW)
    reader = RemoteStore(uri, tmp_path / "b")
    parent = reader.load(child["parent"])
    loaded = reader.load(child["version"])
    part = "nodes-00000.parquet"
    assert (loaded.path / part).stat().st_ino == (parent.path / part).stat().st_ino
    assert files_of(loaded.path) == files_of(writer.versions_dir / child["version"])


def test_published_versions_are_never_overwritten(uri, tmp_path):
    writer = RemoteStore(uri, tmp_path / "a")
    vid = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    before = remote_bytes(writer, vid)
    reader = RemoteStore(uri, tmp_path / "b")
    with pytest.raises(VersionExists, match="never overwritten"):
        reader.publish(reader.files(vid).path)
    assert remote_bytes(writer, vid) == before


def test_failing_between_uploads_leaves_no_version_and_a_retry_commits(hooks, tmp_path):
    """The manifest goes up last: a writer that fails (or dies) after some files leaves a folder without
    manifest, which no reader lists; the cache forgets the version too, and the next write succeeds."""
    uri = f"hookmem://b{uuid.uuid4().hex[:8]}/store"
    uploads: list[str] = []

    def fail_on_third(path: str) -> None:
        uploads.append(path)
        if len(uploads) == 3:
            raise ConnectionError("connection reset by peer")

    hooks.on_put = fail_on_third
    writer = RemoteStore(uri, tmp_path / "a")
    with pytest.raises(RemoteStoreError, match="connection reset"):
        build_cold_start(DEFAULT_LIBRARY, writer)
    fs = writer.location.fs
    [folder] = fs.ls(writer.location.join("versions"), detail=False)
    assert fs.ls(folder, detail=False) and not fs.exists(f"{folder}/{MANIFEST}")  # half uploaded
    assert writer.list_versions() == [] and RemoteStore(uri, tmp_path / "b").list_versions() == []
    assert not any((writer.versions_dir).iterdir())  # the cache holds nothing the URI lacks
    with pytest.raises(UnknownVersion, match=uri):
        writer.load()

    hooks.on_put = None
    vid = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    assert [m["version"] for m in RemoteStore(uri, tmp_path / "c").list_versions()] == [vid]
    assert files_of(RemoteStore(uri, tmp_path / "d").load().path) == files_of(writer.versions_dir / vid)


@pytest.mark.parametrize("same_content", [False, True])
def test_a_writer_overtaken_during_its_upload_publishes_nothing(hooks, tmp_path, same_content):
    """Two machines (two caches) writing one URI: a version published while this writer uploads takes its
    sequence number (or, with the same content, its very id); this writer notices before its manifest
    and publishes nothing, and the other writer's manifest stays as it was."""
    uri = f"hookmem://b{uuid.uuid4().hex[:8]}/store"
    build_cold_start(DEFAULT_LIBRARY, RemoteStore(uri, tmp_path / "a"))
    other = RemoteStore(uri, tmp_path / "b")
    slow = RemoteStore(uri, tmp_path / "c")
    racing: list[dict[str, Any]] = []
    small = simple_library(tmp_path / "small", {"pdf-merge": "merge pdf files", "csv-load": "load csv"})

    def publish_another(_path: str) -> None:
        if not racing:
            hooks.on_put = None
            racing.append(build_cold_start(DEFAULT_LIBRARY if same_content else small, other))

    hooks.on_put = publish_another
    refused = VersionExists if same_content else StaleParent
    with pytest.raises(refused, match="never overwritten" if same_content else "nothing was published"):
        build_cold_start(DEFAULT_LIBRARY, slow)
    fresh = RemoteStore(uri, tmp_path / "d")
    listed = [m["version"] for m in fresh.list_versions()]
    assert listed[-1] == racing[0]["version"] and len(listed) == 2
    assert fresh.manifest(listed[-1])["created_at"] == racing[0]["created_at"]
    assert list(slow.versions_dir.iterdir()) == []  # the cache holds nothing the URI lacks


def test_a_damaged_remote_file_is_refused_on_download(uri, tmp_path):
    writer = RemoteStore(uri, tmp_path / "a")
    vid = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    fs = writer.location.fs
    fs.pipe_file(writer.location.join("versions", vid, "edges.parquet"), b"not the edges")
    with pytest.raises(DamagedSnapshot, match=r"edges\.parquet"):
        RemoteStore(uri, tmp_path / "b").load(vid)
    fs.rm_file(writer.location.join("versions", vid, "edges.parquet"))
    with pytest.raises(DamagedSnapshot, match="missing"):
        RemoteStore(uri, tmp_path / "c").load(vid)
    assert not (tmp_path / "c").exists() or not any((RemoteStore(uri, tmp_path / "c").versions_dir).iterdir())


def test_a_store_answers_where_it_is_so_callers_never_test_its_class(uri, tmp_path):
    """A folder and a store at a URI answer the same questions (what reaches them, their folder or
    cache, whether commits show locally, where a file is published, what to pull and push), so no caller
    branches on `RemoteStore`."""
    local = SnapshotStore(tmp_path / "local")
    (local.root / "traces" / "w1" / "parts").mkdir(parents=True)
    (local.root / "traces" / "w1" / "parts" / "a.parquet").write_bytes(b"12345")
    (local.root / "traces" / "w1" / "parts" / ".hidden.parquet").write_bytes(b"x")
    assert (local.address, local.local_root, local.local_cache) == (str(local.root), local.root, None)
    assert local.commits_show_locally and local.listing_max_age is None and local.url("versions") is None
    assert local.polling(5.0) is local
    assert local.names_in("traces") == ["w1"] and local.names_in("nowhere") == []
    assert local.files_in("traces/w1", ".parquet") == {"traces/w1/parts/a.parquet": 5}
    assert local.pull("traces/w1", ".parquet") == [] and not local.pull_file("traces/log.jsonl")
    local.push(local.root / "traces" / "w1" / "parts" / "a.parquet")  # a folder: nothing to publish
    vid = build_cold_start(DEFAULT_LIBRARY, local)["version"]
    assert local.fetch_ancestors(local.load(vid), lambda files: True) == []

    remote = RemoteStore(uri, tmp_path / "cache")
    assert (remote.address, remote.local_root, remote.local_cache) == (uri.rstrip("/"), None, remote.root)
    assert not remote.commits_show_locally
    assert remote.url("versions/x") == f"{uri.rstrip('/')}/versions/x"
    assert remote.polling(5.0).listing_max_age == 5.0
    assert remote.names_in("traces") == [] and remote.files_in("traces", ".parquet") == {}


def test_a_uri_is_never_opened_as_a_local_folder(tmp_path):
    with pytest.raises(SnapshotError, match="open_store"):
        SnapshotStore("s3://bucket/store")
    assert isinstance(open_store(tmp_path / "x"), SnapshotStore)
    assert not isinstance(open_store(tmp_path / "x"), RemoteStore)
    a, b = cache_folder("s3://a/store", tmp_path), cache_folder("s3://b/store", tmp_path)
    assert a != b and a.parent == tmp_path  # one cache folder per URI


# --------------------------------------------------------------------------------------- trace windows


def test_ingest_into_a_uri_window_is_read_back_from_another_cache(uri, tmp_path):
    writer = RemoteStore(uri, tmp_path / "a")
    build_cold_start(DEFAULT_LIBRARY, writer)
    report = TraceStore(writer).ingest_path(DEMO_TRACES)
    assert report.accepted > 0 and report.quarantined == 3
    fs = writer.location.fs
    parts = fs.glob(writer.location.join("traces", WINDOW, "parts", "*.parquet"))
    assert parts and not fs.glob(writer.location.join("traces", "*", "parts", "*.tmp"))
    assert fs.exists(writer.location.join("traces", "ingest_log.jsonl"))

    reader = TraceStore(RemoteStore(uri, tmp_path / "b"))
    assert reader.windows() == TraceStore(writer).windows() == ["2026-11-27", "2026-11-28"]
    assert reader.load(WINDOW).equals(TraceStore(writer).load(WINDOW))
    assert len(reader.quarantine("unplaced")) == 3
    again = reader.ingest_path(DEMO_TRACES)  # deduplicated against what the URI holds
    assert again.accepted == 0 and again.quarantined == 0 and again.duplicates == report.accepted + 1
    log = fs.cat_file(writer.location.join("traces", "ingest_log.jsonl")).decode().splitlines()
    assert len(log) == 2  # both runs, though each wrote from its own cache
    assert len(TraceStore(RemoteStore(uri, tmp_path / "c")).quarantine("unplaced")) == 3


def test_evolving_from_a_uri_store_equals_evolving_locally(uri, tmp_path):
    local = SnapshotStore(tmp_path / "local")
    build_cold_start(DEFAULT_LIBRARY, local)
    TraceStore(local).ingest_path(DEMO_TRACES)
    expected = evolve(local, WINDOW)

    writer = RemoteStore(uri, tmp_path / "a")
    build_cold_start(DEFAULT_LIBRARY, writer)
    TraceStore(writer).ingest_path(DEMO_TRACES)
    evolver = RemoteStore(uri, tmp_path / "b")  # another machine: parent and window come from the URI
    got = evolve(evolver, WINDOW)
    assert got["version"] == expected["version"]  # same sequence number and same content hash
    assert stable(got) == stable(expected)
    assert files_of(evolver.versions_dir / got["version"]) | {MANIFEST: b""} == files_of(
        local.versions_dir / expected["version"]
    ) | {MANIFEST: b""}
    fresh = RemoteStore(uri, tmp_path / "c")
    reread = fresh.load(got["version"])
    assert reread.edges.equals(local.load(expected["version"]).edges)
    # trace files the version references by hash (rounds that do not copy their window) came with it
    for ref in fresh.manifest(got["version"]).get("window_files", []):
        assert (fresh.root / ref["path"]).stat().st_size == ref["bytes"]


# ------------------------------------------------------------------------------------------------- CLI


def run(*args: Any, code: int = 0) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output + str(result.exception)
    return result


def test_cli_commands_on_a_uri_store(uri, tmp_path):
    cache = tmp_path / "cache"
    common = ["--store", uri, "--cache", cache]
    vid = run("build", *common, "--quiet").output.strip().splitlines()[-1]
    # a library with build problems (the demo's own has none): the hint names the report command
    again = run("build", demo_library_with_malformed(tmp_path / "lib"), *common, "--quiet").output
    assert "segos report v0002" in again and f"--store {uri}\n" in again  # the URI, not the cache
    listed = json.loads(run("versions", *common, "--json").stdout)
    assert listed[0]["version"] == vid and len(listed) == 2
    other = ["--store", uri, "--cache", tmp_path / "other-cache"]  # another machine's view
    ingest = json.loads(run("ingest", DEMO_TRACES, *other, "--json", "--quiet").stdout)
    assert ingest["windows"][WINDOW]["accepted"] > 0
    evolved = run("evolve", "--window", WINDOW, "--from", vid, *common, "--json", "--quiet").stdout
    child = json.loads(evolved)
    assert child["parent"] == vid
    assert run("verify", child["version"], *other).output.strip() == f"{child['version']}: ok"
    bundle = json.loads(run("retrieve", "merge pdf files", *other, "--json").stdout)
    assert bundle["version"] == child["version"] and bundle["skills"]
    assert list((cache / cache_folder(uri, cache).name / "versions").iterdir())


def test_cli_errors_on_a_uri_store_are_one_line(uri, hooks, tmp_path):
    common = ["--store", uri, "--cache", tmp_path / "cache"]
    empty = run("retrieve", "merge pdf files", *common, code=2)
    assert empty.output.startswith("error: ") and "no versions yet" in empty.output and uri in empty.output
    run("build", *common, "--quiet")
    wrong = run("retrieve", "x", *common, "--version", "v0042", code=2)
    assert "no such version" in wrong.output and uri in wrong.output
    missing = run("evolve", "--window", "2030-01-01", *common, code=2)
    assert "no traces ingested for window '2030-01-01'" in missing.output
    unknown = run("versions", "--store", "nosuchfs://bucket/store", "--cache", tmp_path / "c", code=2)
    assert unknown.output.startswith("error: ") and "nosuchfs" in unknown.output
    assert "Traceback" not in unknown.output

    def unreachable(_path: str) -> None:
        raise ConnectionError("Could not connect to the endpoint URL")

    hooks.on_ls = unreachable
    down = run("versions", "--store", "hookmem://down/store", "--cache", tmp_path / "d", code=2)
    assert "could not list the versions at hookmem://down/store" in down.output
    assert "Could not connect" in down.output and len(down.output.strip().splitlines()) == 1


def test_one_version_fetched_by_id_without_its_window(uri, tmp_path):
    """What an executor does: read one manifest (no listing), download that version hash-checked, and
    leave the window files it references at the URI; a wrong id is refused."""
    writer = RemoteStore(uri, tmp_path / "a")
    cold = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    TraceStore(writer).ingest_path(DEMO_TRACES)
    evolved = evolve(writer, WINDOW, cold)
    assert evolved["window_files"]
    executor = RemoteStore(uri, tmp_path / "b", with_windows=False)
    folder = executor.fetch_published(evolved["version"])
    assert files_of(folder) == files_of(writer.versions_dir / evolved["version"])
    assert not list(executor.root.glob("traces/**/*.parquet"))
    assert [p.name for p in executor.versions_dir.iterdir()] == [evolved["version"]]
    assert executor.load(evolved["version"]).store_uri == executor.uri
    with pytest.raises(UnknownVersion, match="no version"):
        executor.published_manifest(cold.replace(cold[:5], "v0099"))
    with pytest.raises(UnknownVersion, match="not a full version id"):
        executor.published_manifest("v1")


def test_a_uri_window_is_listed_not_downloaded_and_checked_when_read(uri, tmp_path):
    """`store_window` lists a window's files at the URI in the order a local round reads them; the
    executors' reader refuses a file whose size or sha256 is not the one the round started from."""
    import pyarrow as pa

    from segos_pipeline.evolution.engines.spark_window import hash_files, read_files
    from segos_pipeline.evolution.engines.store_window import store_window
    from segos_pipeline.evolution.traces import TRACE_SCHEMA

    writer = RemoteStore(uri, tmp_path / "a")
    build_cold_start(DEFAULT_LIBRARY, writer)
    TraceStore(writer).ingest_path(DEMO_TRACES)
    reader = RemoteStore(uri, tmp_path / "b")
    window = store_window(reader, WINDOW)
    assert not list(reader.root.glob("traces/**/*.parquet"))  # listed only
    local = TraceStore(writer).files(WINDOW)
    assert [p for p, _ in window.files] == [str(f.relative_to(writer.root)) for f in local]
    assert [b for _, b in window.files] == [f.stat().st_size for f in local]
    with pytest.raises(SnapshotError, match="no traces ingested for window '2030-01-01'"):
        store_window(reader, "2030-01-01")

    batch = pa.RecordBatch.from_pydict(
        {"path": [p for p, _ in window.files], "bytes": [b for _, b in window.files]}
    )
    [hashed] = list(hash_files(uri)(iter([batch])))
    hashes = dict(zip(hashed.column("path").to_pylist(), hashed.column("sha256").to_pylist(), strict=True))
    assert sum(hashed.column("rows").to_pylist()) == TraceStore(writer).load(WINDOW).height
    arrow = pl.DataFrame(schema=TRACE_SCHEMA).to_arrow().schema
    read = pa.Table.from_batches(list(read_files(uri, hashes, arrow)(iter([batch]))))
    assert pl.from_arrow(read).sort("trace_id").equals(TraceStore(writer).load(WINDOW))

    rel, size = window.files[0]
    wrong_size = pa.RecordBatch.from_pydict({"path": [rel], "bytes": [size + 1]})
    with pytest.raises(RemoteStoreError, match="listed at"):
        list(hash_files(uri)(iter([wrong_size])))
    with pytest.raises(RemoteStoreError, match="changed between two reads"):
        list(read_files(uri, {**hashes, rel: "0" * 64}, arrow)(iter([batch])))
