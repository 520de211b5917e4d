"""`segos mcp --http` survives its clients (session cap with LRU eviction, connection cap,
head and body deadlines, rate-limited accept errors). Real server processes; small limits through the
`SEGOS_MCP_*` variables so each case runs in seconds."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from segos_pipeline.service.http import (
    ENV,
    AcceptErrorLog,
    BodyDeadline,
    HttpLimits,
    RefusedLog,
    SessionLRU,
    check_sdk,
    connection_cap,
)

from ..conftest import free_port, mcp_http_server

PROJECT_ROOT = Path(__file__).resolve().parents[2]
QUERY = "load the sales csv, clean missing values and chart revenue by month"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def _initialize(http: httpx.Client, url: str) -> str:
    """An `initialize` that is answered and then abandoned: the new session's id."""
    reply = http.post(url, json=INITIALIZE, headers=HEADERS)
    assert reply.status_code == 200, reply.text
    return reply.headers["mcp-session-id"]


def _list_tools(http: httpx.Client, url: str, session: str) -> int:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    headers = {**HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    return http.post(url, json=body, headers=headers).status_code


async def _search_within(url: str, seconds: float) -> dict[str, Any]:
    with anyio.fail_after(seconds):
        async with Client(url) as client:
            result = await client.call_tool("search_skills", {"query": QUERY, "top_k": 3})
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


CAP = 50  # sessions
LIMITS = {
    "SEGOS_MCP_MAX_SESSIONS": str(CAP),
    "SEGOS_MCP_MAX_CONNECTIONS": "8",
    "SEGOS_MCP_HEAD_TIMEOUT_S": "3",
    "SEGOS_MCP_BODY_TIMEOUT_S": "1",
}


@pytest.fixture(scope="module")
def mcp_url(demo_store: Path) -> Iterator[str]:
    """One server with small limits for the module's real-process cases (start-up is most of their time)."""
    with mcp_http_server(demo_store, **LIMITS) as (port, _):
        yield f"http://127.0.0.1:{port}/mcp"


def test_abandoned_sessions_beyond_the_cap_leave_room_for_a_new_client(mcp_url: str):
    """12 times the cap of abandoned `initialize` sessions end the least recently active ones: a new client
    initializes and searches within 5 s, the oldest session answers 404, a session in use and the newest
    ones still work."""
    with httpx.Client(timeout=30) as http:
        oldest = _initialize(http, mcp_url)
        used = _initialize(http, mcp_url)
        sessions = []
        for i in range(12 * CAP):
            sessions.append(_initialize(http, mcp_url))
            if i % (CAP // 2) == 0:  # in use all along: never the least recently active
                assert _list_tools(http, mcp_url, used) == 200
        started = time.monotonic()
        found = anyio.run(_search_within, mcp_url, 5.0)
        took = time.monotonic() - started
        assert found["results"], found
        assert _list_tools(http, mcp_url, oldest) == 404  # evicted
        assert _list_tools(http, mcp_url, sessions[0]) == 404
        assert _list_tools(http, mcp_url, used) == 200  # recently active: kept
        assert all(_list_tools(http, mcp_url, s) == 200 for s in sessions[-10:])
    print(f"cap {CAP}, {12 * CAP} abandoned sessions: a new client searched in {took:.2f} s")


def test_connections_beyond_the_cap_get_503_and_the_server_answers_after(mcp_url: str):
    port = httpx.URL(mcp_url).port
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
    try:  # accepted in order, so all 12 are connections by the time this request's head is read
        with httpx.Client(timeout=10) as http:
            refused = http.post(mcp_url, json=INITIALIZE, headers=HEADERS)
        assert refused.status_code == 503
    finally:
        for s in idle:
            s.close()
    time.sleep(0.5)
    assert anyio.run(_search_within, mcp_url, 10.0)["results"]


def test_silent_sockets_are_closed_and_slow_bodies_get_408(mcp_url: str):
    port = httpx.URL(mcp_url).port
    silent = socket.create_connection(("127.0.0.1", port))
    trickle = socket.create_connection(("127.0.0.1", port))
    slow_body = socket.create_connection(("127.0.0.1", port))
    for s in (silent, trickle, slow_body):
        s.settimeout(15)
    started = time.monotonic()
    trickle.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head that never ends
    slow_body.sendall(
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{".encode()
    )
    assert slow_body.recv(100).startswith(b"HTTP/1.1 408")  # after the 1 s body deadline
    assert silent.recv(100) == b""  # closed by the server after the 3 s head deadline
    assert trickle.recv(100) == b""
    assert time.monotonic() - started < 10
    for s in (silent, trickle, slow_body):
        s.close()
    assert anyio.run(_search_within, mcp_url, 10.0)["results"]


def test_accept_errors_are_one_line_per_interval_with_a_count(caplog: pytest.LogCaptureFixture):
    """The loop's handler for failed accepts (EMFILE): one line per interval with a count, no traceback;
    other loop errors go to the previous handler."""
    now = [100.0]  # the handler's clock; the final flush waits on the loop's own (0.2 s)
    others: list[dict[str, Any]] = []
    logger = logging.getLogger("test.accept")
    handler = AcceptErrorLog(
        0.2, logger=logger, previous=lambda _loop, ctx: others.append(ctx), clock=lambda: now[0]
    )
    emfile = {
        "message": "socket.accept() out of system resource",
        "exception": OSError(24, "Too many open files"),
    }

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        handler(loop, {"message": "something else"})
        for _ in range(500):  # a storm within one interval: one line, the rest counted
            handler(loop, emfile)
        assert len(caplog.records) == 1
        now[0] = 100.3
        handler(loop, emfile)  # the next interval: one line with the count since the last one
        assert len(caplog.records) == 2
        handler(loop, emfile)
        handler(loop, emfile)
        assert len(caplog.records) == 2
        await asyncio.sleep(0.5)  # the failures stop: their count is said once the interval ends

    with caplog.at_level(logging.ERROR, logger="test.accept"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "Too many open files" in lines[0] and " 1 failed accept" in lines[0]
    assert " 500 failed accept" in lines[1]
    assert " 2 failed accept" in lines[2]
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in caplog.records)
    assert others == [{"message": "something else"}]


def test_the_accept_error_handler_never_raises_into_the_loop():
    """An exception out of a loop's exception handler ends the server: what the SDK's rich log handler
    did when it had to import a module with no descriptor left. Retries of a closed listening socket
    ("Exception in callback BaseSelectorEventLoop._start_serving(...)") are counted as accept errors."""

    class Broken(logging.Logger):
        def error(self, *args: Any, **kwargs: Any) -> None:
            raise OSError(24, "Too many open files")

    def previous(_loop: Any, _ctx: Any) -> None:
        raise OSError(24, "Too many open files")

    handler = AcceptErrorLog(0.2, logger=Broken("broken"), previous=previous)
    retry = {
        "message": "Exception in callback BaseSelectorEventLoop._start_serving(<function Ser...>, 2048)",
        "exception": ValueError("Invalid file descriptor: -1"),
    }

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        handler(loop, {"message": "socket.accept() out of system resource", "exception": OSError(24, "x")})
        handler(loop, retry)
        handler(loop, {"message": "something else"})
        await asyncio.sleep(0.3)  # the flush fails too, quietly

    asyncio.run(scenario())
    assert handler.unsaid == 2  # not said, so still counted for the next line


def test_refusals_at_the_connection_cap_are_one_line_per_interval():
    now = [0.0]
    throttle = RefusedLog(10.0, clock=lambda: now[0])
    logger = logging.getLogger("test.refused")

    def record(message: str) -> logging.LogRecord:
        return logger.makeRecord(logger.name, logging.WARNING, __file__, 0, message, (), None)

    passed = [r.getMessage() for r in (record(RefusedLog.MESSAGE) for _ in range(1000)) if throttle.filter(r)]
    assert passed == ["Exceeded concurrency limit: 1 request(s) answered 503 in the last 10 s"]
    now[0] = 10.0
    later = record(RefusedLog.MESSAGE)
    assert throttle.filter(later)
    assert later.getMessage() == "Exceeded concurrency limit: 1000 request(s) answered 503 in the last 10 s"
    assert throttle.filter(record("Started server process"))  # anything else passes


def test_bodies_held_at_once_stay_within_the_budget():
    """Two 600-byte bodies against a 1,000-byte budget: the second is refused (503) while the first is
    being served, and taken once it is answered."""
    release = anyio.Event()
    served: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append((await receive())["body"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = BodyDeadline(app, timeout_s=5, max_bytes=4096, budget_bytes=1000)

    async def request(body: bytes) -> int:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await middleware({"type": "http", "path": "/mcp", "headers": []}, receive, send)
        return sent[0]["status"]

    async def scenario() -> None:
        statuses: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _into(statuses, request(b"a" * 600)))
            await anyio.sleep(0.1)
            assert await request(b"b" * 600) == 503
            assert middleware.held == 600
            release.set()
        assert statuses == [200] and middleware.held == 0
        assert await request(b"c" * 600) == 200
        assert served == [b"a" * 600, b"c" * 600]

    anyio.run(scenario)


async def _into(out: list[int], status: Any) -> None:
    out.append(await status)


def test_the_pinned_sdk_has_what_session_eviction_uses(demo_store: Path):
    """`SessionLRU` uses the SDK session manager's private `_server_instances` and `_discard_session`: this
    fails if a later mcp 2.x changes them (then find the new hook, or pin the SDK)."""
    import inspect

    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from segos_pipeline.service.api import SegosService
    from segos_pipeline.service.mcp_server import build_server

    app = build_server(SegosService(demo_store))
    app.streamable_http_app()
    manager = app.session_manager
    assert isinstance(manager, StreamableHTTPSessionManager)
    check_sdk(manager)
    assert list(inspect.signature(manager._discard_session).parameters) == ["session_id", "transport"]
    assert manager._server_instances == {}
    with pytest.raises(RuntimeError, match="_discard_session"):
        check_sdk(object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        SessionLRU(app.streamable_http_app(), object(), 10)  # type: ignore[arg-type]


def test_limits_come_from_the_environment_with_clear_errors(demo_store: Path):
    assert HttpLimits.from_env({}) == HttpLimits()
    assert HttpLimits.from_env(
        {"SEGOS_MCP_MAX_SESSIONS": "50", "SEGOS_MCP_BODY_TIMEOUT_S": "2.5"}
    ) == HttpLimits(max_sessions=50, body_timeout_s=2.5)
    for var in ENV.values():
        for bad in ("0", "-1", "x", "nan", "inf"):
            with pytest.raises(ValueError, match=var):
                HttpLimits.from_env({var: bad})
    assert connection_cap(HttpLimits(), 1 << 20) == 512
    assert connection_cap(HttpLimits(), 1024) == 128  # well below the descriptor limit
    port = free_port()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "segos_pipeline.cli",
            "mcp",
            "--store",
            str(demo_store),
            "--http",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "SEGOS_MCP_MAX_SESSIONS": "lots"},
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "SEGOS_MCP_MAX_SESSIONS must be a positive integer, not 'lots'" in proc.stderr


def test_more_connections_than_descriptors_leave_the_server_up(demo_store: Path):
    """A server limited to 256 descriptors and 400 idle connections: it holds at most twice its connection
    cap (2 x 32) and closes the rest as they come, so it never runs out of descriptors itself (before, the
    accepts failed with EMFILE, and a fresh server died rendering the traceback); it writes no traceback,
    answers once they close, and stops cleanly."""
    with mcp_http_server(demo_store, nofile=256, SEGOS_MCP_HEAD_TIMEOUT_S="60") as (port, proc):
        url = f"http://127.0.0.1:{port}/mcp"
        assert anyio.run(_search_within, url, 60.0)["results"]  # loaded: the flood meets a warm server
        flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(400)]
        time.sleep(1)
        held = sum(1 for fd in os.listdir(f"/proc/{proc.pid}/fd") if _is_socket(proc.pid, fd))
        assert proc.poll() is None
        assert held <= 2 * 32 + 8, held  # the listening socket and a few of the SDK's own
        for s in flood:
            s.close()
        assert anyio.run(_search_within, url, 10.0)["results"]
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert "Traceback" not in err and "Too many open files" not in err, err


def _is_socket(pid: int, fd: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    except OSError:
        return False


def test_a_bearer_token_when_set_is_required_on_every_request(demo_store: Path):
    with mcp_http_server(demo_store, SEGOS_MCP_TOKEN="s3cret-token") as (port, _):
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx.Client(timeout=30) as http:
            refused = http.post(url, json=INITIALIZE, headers=HEADERS)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            wrong = http.post(url, json=INITIALIZE, headers={**HEADERS, "authorization": "Bearer nope"})
            assert wrong.status_code == 401
            ok = http.post(url, json=INITIALIZE, headers={**HEADERS, "authorization": "Bearer s3cret-token"})
            assert ok.status_code == 200 and ok.headers["mcp-session-id"]


def test_record_trace_has_a_quota_per_session(demo_store: Path, tmp_path: Path):
    """Each session may record a few traces a minute here; over it the call is a tool error saying when to
    retry, nothing is written, and another session still records. Clients that keep no session id (the
    SDK's client on the newest protocol) share one quota."""
    landing = tmp_path / "landing"
    env = {"SEGOS_MCP_TRACES_PER_MIN": "3", "SEGOS_LANDING": str(landing)}
    with mcp_http_server(demo_store, **env) as (port, _):
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx.Client(timeout=30) as http:
            first, second = _initialize(http, url), _initialize(http, url)
            assert [_record(http, url, first, n) for n in range(4)] == [False, False, False, True]
            assert _record(http, url, second, 4) is False

        async def sessionless() -> list[bool]:
            async with Client(url) as client:
                return [(await client.call_tool("record_trace", _trace(n))).is_error for n in (5, 6, 7, 8)]

        assert anyio.run(sessionless) == [False, False, False, True]
    lines = [json.loads(x) for f in landing.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert sorted(x["task_id"] for x in lines) == ["t0", "t1", "t2", "t4", "t5", "t6", "t7"]


def _trace(n: int) -> dict[str, Any]:
    return {"task_id": f"t{n}", "queries": ["load a csv"], "used": ["csv-loader"], "reward": 1.0}


def _record(http: httpx.Client, url: str, session: str, n: int) -> bool:
    """record_trace over a raw session; whether it was a tool error."""
    body = {"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call", "params": {"name": "record_trace"}}
    body["params"]["arguments"] = _trace(n)  # type: ignore[index]
    headers = {**HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    reply = http.post(url, json=body, headers=headers)
    assert reply.status_code == 200, reply.text
    text = reply.text
    if "text/event-stream" in reply.headers.get("content-type", ""):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return bool(json.loads(text)["result"].get("isError"))


def test_trace_quota_counts_calls_and_bytes_in_a_sliding_minute():
    from segos_pipeline.service.mcp_quota import QuotaExceeded, TraceQuota

    now = [0.0]
    quota = TraceQuota(calls=2, bytes_=1000, clock=lambda: now[0])
    a, b = "session-a", "session-b"
    quota.admit(a, 100)
    quota.admit(a, 100)
    with pytest.raises(QuotaExceeded, match="retry in 60 s"):
        quota.admit(a, 100)
    quota.admit(b, 900)  # sessions are counted apart
    with pytest.raises(QuotaExceeded):
        quota.admit(b, 200)  # 1,100 bytes in the minute
    now[0] = 61.0
    quota.admit(a, 100)  # the minute has passed
    with pytest.raises(ValueError, match="SEGOS_MCP_TRACES_PER_MIN"):
        TraceQuota.from_env({"SEGOS_MCP_TRACES_PER_MIN": "zero"})
