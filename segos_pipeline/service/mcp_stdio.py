"""The MCP server's stdio transport: pipe transports on the event loop that hand each JSON-RPC line straight
to the SDK's low-level server (docs/mcp.md), the SDK's own transport when stdin/stdout are not pipes."""

from __future__ import annotations

import asyncio
import os
import stat

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter

_MAX_LINE = 64 * 1024 * 1024  # longest JSON-RPC message (one line) the stdio transport accepts


class _WireIn:
    """The read side of the JSON-RPC wire, handed to `Server.run` directly: `receive` reads one line and
    parses it on the event loop, in the task that asks for it.

    The SDK's `stdio_server` runs a reader task that passes each parsed message on through a memory stream,
    which adds a task switch per message; at sub-millisecond requests that hop is measurable. Parsing is the
    SDK's own (`jsonrpc_message_adapter`, lines decoded with errors="replace"), and a line that fails it is
    handed on as the exception, as the SDK's transport does (the dispatcher logs and drops it).
    """

    def __init__(self, reader: asyncio.StreamReader):
        self._reader = reader

    async def receive(self) -> SessionMessage | Exception:
        try:
            line = await self._reader.readline()
        except ValueError as exc:  # a line over _MAX_LINE: dropped like a malformed one, the server goes on
            return exc
        if not line:
            raise anyio.EndOfStream
        text = line.decode("utf-8", errors="replace")
        try:
            message = jsonrpc_message_adapter.validate_json(text, by_name=False)
        except Exception as exc:
            return exc
        return SessionMessage(message)

    def __aiter__(self) -> _WireIn:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> _WireIn:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _WireOut:
    """The write side: `send` serializes the message (as the SDK's transport does) and writes it as one line
    from the sending task, with asyncio flow control; no writer task, memory stream or worker thread.

    One `write` call per message, so concurrent senders never interleave lines. A lost pipe is reported as
    a broken stream, which the dispatcher treats as a closed connection rather than a handler failure.
    """

    def __init__(self, writer: asyncio.StreamWriter):
        self._writer = writer
        self._closed = False

    async def send(self, item: SessionMessage) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        line = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        try:
            self._writer.write(line.encode("utf-8"))
            await self._writer.drain()
        except ConnectionError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> _WireOut:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _is_pipe(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def run_stdio(app: MCPServer) -> None:
    """`app` over stdin/stdout through event-loop pipe transports (`_WireIn`, `_WireOut`).

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
    # The SDK has no public hook for a transport of one's own, so this drives the low-level server that
    # MCPServer.run_stdio_async drives too; an SDK without that attribute gets its own transport.
    low = getattr(app, "_lowlevel_server", None)
    if low is None or not hasattr(low, "run"):
        await app.run_stdio_async()
        return
    await low.run(_WireIn(reader), _WireOut(writer), low.create_initialization_options())
