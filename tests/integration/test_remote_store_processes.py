"""A store on a URI under real processes and Spark: a writer killed by SIGKILL between uploads leaves no
version, and the Spark engine on a URI store commits the local engine's version. The in-process cases
are in tests/unit/test_remote_store.py."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.graph.build import build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_TRACES
from segos_pipeline.store.remote import RemoteStore, cache_folder
from segos_pipeline.store.snapshot import MANIFEST

from ..unit.test_remote_store import WINDOW, files_of

KILLED_WRITER = """
import os, signal, sys
import fsspec
import polars as pl
from fsspec.implementations.local import LocalFileSystem

class KillFS(LocalFileSystem):  # the folder of a file:// URI, whose writer dies at its 4th upload
    protocol = ("killfile", "file")
    puts = 0

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("killfile://"):
            path = path.removeprefix("killfile://")
        return super()._strip_protocol(path)

    def put_file(self, lpath, rpath, **kwargs):
        KillFS.puts += 1
        if KillFS.puts == 4:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().put_file(lpath, rpath, **kwargs)

fsspec.register_implementation("killfile", KillFS, clobber=True)
from segos_pipeline.graph.build import build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.store.remote import RemoteStore
build_cold_start(DEFAULT_LIBRARY, RemoteStore(sys.argv[1], sys.argv[2]))
"""


def test_a_writer_killed_between_uploads_leaves_no_version(tmp_path):
    """SIGKILL in the middle of publishing (no handler runs): the URI holds files without a manifest,
    which no reader lists; the next writer on the dead one's cache forgets its unpublished version and
    publishes as sequence 1."""
    folder = tmp_path / "remote"
    cache = tmp_path / "cache"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, f"killfile://{folder}", str(cache)],
        capture_output=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    uri = folder.as_uri()
    [half] = list((folder / "versions").iterdir())
    assert any(half.iterdir()) and not (half / MANIFEST).exists()
    assert RemoteStore(uri, tmp_path / "reader").list_versions() == []
    # the dead writer's cache, as this process names the cache of the same folder by its file:// URI
    cache_folder(f"killfile://{folder}", cache).rename(cache_folder(uri, cache))
    writer = RemoteStore(uri, cache)
    assert [p.name for p in writer.versions_dir.iterdir()] == [half.name]  # committed in the cache only
    vid = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    assert vid.startswith("v0001-") and [p.name for p in writer.versions_dir.iterdir()] == [vid]
    assert files_of(RemoteStore(uri, tmp_path / "fresh").load().path) == files_of(writer.versions_dir / vid)


def test_the_spark_engine_on_a_uri_store_commits_the_local_engines_version(tmp_path):
    """`--engine spark` on a store given by URI (local mode, one machine): the window is brought into the
    cache and read there by Spark, the parent loaded from the cache by the executors; the version equals
    the local engine's, evolved from another cache."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    pytest.importorskip("pandas", reason="the spark extra is not installed (mapInArrow needs pandas)")
    from segos_pipeline.config import EngineConfig
    from segos_pipeline.evolution.engines.local import LocalEngine
    from segos_pipeline.evolution.engines.spark import SparkEngine, spark_session

    uri = (tmp_path / "remote").as_uri()
    writer = RemoteStore(uri, tmp_path / "a")
    parent = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    TraceStore(writer).ingest_path(DEMO_TRACES)
    config = EngineConfig(
        engine="spark",
        spark_master="local[1]",
        partitions=2,
        spark_conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "1"},
    )
    session = spark_session(config)
    try:
        engine = SparkEngine(config, session)
        on_spark = evolve(RemoteStore(uri, tmp_path / "b"), WINDOW, parent, engine=engine)
    finally:
        session.stop()
    locally = evolve(RemoteStore(uri, tmp_path / "c"), WINDOW, parent, engine=LocalEngine())
    assert on_spark["engine"]["engine"] == "spark" and locally["engine"]["engine"] == "local"
    assert on_spark["files"] == locally["files"] and on_spark["counters"] == locally["counters"]
    assert [m["version"] for m in RemoteStore(uri, tmp_path / "d").list_versions()] == [
        parent,
        on_spark["version"],
        locally["version"],
    ]
