"""`segos mcp`: the MCP server over a snapshot store (official `mcp` SDK, 2.x `MCPServer`).

Every tool is a thin call into `SegosService` (api.py), which picks the version per request: the pinned one,
or the newest committed one (switching between requests when a new version lands). Expected failures
(unknown skill or version, malformed trace, bad argument) become MCP tool errors (`is_error` with the
reason); anything unexpected becomes the SDK's generic tool error. The server never exits on a bad request.

Tools are `async` on purpose: the SDK runs sync tools in a worker thread, which costs a thread hop per call;
requests here are sub-millisecond CPU work, so running them on the event loop is faster and also means
requests never run concurrently (a version switch can only happen between requests).

Run: `segos mcp --store STORE [--version V] [--http --port 8765] [--landing DIR]`, or
`python -m segos_pipeline.mcp_server ...` (same options).
"""

from __future__ import annotations

import asyncio
import functools
import os
import stat
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, cast

import anyio
import pydantic_core
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from . import __version__
from .api import SegosService
from .snapshot import SnapshotError

_MAX_LINE = 64 * 1024 * 1024  # longest JSON-RPC message (one line) the stdio transport accepts
INSTRUCTIONS = (
    "segos retrieves skills (SKILL.md packages) for a task. Call retrieve_skill_bundle with the task to get "
    "a "
    "bounded bundle of skills in the order to use them, each with why it is included; search_skills gives a "
    "cheap overview first. After the attempt, call record_trace with the skills you actually used (in the "
    "order you first used them) and the reward (0..1) or a CTRF test report, so the graph learns from it."
)

# Tool parameter types live at module level: the SDK evaluates the (postponed) annotations in these globals.
Version = Annotated[
    str | None, Field(description="Answer from this version (id, prefix or vN) instead of the served one.")
]


def _tool_errors(fn: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[CallToolResult]]:
    """Expected failures → ToolError with the library's actionable message; results → `CallToolResult`.

    The result carries the dict as `structured_content` and, for clients that read only text, the same
    JSON (compact) as one text block. Building it here skips the SDK's generic conversion (an indented
    dump plus a validation pass over the whole bundle), which is most of the per-call server cost.
    """

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            obj = await fn(*args, **kwargs)
        except (SnapshotError, ValueError, KeyError, FileNotFoundError) as exc:
            raise ToolError(str(exc)) from None
        text = pydantic_core.to_json(obj, fallback=str).decode()
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=obj)

    return wrapper


def build_server(service: SegosService, name: str = "segos") -> MCPServer:
    """The MCP server whose tools call `service`."""
    app: MCPServer = MCPServer(
        name,
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        warn_on_duplicate_tools=False,
    )

    @app.tool(structured_output=False)
    @_tool_errors
    async def search_skills(
        query: Annotated[str, Field(description="The task, in natural language.")],
        top_k: Annotated[int, Field(description="How many skills to list (1-100).")] = 10,
        version: Version = None,
    ) -> dict[str, Any]:
        """Ranked overview of the skills for a task: id, name, capability and score (no skill bodies)."""
        return service.search(query, top_k, version=version)

    @app.tool(structured_output=False)
    @_tool_errors
    async def retrieve_skill_bundle(
        query: Annotated[str, Field(description="The task, in natural language.")],
        top_n: Annotated[int | None, Field(description="Bundle size (default 5).")] = None,
        max_chars: Annotated[int | None, Field(description="Global character budget (default 9000).")] = None,
        version: Version = None,
    ) -> dict[str, Any]:
        """The skills to use for a task, hydrated under the character budgets and listed in execution order
        (prerequisites first), with the edges among them and why each one is included."""
        return service.retrieve_bundle(query, top_n, max_chars, version=version)

    @app.tool(structured_output=False)
    @_tool_errors
    async def hydrate_skills(
        names: Annotated[list[str], Field(description="Skill ids or names.")],
        max_chars: Annotated[int | None, Field(description="Global character budget (default 9000).")] = None,
        version: Version = None,
    ) -> dict[str, Any]:
        """The readable text of the named skills (identity, contract, body), clipped to the budgets."""
        return service.hydrate(names, max_chars, version=version)

    @app.tool(structured_output=False)
    @_tool_errors
    async def get_skill_detail(
        name: Annotated[str, Field(description="Skill id or name.")], version: Version = None
    ) -> dict[str, Any]:
        """Every parsed field of one skill, its full body and its edge counts by relation."""
        return service.skill_detail(name, version=version)

    @app.tool(structured_output=False)
    @_tool_errors
    async def get_skill_neighbors(
        name: Annotated[str, Field(description="Skill id or name.")], version: Version = None
    ) -> dict[str, Any]:
        """Typed out- and in-edges of one skill (semantic, workflow, dependency, alternative, avoid)."""
        return service.neighbors(name, version=version)

    @app.tool(structured_output=False)
    @_tool_errors
    async def list_versions() -> dict[str, Any]:
        """Every committed graph version, oldest first, and which one is served."""
        return service.list_versions()

    @app.tool(structured_output=False)
    @_tool_errors
    async def get_status() -> dict[str, Any]:
        """The version served (and whether pinned), its counts and configuration, and the trace landing."""
        return service.status()

    @app.tool(structured_output=False)
    @_tool_errors
    async def record_trace(
        task_id: Annotated[str, Field(description="Stable id of the task attempted.")],
        queries: Annotated[
            list[str | dict[str, Any]],
            Field(description="Queries issued: text, or {text, retrieved?, seeds?}."),
        ],
        used: Annotated[list[str], Field(description="Skills actually used, in first-use order.")],
        reward: Annotated[float | None, Field(description="Outcome in [0, 1] (or give ctrf).")] = None,
        ctrf: Annotated[dict[str, Any] | None, Field(description="A CTRF test report to derive it.")] = None,
        agent: Annotated[str | None, Field(description="Model/harness that ran the attempt.")] = None,
        attempt: Annotated[int | None, Field(description="Attempt number (default 1).")] = None,
        trace_id: Annotated[str | None, Field(description="Default: a fresh id.")] = None,
    ) -> dict[str, Any]:
        """Report how an attempt went. Validated like ingestion and appended to the trace landing folder
        that the next evolution window reads."""
        return service.record_trace(
            task_id, queries, used, reward, ctrf, agent, trace_id=trace_id, attempt=attempt
        )

    return app


class _PipeLines:
    """Lines of a pipe read on the event loop (the SDK's default stdin reader goes through a worker thread
    for every line, which is a large share of a sub-millisecond request)."""

    def __init__(self, reader: asyncio.StreamReader):
        self._reader = reader

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _PipeWriter:
    """Text writes to a pipe with asyncio flow control (no worker thread per write and flush)."""

    def __init__(self, writer: asyncio.StreamWriter):
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def _run_stdio(app: MCPServer) -> None:
    """`app` over stdin/stdout through event-loop pipe transports.

    Like the SDK's transport, it takes the wire off fds 0/1 first (0 → /dev/null, 1 → stderr), so nothing a
    handler or library prints can corrupt the protocol. Falls back to the SDK's transport when stdin or
    stdout is not a pipe (e.g. redirected from a file).
    """
    if not (_is_pipe(0) and _is_pipe(1)):
        await app.run_stdio_async()
        return
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=_MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", 0)
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    low = app._lowlevel_server  # what MCPServer.run_stdio_async drives too
    stdin = cast(Any, _PipeLines(reader))
    stdout = cast(Any, _PipeWriter(writer))
    async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
        await low.run(read_stream, write_stream, low.create_initialization_options())


def serve(
    service: SegosService, *, http: bool = False, host: str = "127.0.0.1", port: int = 8765
) -> None:  # pragma: no cover - exercised through subprocess tests
    app = build_server(service)
    if http:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the HTTP transport only listens on the loopback interface (127.0.0.1)")
        app.run("streamable-http", host=host, port=port)
    else:
        anyio.run(_run_stdio, app)


def main() -> None:  # pragma: no cover - the `segos mcp` command, runnable without the CLI group
    from .cli_service import mcp_command

    mcp_command(prog_name="python -m segos_pipeline.mcp_server")


if __name__ == "__main__":  # pragma: no cover
    main()
