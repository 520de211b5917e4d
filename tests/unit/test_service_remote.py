"""`SegosService` (what `segos mcp` serves) over a store at a URI: it lists the URI at most every `poll_s`
seconds, downloads a version another writer published into its own cache in the background and switches
to it; a pinned service stays; a remote version that fails its hash check is not switched to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import polars as pl
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.graph.build import build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_TRACES
from segos_pipeline.service.api import SegosService
from segos_pipeline.store import remote
from segos_pipeline.store.remote import RemoteStore

from ..conftest import commit_copy

QUERY = "load the sales csv, clean missing values and chart revenue by month"


@pytest.fixture
def writer(uri: str, tmp_path: Path) -> RemoteStore:
    """The publishing side: its own cache, the cold start published."""
    store = RemoteStore(uri, tmp_path / "writer-cache")
    build_cold_start(DEFAULT_LIBRARY, store)
    return store


def serving(uri: str, tmp_path: Path, **kwargs: Any) -> SegosService:
    """A service on the same URI through a cache of its own (another machine, as far as it can tell)."""
    return SegosService(RemoteStore(uri, tmp_path / "server-cache"), landing=tmp_path / "landing", **kwargs)


def _until_idle(svc: SegosService, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while svc.loading is not None:
        assert time.monotonic() < deadline, f"the background load of {svc.loading} did not end"
        time.sleep(0.02)


class Clock:
    """`time.monotonic` of the remote store module, moved by the test instead of by waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_following_a_uri_store_switches_to_a_version_another_writer_published(writer, uri, tmp_path):
    v1 = writer.latest()
    svc = serving(uri, tmp_path, poll_s=0)
    assert svc.version == v1
    v2 = commit_copy(writer)  # published by the writer, through its own cache

    assert svc.search(QUERY)["version"] == v1  # noticed here; loaded in the background meanwhile
    _until_idle(svc)
    assert svc.search(QUERY)["version"] == v2
    status = svc.status()
    assert status["version"] == v2 and status["latest"] == v2 and status["switches"] == 1
    assert status["store"] == uri and status["cache"] == str(svc.store.root) and status["poll_s"] == 0
    assert (svc.store.versions_dir / v2 / "manifest.json").is_file()  # downloaded into the server's cache
    assert svc.store.root != writer.root
    assert [v["version"] for v in svc.list_versions()["versions"]] == [v1, v2]


def test_the_uri_is_listed_at_most_every_poll_interval(writer, uri, tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(remote, "time", clock)
    svc = serving(uri, tmp_path, poll_s=30)
    v1 = svc.version
    fs = svc.store.location.fs
    listings: list[str] = []
    ls = fs.ls

    def counting_ls(path: Any, *args: Any, **kwargs: Any) -> Any:
        listings.append(str(path))
        return ls(path, *args, **kwargs)

    monkeypatch.setattr(fs, "ls", counting_ls)
    v2 = commit_copy(writer)
    listings.clear()  # the writer's own listings

    clock.now += 29  # inside the interval: requests ask the URI nothing, and do not see v2 yet
    for _ in range(5):
        svc.search(QUERY)
        svc.status()
        svc.list_versions()
    assert listings == []
    assert svc.version == v1 and svc.status()["latest"] == v1

    clock.now += 2  # the interval is over: the next request lists once, then the load downloads v2
    svc.search(QUERY)
    _until_idle(svc)
    assert svc.search(QUERY)["version"] == v2
    versions_listed = [p for p in listings if p.rstrip("/").endswith("versions")]
    assert len(versions_listed) == 1, listings


def test_a_pinned_service_on_a_uri_store_does_not_switch(writer, uri, tmp_path):
    v1 = writer.latest()
    svc = serving(uri, tmp_path, version=v1, poll_s=0)
    v2 = commit_copy(writer)
    assert svc.refresh(wait=True) is False
    status = svc.status()
    assert status["version"] == v1 and status["mode"] == "pinned" and status["latest"] == v2
    assert status["switches"] == 0 and svc.loading is None
    assert not (svc.store.versions_dir / v2).exists()  # never downloaded


def test_a_damaged_remote_version_is_not_switched_to(writer, uri, tmp_path):
    svc = serving(uri, tmp_path, poll_s=0)
    v1 = svc.version
    # a file of its own (a copy's other files are v1's, which the server links from its cache by hash)
    v2 = commit_copy(writer, {"note.parquet": pl.DataFrame({"seen": list(range(100))})})
    part = writer.location.join("versions", v2, "note.parquet")
    fs = writer.location.fs
    data = bytearray(fs.cat_file(part))
    middle = len(data) // 2
    data[middle : middle + 8] = b"\x00" * 8  # same size, other bytes: only the hash can tell
    fs.pipe_file(part, bytes(data))

    svc.status()
    _until_idle(svc)
    status = svc.status()
    assert status["version"] == v1 and status["switches"] == 0 and status["latest"] == v2
    assert v2 in (status["last_reload_error"] or "") and "damaged" in status["last_reload_error"]
    assert "damaged" in status["unservable"][v2]
    assert not (svc.store.versions_dir / v2).exists()  # nothing of it is left in the cache
    assert svc.refresh() is False and svc.loading is None  # not retried


def test_a_fresh_cache_serves_the_execution_order_of_the_whole_lineage(writer, uri, tmp_path):
    """The round traces of the served version's ancestors, which execution order reads, are downloaded
    too: a fresh cache orders bundles as the writer's cache does, with no ancestor skipped."""
    TraceStore(writer).ingest_path(DEMO_TRACES)
    for window in ("2026-11-27", "2026-11-28"):
        evolve(writer, window)
    local = SegosService(writer, landing=tmp_path / "landing")
    fresh = serving(uri, tmp_path)
    assert fresh.version == local.version == writer.latest()
    expected = local.status()["ordering"]["precedence"]
    got = fresh.status()["ordering"]["precedence"]
    assert got == expected and got["skipped"] == [] and len(got["versions"]) == 2 and got["pairs"] > 0
    assert fresh.retrieve_bundle(QUERY)["order"] == local.retrieve_bundle(QUERY)["order"]


def test_segos_mcp_keeps_the_uri_and_follows_it(tmp_path):
    """`segos mcp --store URI --print-config` keeps the URI (not a folder named `file:`), with the cache and
    polling given; the printed entry, started as a client starts it, serves the URI and switches to a
    version another writer publishes there."""
    uri = (tmp_path / "remote" / "store").as_uri()
    writer = RemoteStore(uri, tmp_path / "writer-cache")
    v1 = build_cold_start(DEFAULT_LIBRARY, writer)["version"]
    segos = Path(sys.executable).parent / "segos"
    cache = tmp_path / "server-cache"
    proc = subprocess.run(
        [str(segos), "mcp", "--store", uri, "--cache", str(cache), "--poll", "0", "--print-config", "server"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SEGOS_LANDING": ""},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    landing = remote.cache_folder(uri, cache) / "landing"
    assert entry["args"] == [
        "mcp",
        "--store",
        uri,
        "--cache",
        str(cache),
        "--poll",
        "0",
        "--landing",
        str(landing),
    ]

    async def scenario() -> None:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(tmp_path))
        async with Client(params) as client:
            status = await _call(client, "get_status")
            assert status["store"] == uri and status["version"] == v1
            assert status["cache"] == str(remote.cache_folder(uri, cache)) and status["poll_s"] == 0
            v2 = commit_copy(writer)
            deadline = time.monotonic() + 60
            while status["version"] != v2:
                assert time.monotonic() < deadline, f"the server did not switch to {v2}: {status}"
                await anyio.sleep(0.2)
                status = await _call(client, "get_status")
            rec = await _call(
                client, "record_trace", task_id="t", queries=[QUERY], used=["csv-loader"], reward=1
            )
            assert Path(rec["file"]).parent == landing and rec["window"] in rec["next"]

    anyio.run(scenario)


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]
