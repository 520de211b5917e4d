"""The MCP server driven by the SDK's own client over stdio: every tool, its errors, the record_trace →
ingest → evolve round trip, and a newly committed version picked up without a restart."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.service.mcp_server import _WireIn, _WireOut

from .conftest import commit_copy

PROJECT_ROOT = Path(__file__).resolve().parents[1]  # the checkout

TOOLS = {
    "search_skills",
    "retrieve_skill_bundle",
    "hydrate_skills",
    "get_skill_detail",
    "get_skill_neighbors",
    "list_versions",
    "get_status",
    "record_trace",
}
QUERY = "load the sales csv, clean missing values and chart revenue by month"


def server(store: Path, *extra: str) -> StdioServerParameters:
    # the user-facing command, as an MCP client configuration would start it
    args = ["-m", "segos_pipeline.cli", "mcp", "--store", str(store), *extra]
    return StdioServerParameters(command=sys.executable, args=args, cwd=str(PROJECT_ROOT))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    # one JSON text block, no second (structured) copy: see mcp_server._tool_errors
    assert result.structured_content is None and len(result.content) == 1
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, st)
    return st.root


def test_every_tool_errors_and_the_trace_round_trip(store: Path, tmp_path: Path):
    landing = tmp_path / "landing"

    async def scenario() -> None:
        async with Client(server(store, "--landing", str(landing))) as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == TOOLS
            for t in tools.tools:  # titles and hints for clients: only record_trace writes
                assert t.title and t.annotations is not None, t.name
                assert t.annotations.read_only_hint is (t.name != "record_trace"), t.name
                assert t.annotations.destructive_hint is False and t.annotations.open_world_hint is False
                assert t.annotations.idempotent_hint is (t.name != "record_trace"), t.name
            status = await call(client, "get_status")
            v1 = status["version"]
            assert status["mode"] == "latest" and status["counts"]["skills"] > 0

            overview = await call(client, "search_skills", query=QUERY, top_k=3)
            assert len(overview["results"]) == 3
            assert set(overview["results"][0]) == {"rank", "id", "name", "capability", "score", "seed"}

            bundle = await call(client, "retrieve_skill_bundle", query=QUERY, max_chars=4000)
            assert bundle["version"] == v1 and 0 < bundle["chars"] <= 4000
            assert [s["id"] for s in bundle["skills"]] == bundle["order"]
            assert [s["position"] for s in bundle["skills"]] == list(range(1, len(bundle["skills"]) + 1))
            for s in bundle["skills"]:
                assert s["why"] and s["reasons"] and s["text"]
            members = set(bundle["order"])
            assert all(e["src"] in members and e["dst"] in members for e in bundle["edges"])

            first = bundle["order"][0]
            hydrated = await call(client, "hydrate_skills", names=[first, "csv-loader"])
            assert hydrated["skills"][0]["id"] == first
            detail = await call(client, "get_skill_detail", name="csv-loader")
            assert detail["skill"]["id"].endswith("csv-loader") and "body" in detail["skill"]
            neighbours = await call(client, "get_skill_neighbors", name="csv-loader")
            assert neighbours["out"] or neighbours["in"]
            assert {e["relation"] for e in neighbours["out"] + neighbours["in"]} <= {
                "semantic",
                "workflow",
                "dependency",
                "alternative",
                "avoid",
            }
            versions = await call(client, "list_versions")
            assert [v["version"] for v in versions["versions"]] == [v1]

            # errors are tool errors with the reason, and the server keeps serving
            assert "unknown skill" in await error(client, "get_skill_detail", name="no-such-skill")
            assert "unknown skill" in await error(client, "hydrate_skills", names=["no-such-skill"])
            assert "no such version" in await error(client, "search_skills", query=QUERY, version="v9999")
            assert "reward" in await error(
                client, "record_trace", task_id="t", queries=["q"], used=["csv-loader"], reward=7
            )
            assert "used" in await error(
                client, "record_trace", task_id="t", queries=["q"], used="csv-loader"
            )
            assert "query is empty" in await error(client, "retrieve_skill_bundle", query="  ")

            # record_trace → ingest → evolve: the new version is served without a restart
            used = bundle["order"][:3]
            for i in range(3):
                rec = await call(
                    client,
                    "record_trace",
                    task_id=f"task-{i}",
                    queries=[QUERY],
                    used=used,
                    reward=1.0,
                    agent="test-agent",
                )
                assert rec["unknown_skills"] == [] and Path(rec["file"]).is_file()
            ctrf = {"results": {"summary": {"tests": 4, "passed": 1}}}
            rec = await call(
                client, "record_trace", task_id="task-x", queries=[QUERY], used=used[:1], ctrf=ctrf
            )
            assert rec["reward"] == 0.25 and rec["reward_source"] == "ctrf"
            window = rec["window"]

            st = SnapshotStore(store)
            report = TraceStore(st).ingest(iter_records(landing, "native"))
            assert report.accepted == 4 and report.quarantined == 0
            manifest = evolve(st, window)
            v2 = manifest["version"]
            assert manifest["parent"] == v1

            # loaded in the background while requests are answered from v1, then swapped in between requests
            deadline = time.monotonic() + 60
            while (status := await call(client, "get_status"))["version"] != v2:
                assert status["version"] == v1 and time.monotonic() < deadline, status
                await anyio.sleep(0.05)
            assert status["switches"] == 1 and status["loading"] is None
            bundle2 = await call(client, "retrieve_skill_bundle", query=QUERY)
            assert bundle2["version"] == v2
            assert bundle2["ordering"]["precedence"]["traces"] == 3  # the three successful traces
            old = await call(client, "search_skills", query=QUERY, top_k=2, version=v1)
            assert old["version"] == v1

    anyio.run(scenario)
    lines = [json.loads(x) for f in landing.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert len(lines) == 4 and {x["task_id"] for x in lines} == {"task-0", "task-1", "task-2", "task-x"}


def test_pinned_version_is_kept_and_an_unknown_one_refused(store: Path, tmp_path: Path):
    st = SnapshotStore(store)
    v1 = st.latest()
    commit_copy(st)  # a newer version the pinned server must ignore

    async def scenario() -> None:
        async with Client(server(store, "--version", v1, "--landing", str(tmp_path))) as client:
            status = await call(client, "get_status")
            assert status["version"] == v1 and status["mode"] == "pinned" and status["latest"] != v1

    anyio.run(scenario)
    proc = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", "mcp", "--store", str(store), "--version", "v0099"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "no such version" in proc.stderr


def test_a_malformed_line_is_dropped_and_the_server_goes_on(store: Path):
    # raw JSON-RPC over the pipes: garbage, then a (legacy) handshake that must still be answered
    init = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "segos_pipeline.cli", "mcp", "--store", str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    try:
        out, err = proc.communicate(b"not json at all\n" + json.dumps(init).encode() + b"\n", timeout=60)
    finally:
        proc.kill()
    version = SnapshotStore(store).latest()
    assert f"segos mcp: serving {version} (following the newest version) on stdio" in err.decode()
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["id"] for a in answers] == [7] and answers[0]["result"]["serverInfo"]["name"] == "segos"
    assert proc.returncode == 0  # stdin closed: a clean exit


def test_wire_reader_parses_lines_and_hands_on_bad_ones():
    async def scenario() -> list[Any]:
        reader = asyncio.StreamReader(limit=64)
        ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
        reader.feed_data(b"{oops\n" + b"x" * 100 + b"\n" + ping)
        reader.feed_eof()
        return [item async for item in _WireIn(reader)]

    bad, too_long, ok = anyio.run(scenario)
    assert isinstance(bad, Exception) and isinstance(too_long, ValueError)  # handed on, not raised
    assert ok.message.id == 1 and ok.message.method == "ping"


def test_wire_writer_writes_one_line_per_message_and_reports_a_lost_pipe():
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCResponse

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        r, w = os.pipe()
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(w, "wb", 0)
        )
        out = _WireOut(asyncio.StreamWriter(transport, protocol, None, loop))
        for i in (1, 2):
            await out.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=i, result={"n": "é" * i})))
        written = os.read(r, 1 << 16)
        os.close(r)
        with pytest.raises(anyio.BrokenResourceError):  # the reader is gone
            for _ in range(3):
                await out.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=3, result={})))
        await out.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await out.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=4, result={})))
        transport.close()
        return written

    lines = anyio.run(scenario).decode().splitlines()
    assert [json.loads(x) for x in lines] == [
        {"jsonrpc": "2.0", "id": 1, "result": {"n": "é"}},
        {"jsonrpc": "2.0", "id": 2, "result": {"n": "éé"}},
    ]


def _mcp_http(store: Path, port: int) -> list[str]:
    """The `segos mcp --http` command line on `port`."""
    return [
        sys.executable,
        "-m",
        "segos_pipeline.cli",
        "mcp",
        "--store",
        str(store),
        "--http",
        "--port",
        str(port),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_serves_the_same_tools_on_loopback(store: Path, tmp_path: Path):
    port = _free_port()
    proc = subprocess.Popen(
        _mcp_http(store, port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # wait until it listens (or fails to start)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "segos mcp --http did not listen within 60 s"
                time.sleep(0.2)

        async def scenario() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tools = await client.list_tools()
                assert {t.name for t in tools.tools} == TOOLS
                bundle = await call(client, "retrieve_skill_bundle", query=QUERY, max_chars=4000)
                assert bundle["skills"] and bundle["chars"] <= 4000
                assert [s["id"] for s in bundle["skills"]] == bundle["order"]
                assert "unknown skill" in await error(client, "get_skill_detail", name="no-such-skill")

        anyio.run(scenario)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_http_refuses_a_non_loopback_host(store: Path):
    from segos_pipeline.service.api import SegosService
    from segos_pipeline.service.mcp_server import serve

    with pytest.raises(ValueError, match="loopback"):
        serve(SegosService(store), http=True, host="0.0.0.0")


def test_a_taken_port_is_one_clear_error_before_anything_is_announced(store: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            _mcp_http(store, port),
            capture_output=True,
            text=True,
            cwd=PROJECT_ROOT,
            timeout=60,
        )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"error: cannot listen on 127.0.0.1:{port} (Address already in use); choose another --port"
    )
