"""The model-backed L3 editor against a real local HTTP server that misbehaves in each way a user met:
malformed replies, 5xx/429 then success, oversized bodies, a server dripping one byte at a time. Each
costs at most one revision and its reason; the round completes."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import polars as pl
import pytest

from segos_pipeline import RetrievalConfig, SnapshotStore, build_cold_start
from segos_pipeline.config import EvolutionConfig
from segos_pipeline.evolution.editor import Critique, EditorError, OpenAICompatibleEditor, reply_text
from segos_pipeline.evolution.round import evolve, evolve_round
from segos_pipeline.evolution.traces import QueryRecord, TraceRecord, trace_frame
from segos_pipeline.store.layout import REVISIONS

from ..conftest import write_skill

FILLER = " ".join(f"word{i}" for i in range(150))
SKILLS = {
    "archiver": ("Archive files into columnar bundles.", "Bundles files."),
    "reporter": (
        "Summarise results in a report.",
        f"Stores the report with snappy columnar archive storage. {FILLER}",
    ),
    "digest": ("Summarise weekly results digest.", "Sends a digest."),
}
WITNESS = "snappy columnar archive"
GOOD = "Summarise results in a report; stores it as snappy columnar archive storage."
TOP1 = RetrievalConfig(top_n=1)


def _ok(content: str = GOOD) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


Action = Callable[[BaseHTTPRequestHandler], None]


class _Script(BaseHTTPRequestHandler):
    """Answers the n-th request with the n-th action of `actions` (the last one repeats)."""

    actions: ClassVar[list[Action]] = []
    hits: ClassVar[int] = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with _Script.lock:
            n = _Script.hits
            _Script.hits += 1
        action = _Script.actions[min(n, len(_Script.actions) - 1)]
        # the client may hang up (deadline, size cap): what the tests expect
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            action(self)

    def log_message(self, *args: object) -> None:
        pass


def send(status: int, body: bytes, headers: dict[str, str] | None = None) -> Action:
    def act(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    return act


def stream_without_length(total: int, chunk: int = 65_536) -> Action:
    """A body of `total` bytes with no Content-Length (read to the end of the connection)."""

    def act(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        sent = 0
        while sent < total:
            h.wfile.write(b" " * min(chunk, total - sent))
            sent += chunk

    return act


def drip(interval: float, limit: int = 60, headers_too: bool = False) -> Action:
    """One byte every `interval` seconds (at most `limit` bytes, so the server stops by itself)."""

    def act(h: BaseHTTPRequestHandler) -> None:
        body = _ok()
        if headers_too:
            raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        else:
            h.send_response(200)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.flush()
            raw = body
        for byte in raw[:limit]:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(interval)

    return act


@pytest.fixture
def server() -> Iterator[Callable[..., str]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Script)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def script(*actions: Action) -> str:
        _Script.actions, _Script.hits = list(actions), 0
        return f"http://127.0.0.1:{httpd.server_port}/v1"

    yield script
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def store(tmp_path):
    for name, (desc, body) in SKILLS.items():
        write_skill(tmp_path / "lib", name, f"name: {name}\ndescription: {desc}", f"# {name}\n\n{body}\n")
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(tmp_path / "lib", st)
    return st


def _records():
    q = QueryRecord(WITNESS, ["archiver"], ["archiver"])
    return [TraceRecord("t1", "t1", ["reporter"], 1.0, [q], window="w")]


def _config(endpoint: str, **limits) -> EvolutionConfig:
    return EvolutionConfig(l1_topology=False, l2_weights=False).with_overrides(
        editor="openai", editor_endpoint=endpoint, editor_model="m", **limits
    )


def _round(store, endpoint: str, **limits):
    return evolve_round(store.load(), trace_frame(_records()), _config(endpoint, **limits), TOP1)


def _editor(endpoint: str, **limits) -> OpenAICompatibleEditor:
    return OpenAICompatibleEditor(endpoint, "m", **limits)


CRIT = Critique("reporter", WITNESS, ["snappy"], "the description lacks snappy")

MALFORMED = {
    "empty choices": (b'{"choices": []}', "'choices' is empty"),
    "a JSON list": (b"[]", "the JSON is a list, not an object"),
    "null choice": (b'{"choices": [null]}', "choices[0] is null"),
    "no message": (b'{"choices": [{"text": "x"}]}', "choices[0].message is null"),
    "null content": (b'{"choices": [{"message": {"content": null}}]}', "content is null"),
    "numeric content": (b'{"choices": [{"message": {"content": 7}}]}', "content is a number"),
    "choices not a list": (b'{"choices": {"0": 1}}', "'choices' is an object"),
    "not JSON": (b"<html>busy</html>", "not JSON"),
    "error object": (b'{"error": {"message": "model overloaded"}}', "endpoint error: model overloaded"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_reply_skips_the_revision_with_its_reason(store, server, name):
    body, reason = MALFORMED[name]
    r = _round(store, server(send(200, body)))
    rev = r.revisions.row(0, named=True)
    assert r.counters["l3"]["editor_errors"] == 1 and r.counters["l3"]["committed"] == 0
    assert rev["outcome"].startswith("editor error: malformed reply") or "endpoint error" in rev["outcome"]
    assert reason in rev["outcome"]
    assert not rev["committed"] and rev["after"] is None
    assert r.nodes.filter(pl.col("id") == "reporter")["description"][0] == SKILLS["reporter"][0]


def test_the_reason_is_stored_in_the_versions_revisions_table(store, server):
    endpoint = server(send(200, b'{"choices": [null]}'))
    m = evolve(store, "w", config=_config(endpoint), retrieval=TOP1, traces=trace_frame(_records()))
    stored = store.load(m["version"]).read_extra(REVISIONS)
    assert stored.height == 1 and "choices[0] is null" in stored["outcome"][0]
    assert m["counters"]["l3"]["editor_errors"] == 1


def test_server_errors_are_retried_then_the_revision_succeeds(store, server):
    endpoint = server(send(500, b"oops"), send(503, b""), send(200, _ok()))
    r = _round(store, endpoint, editor_backoff_s=0.05)
    assert _Script.hits == 3
    assert r.counters["l3"]["committed"] == 1, r.revisions["outcome"].to_list()


def test_429_honours_retry_after_and_a_bounded_count_gives_up(server):
    endpoint = server(send(429, b"slow down", {"Retry-After": "0"}), send(200, _ok()))
    assert _editor(endpoint, backoff_s=5.0).propose("x", CRIT, "") == GOOD  # Retry-After 0, not 5 s
    endpoint = server(send(500, b"down"))
    with pytest.raises(EditorError, match=r"HTTP 500: down \(gave up after 3 attempts\)"):
        _editor(endpoint, retries=2, backoff_s=0.01).propose("x", CRIT, "")
    assert _Script.hits == 3


def test_client_errors_are_not_retried(server):
    endpoint = server(send(401, b'{"error": "bad key"}'))
    with pytest.raises(EditorError, match="HTTP 401"):
        _editor(endpoint, retries=3, backoff_s=0.01).propose("x", CRIT, "")
    assert _Script.hits == 1


def test_no_retry_is_started_that_the_deadline_cannot_hold(server):
    endpoint = server(send(503, b""))
    t = time.perf_counter()
    with pytest.raises(EditorError, match="no time left for a retry"):
        _editor(endpoint, deadline_s=1.0, retries=5, backoff_s=2.0).propose("x", CRIT, "")
    assert time.perf_counter() - t < 1.0 and _Script.hits == 1


@pytest.mark.parametrize(
    "action",
    [
        send(200, b'{"choices": [' + b" " * 300_000 + b"]}"),  # declared length over the cap
        stream_without_length(3_000_000),  # no length: streamed and cut at the cap
    ],
    ids=["declared", "streamed"],
)
def test_an_oversized_reply_is_cut_at_the_cap(store, server, action):
    r = _round(store, server(action), editor_max_response_bytes=100_000)
    assert r.counters["l3"]["editor_errors"] == 1
    assert "response too large" in r.revisions["outcome"][0] and "100000" in r.revisions["outcome"][0]


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "status-line"])
def test_a_dripping_server_is_cut_at_the_deadline(store, server, headers_too):
    deadline = 1.5
    endpoint = server(drip(0.25, headers_too=headers_too))
    t = time.perf_counter()
    with pytest.raises(EditorError, match="deadline"):
        _editor(endpoint, deadline_s=deadline).propose("x", CRIT, "")
    assert time.perf_counter() - t < deadline + 1.0  # a per-read timeout would run for 60 × 0.25 s
    t = time.perf_counter()
    r = _round(store, endpoint, editor_timeout_s=deadline)
    elapsed = time.perf_counter() - t
    assert r.counters["l3"]["editor_errors"] == 1 and "deadline" in r.revisions["outcome"][0]
    assert elapsed < deadline + 5.0  # the round around it: a few hundred ms on this library


def test_the_round_budget_stops_asking_the_editor(store, server):
    endpoint = server(send(200, _ok()))
    r = _round(store, endpoint, editor_round_budget_s=0.0)
    assert _Script.hits == 0 and r.counters["l3"]["editor_over_budget"] == 1
    assert "budget" in r.revisions["outcome"][0]


def test_an_async_host_can_call_the_editor(server):
    import asyncio

    endpoint = server(send(200, _ok()))

    async def host() -> str | None:
        return _editor(endpoint).propose("x", CRIT, "")

    assert asyncio.run(host()) == GOOD


def test_reply_text_accepts_content_parts_and_collapses_whitespace():
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": " a\n b "}, {"type": "x"}]}}]}
    assert reply_text(json.dumps(parts).encode()) == "a b"


def test_limits_are_checked():
    with pytest.raises(ValueError, match="positive"):
        OpenAICompatibleEditor("http://127.0.0.1:9/v1", "m", deadline_s=0)
