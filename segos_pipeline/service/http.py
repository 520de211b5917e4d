"""The HTTP transport of `segos mcp --http`: the SDK's streamable HTTP app behind limits that keep the server
answering whatever its local clients do.

- Sessions: at most `max_sessions` live. A request that opens a session (a POST without `mcp-session-id`
  that passes the SDK's Host/Origin/Content-Type checks) when the cap is reached first ends the least
  recently active session, preferring one with no request in flight, so a new client is always served.
  The SDK's idle timeout stays, shorter (`session_idle_s`).
- Connections: uvicorn's `limit_concurrency` (a 503 beyond it), twice as many held open at most (one more
  is closed as soon as it is accepted), a keep-alive timeout, a deadline for a request's head (a
  connection that sends no complete request line and headers in time is closed, so idle or slow sockets do
  not pile up), a cap on the head's size, and a deadline for reading a request's body (408). The
  descriptor limit is raised to its hard limit and the connection cap kept at an eighth of it at most.
- Memory: request bodies held at once have a budget (503 beyond it); sessions and replies in flight are
  bounded by the caps above (docs/mcp.md states the bound).
- Failed accepts (EMFILE and the like), and requests refused at the connection cap, are logged as one
  line at most every `accept_log_every_s`, with a count, never a traceback (rendering one needs
  descriptors the server has just run out of).
- A bearer token (`SEGOS_MCP_TOKEN`), when set: every request must carry `Authorization: Bearer <token>`
  (401 otherwise), so another local user or a page the browser was led to cannot call the tools.

Every limit has a default here and an environment variable (`ENV`), documented in docs/mcp.md.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import resource
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
SESSION_HEADER = b"mcp-session-id"


@dataclass(frozen=True)
class HttpLimits:
    """The HTTP transport's limits (defaults documented in docs/mcp.md, "HTTP limits")."""

    max_sessions: int = 1000
    session_idle_s: float = 600.0
    max_connections: int = 512
    keep_alive_s: int = 5
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    body_budget_bytes: int = 64 * 1024 * 1024
    max_head_bytes: int = 16 * 1024
    accept_log_every_s: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HttpLimits:
        """The defaults, each overridden by its variable in `env` (see `ENV`); a value that is not a
        positive number is a ValueError naming the variable."""
        values: dict[str, Any] = {}
        kinds = {f.name: f.type for f in fields(cls)}
        for name, var in ENV.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            kind = int if kinds[name] in (int, "int") else float
            try:
                value = kind(raw)
            except ValueError:
                value = 0
            if not value > 0 or value != value or value == float("inf"):
                what = "a positive integer" if kind is int else "a positive number of seconds"
                raise ValueError(f"{var} must be {what}, not {raw!r}")
            values[name] = value
        return cls(**values)


ENV = {
    "max_sessions": "SEGOS_MCP_MAX_SESSIONS",
    "session_idle_s": "SEGOS_MCP_SESSION_IDLE_S",
    "max_connections": "SEGOS_MCP_MAX_CONNECTIONS",
    "keep_alive_s": "SEGOS_MCP_KEEP_ALIVE_S",
    "head_timeout_s": "SEGOS_MCP_HEAD_TIMEOUT_S",
    "body_timeout_s": "SEGOS_MCP_BODY_TIMEOUT_S",
    "body_budget_bytes": "SEGOS_MCP_BODY_BUDGET_BYTES",
    "max_head_bytes": "SEGOS_MCP_MAX_HEAD_BYTES",
    "accept_log_every_s": "SEGOS_MCP_ACCEPT_LOG_EVERY_S",
}


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one (as far as the kernel allows) and return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # e.g. above fs.nr_open: keep the soft limit we have
            pass
    return soft


def connection_cap(limits: HttpLimits, nofile: int) -> int:
    """The connection cap (503 beyond it): the configured one, but at most an eighth of the descriptor
    limit. At most twice as many connections are held (`bounded_protocol`)."""
    return max(1, min(limits.max_connections, nofile // 8))


def accept_backlog(cap: int, nofile: int) -> int:
    """The listen backlog, which is also how many connections asyncio accepts in one go, all before any of
    them can be closed (and a few such bursts can be in flight): uvicorn's 2048, or less so that held and
    just accepted sockets stay within half the descriptors, the rest free for the store's files and the
    rest of the process. A burst of new connections beyond it waits for the client's SYN retry (1 s)."""
    return max(8, min(2048, (nofile // 2 - 2 * cap) // 3))


class SessionLRU:
    """ASGI middleware in front of the SDK app: tracks the last activity of each session and, when a request
    would open a session beyond `max_sessions`, discards the least recently active one first.

    The SDK has no public way to end a session from the server side: this uses the session manager's
    `_server_instances` (live sessions by id) and `_discard_session` (forget, then terminate) of mcp 2.3.
    `check_sdk` fails at start, and tests/integration/test_mcp_http_limits.py fails, if a later 2.x SDK
    changes them."""

    def __init__(self, app: ASGIApp, manager: StreamableHTTPSessionManager, max_sessions: int):
        check_sdk(manager)
        self.app = app
        self.manager = manager
        self.max_sessions = max_sessions
        self.security = TransportSecurityMiddleware(manager.security_settings)
        self.seen: OrderedDict[str, int] = OrderedDict()  # session id -> requests in flight, LRU first
        self.opening = 0  # requests admitted here that may open a session and have not answered yet

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != MCP_PATH:
            await self.app(scope, receive, send)
            return
        session = _header(scope, SESSION_HEADER)
        if session is None:
            await self._open(scope, receive, send)
        else:
            await self._use(session, scope, receive, send)

    async def _use(self, session: str, scope: Scope, receive: Receive, send: Send) -> None:
        if session not in self.seen:  # unknown, expired or evicted: the SDK answers 404
            await self.app(scope, receive, send)
            return
        self.seen[session] += 1
        self.seen.move_to_end(session)
        try:
            await self.app(scope, receive, send)
        finally:
            if session in self.seen:
                self.seen[session] -= 1
                self.seen.move_to_end(session)

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        refused = request.method != "POST" or await self.security.validate_request(request, is_post=True)
        if refused:  # the SDK refuses it without keeping a session: nothing to make room for
            await self.app(scope, receive, send)
            return
        self.opening += 1
        answered = False

        async def learn(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start" and not answered:
                answered = True
                self.opening -= 1
                session = _header(message, SESSION_HEADER)
                if session is not None and message["status"] < 400:
                    self._remember(session)
            await send(message)

        try:
            await self._make_room()
            await self.app(scope, receive, learn)
        finally:
            if not answered:
                self.opening -= 1

    async def _make_room(self) -> None:
        live = self.manager._server_instances
        while len(live) + self.opening > self.max_sessions:
            victim = self._victim(live)
            if victim is None:  # every live session is still opening: the SDK answers 503
                return
            log.debug("session cap %d reached: ending session %s", self.max_sessions, victim)
            self.seen.pop(victim, None)
            # pops the session before its first await, so a concurrent opener sees the room at once
            await self.manager._discard_session(victim, live[victim])

    def _victim(self, live: Mapping[str, Any]) -> str | None:
        """The least recently active live session with no request in flight, else the least recently
        active one; sessions the SDK ended meanwhile (idle timeout, DELETE) are forgotten on the way."""
        busy = None
        for session, in_flight in list(self.seen.items()):
            if session not in live:
                del self.seen[session]
            elif not in_flight:
                return session
            elif busy is None:
                busy = session
        return busy

    def _remember(self, session: str) -> None:
        self.seen[session] = 0
        self.seen.move_to_end(session)
        if len(self.seen) > 2 * self.max_sessions:  # ended sessions are otherwise only dropped at eviction
            live = self.manager._server_instances
            for gone in [s for s in self.seen if s not in live]:
                del self.seen[gone]


def check_sdk(manager: StreamableHTTPSessionManager) -> None:
    """Fail loudly at start if the SDK's session manager no longer has what `SessionLRU` uses."""
    instances = getattr(manager, "_server_instances", None)
    discard = getattr(manager, "_discard_session", None)
    if not isinstance(instances, dict) or not asyncio.iscoroutinefunction(discard):
        raise RuntimeError(
            "the installed mcp SDK's StreamableHTTPSessionManager has no _server_instances dict or async "
            "_discard_session (segos_pipeline/service/http.py relies on them to evict sessions); pin mcp 2.3"
        )


class BodyDeadline:
    """ASGI middleware for request bodies, which uvicorn neither times nor bounds in total:

    - a body must arrive within `timeout_s` of its head, else 408 and the connection is closed;
    - the bodies held at once (from their first byte until their request is answered) total at most
      `budget_bytes`; a body that would go beyond gets 503 and its connection is closed.

    The body is read here (up to `max_bytes` + 1, beyond which the SDK answers 413), then replayed."""

    def __init__(self, app: ASGIApp, timeout_s: float, max_bytes: int, budget_bytes: int):
        self.app = app
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.budget_bytes = budget_bytes
        self.held = 0  # bytes of the bodies being read or served now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        try:
            with anyio.move_on_after(self.timeout_s) as deadline:
                while True:
                    message = await receive()
                    messages.append(message)
                    if message["type"] != "http.request":
                        break
                    chunk = len(message.get("body", b""))
                    if self.held + chunk > self.budget_bytes:
                        messages.clear()
                        await _answer(send, 503, b"Server busy: too many request bodies at once\n")
                        return
                    size += chunk
                    self.held += chunk
                    if not message.get("more_body", False) or size > self.max_bytes:
                        break
            if deadline.cancelled_caught:
                messages.clear()
                await _answer(send, 408, b"Request body not received in time\n")
                return

            async def replay() -> Message:
                return messages.pop(0) if messages else await receive()

            await self.app(scope, replay, send)
        finally:
            self.held -= size


async def _answer(
    send: Send, status: int, body: bytes, header: tuple[bytes, bytes] = (b"connection", b"close")
) -> None:
    headers = [(b"content-type", b"text/plain"), header]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BearerToken:
    """ASGI middleware: a request without `Authorization: Bearer <token>` is answered 401 and goes no
    further (compared in constant time)."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = (_header(scope, b"authorization") or "").encode("latin-1")
            if not hmac.compare_digest(given, self.expected):
                await _answer(send, 401, b"A bearer token is required\n", (b"www-authenticate", b"Bearer"))
                return
        await self.app(scope, receive, send)


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def bounded_protocol(head_timeout_s: float, max_open: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with two bounds of its own.

    - A deadline for each request's head: from the connection's start, and from the end of each response,
      the next request line and headers must be complete within `head_timeout_s`. uvicorn times only idle
      keep-alive connections, not one that never sent a request, so silent or trickling sockets would
      otherwise hold descriptors and connection slots forever.
    - At most `max_open` connections: one accepted beyond that is closed at once. uvicorn's
      `limit_concurrency` answers 503 but keeps accepting, so without this a flood of idle connections
      takes every descriptor and then the store's files cannot be opened (about 20,000 idle
      connections did that in a test)."""

    class BoundedProtocol(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            if len(self.connections) > max_open:
                transport.close()
                return
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            self.head_timer = self.loop.call_later(head_timeout_s, self._late)

        def _late(self) -> None:
            cycle = self.cycle
            if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()  # no request head in time (a request being served is left alone)

    return BoundedProtocol


ACCEPT_ERROR = "socket.accept() out of system resource"
# asyncio's accept machinery (3.11): its retries after a failed accept are one timer per failed attempt, and
# once the server closes its socket each of them fails in turn ("Invalid file descriptor: -1")
ACCEPT_CALLBACKS = ("BaseSelectorEventLoop._start_serving(", "BaseSelectorEventLoop._accept_connection(")


def is_accept_error(context: Mapping[str, Any]) -> bool:
    """Is this event loop error report about accepting connections (counted, not each logged)?"""
    message = str(context.get("message", ""))
    return message == ACCEPT_ERROR or any(f"Exception in callback {c}" in message for c in ACCEPT_CALLBACKS)


class AcceptErrorLog:
    """An event loop exception handler: failed accepts (out of descriptors or memory) become one log line
    at most every `every_s` seconds, counting those in between, without a traceback; anything else goes to
    the loop's previous handler.

    asyncio (3.11) reports a failed accept once per pending connection, with its traceback, in a tight
    loop while descriptors are out. And the handler must never raise:
    an exception out of it escapes the event loop and ends the server. That happened with the SDK's rich
    log handler, which imports modules while writing its first line, and fails to without a descriptor;
    so the line goes through `plain_logger`, and a report that cannot be written is dropped (its count is
    kept for the next line)."""

    def __init__(
        self,
        every_s: float,
        logger: logging.Logger = log,
        previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.every_s = every_s
        self.logger = logger
        self.previous = previous
        self.clock = clock
        self.last: float | None = None  # when the last line was written
        self.unsaid = 0  # failed accepts since then
        self.reason = ""
        self.flush: asyncio.TimerHandle | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not is_accept_error(context):
            try:
                if self.previous is not None:
                    self.previous(loop, context)
                else:
                    loop.default_exception_handler(context)
            except Exception as exc:  # e.g. its log handler is out of descriptors too
                self._write(
                    "event loop error: %s (%r; reporting it failed: %r)",
                    context.get("message"),
                    context.get("exception"),
                    exc,
                )
            return
        exc = context.get("exception")
        self.reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        self.unsaid += 1
        now = self.clock()
        if self.last is None or now - self.last >= self.every_s:
            self._say(now)
        elif self.flush is None:  # the count is said even if the failures stop now
            self.flush = loop.call_later(self.last + self.every_s - now, self._said_late)

    def _said_late(self) -> None:
        self.flush = None
        if self.unsaid:
            self._say(self.clock())

    def _say(self, now: float) -> None:
        if self.flush is not None:
            self.flush.cancel()
            self.flush = None
        said = self._write(
            "cannot accept connections (%s): %d failed accept(s) in the last %.0f s; the server goes on "
            "answering open connections",
            self.reason,
            self.unsaid,
            self.every_s,
        )
        if said:
            self.unsaid = 0
        self.last = now

    def _write(self, message: str, *args: object) -> bool:
        try:
            self.logger.error(message, *args)
        except Exception:
            return False
        return True


class RefusedLog(logging.Filter):
    """A filter for uvicorn's log: its line per request refused at the connection cap ("Exceeded
    concurrency limit.") passes at most once every `every_s` seconds, with the count of refusals since
    the last one. A flood would otherwise write a line per request, and a stderr nobody reads (a pipe)
    fills and then blocks the server."""

    MESSAGE = "Exceeded concurrency limit."

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self.last: float | None = None
        self.unsaid = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != self.MESSAGE:
            return True
        self.unsaid += 1
        now = self.clock()
        if self.last is not None and now - self.last < self.every_s:
            return False
        record.msg = "Exceeded concurrency limit: %d request(s) answered 503 in the last %.0f s"
        record.args = (self.unsaid, self.every_s)
        self.unsaid, self.last = 0, now
        return True


def plain_logger() -> logging.Logger:
    """The transport's own log on stderr, formatted like `segos mcp:` lines, through a plain stream handler
    that needs no descriptor or import to write (not the root logger's: the SDK gives it a rich handler)."""
    logger = logging.getLogger(__name__ + ".plain")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("segos mcp: %(message)s"))
        logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def build_asgi(app: MCPServer, host: str, limits: HttpLimits, token: str | None = None) -> ASGIApp:
    """The SDK's streamable HTTP app (at /mcp) behind `BodyDeadline` and `SessionLRU`, and `BearerToken`
    first when a token is given."""
    sdk_app = app.streamable_http_app(
        streamable_http_path=MCP_PATH,
        session_idle_timeout=limits.session_idle_s,
        max_sessions=limits.max_sessions,
        host=host,
    )
    manager = app.session_manager
    sessions = SessionLRU(sdk_app, manager, limits.max_sessions)
    max_body = manager.max_request_body_size
    bounded = BodyDeadline(
        sessions, limits.body_timeout_s, max_body, max(limits.body_budget_bytes, max_body + 1)
    )
    return BearerToken(bounded, token) if token else bounded


async def serve_http(
    app: MCPServer, host: str, port: int, limits: HttpLimits, token: str | None = None
) -> None:  # pragma: no cover
    """Serve `app` over streamable HTTP on (host, port) until stopped, within `limits` (tested through real
    server processes in tests/integration/test_mcp_http_limits.py)."""
    import uvicorn

    nofile = raise_nofile_limit()
    cap = connection_cap(limits, nofile)
    config = uvicorn.Config(
        build_asgi(app, host, limits, token),
        host=host,
        port=port,
        log_level=app.settings.log_level.lower(),
        http=bounded_protocol(limits.head_timeout_s, 2 * cap),
        limit_concurrency=cap,
        backlog=accept_backlog(cap, nofile),
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_head_bytes,
    )
    # after the Config, which sets up uvicorn's loggers
    logging.getLogger("uvicorn.error").addFilter(RefusedLog(limits.accept_log_every_s))
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(AcceptErrorLog(limits.accept_log_every_s, plain_logger(), previous))
    await uvicorn.Server(config).serve()
