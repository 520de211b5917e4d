"""The per-session `record_trace` quota of the MCP server: traces and bytes a session may record a minute."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping

from mcp.server.mcpserver import Context


class QuotaExceeded(ValueError):
    """A session recorded more traces, or more trace bytes, in the last minute than its quota allows."""


class TraceQuota:
    """What one session may record with `record_trace` in any minute: `calls` traces and `bytes_` bytes of
    their content (queries, used names, CTRF report), so one client cannot fill the landing folder's disk
    (one session wrote tens of MB/s before). Keyed by the session's id (`session_key`: clients without one
    share a key); the `SESSIONS` most recently seen are remembered. Defaults: 600 traces and 16 MiB a
    minute, `$SEGOS_MCP_TRACES_PER_MIN` and `$SEGOS_MCP_TRACE_MB_PER_MIN` (docs/mcp.md)."""

    WINDOW_S = 60.0
    SESSIONS = 10_000

    def __init__(
        self, calls: int = 600, bytes_: int = 16 * 1024 * 1024, clock: Callable[[], float] = time.monotonic
    ):
        self.calls, self.bytes, self.clock = calls, bytes_, clock
        self._seen: collections.OrderedDict[str, collections.deque[tuple[float, int]]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TraceQuota:
        calls = env.get("SEGOS_MCP_TRACES_PER_MIN") or "600"
        megabytes = env.get("SEGOS_MCP_TRACE_MB_PER_MIN") or "16"
        try:
            quota = cls(int(calls), int(float(megabytes) * 1024 * 1024))
        except ValueError:
            quota = cls(0, 0)
        if quota.calls <= 0 or quota.bytes <= 0:
            raise ValueError(
                "SEGOS_MCP_TRACES_PER_MIN and SEGOS_MCP_TRACE_MB_PER_MIN must be positive numbers, not "
                f"{calls!r} and {megabytes!r}"
            )
        return quota

    def admit(self, session: str, size: int) -> None:
        """Count one trace of `size` bytes for `session`, or raise QuotaExceeded (nothing counted)."""
        now = self.clock()
        with self._lock:
            seen = self._seen.setdefault(session, collections.deque())
            self._seen.move_to_end(session)
            if len(self._seen) > self.SESSIONS:
                self._seen.popitem(last=False)
            while seen and seen[0][0] <= now - self.WINDOW_S:
                seen.popleft()
            used = sum(b for _, b in seen)
            if len(seen) >= self.calls or used + size > self.bytes:
                wait = max(0.0, seen[0][0] + self.WINDOW_S - now) if seen else self.WINDOW_S
                raise QuotaExceeded(
                    f"record_trace quota: at most {self.calls} traces and {self.bytes // (1024 * 1024)} MiB "
                    f"a minute per session ({len(seen)} traces, {used:,} bytes in the last minute); "
                    f"retry in {wait:.0f} s"
                )
            seen.append((now, size))


def session_key(ctx: Context) -> str:
    """Which client session a request belongs to: its `mcp-session-id` over HTTP (the SDK builds a session
    object per request there). A stdio server's one client, and HTTP clients that keep no session (the
    SDK's own client on the newest protocol sends none), share one key: together they get one quota."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return (headers.get("mcp-session-id") if headers is not None else None) or "no session"
