"""`segos mcp`: the MCP server over a snapshot store (official `mcp` SDK, 2.x `MCPServer`, public API only).

Every tool is a thin call into `SegosService` (service/api.py), which picks the version per request: the
pinned one, or the store's served one (switching between requests when the served pointer moves). Expected
failures (unknown skill or version, malformed trace, bad argument) become MCP tool errors (`is_error` with
the reason; arguments that do not fit a tool's input schema get one short line per field); anything
unexpected becomes the SDK's generic tool error. The server never exits on a bad request.

Start-up: the client's `initialize` is answered before the store is loaded. This module imports only the
SDK and segos' light root modules; `SegosService` (polars, scipy, the retriever) is imported and built on
a thread (`ServiceSlot`, mcp_slot.py) while the handshake and `tools/list` are answered, and the first
call that needs it waits for it. A store that cannot be served (unknown pinned version, no version) ends
the process with the reason on stderr, as before the handshake existed (see `serve`).

Skills are also resources, `skill://{id}` (the skill's full card as Markdown): listed when the library is
small enough for one listing, always readable through the template, with completion of ids.

Tools are `async` on purpose: the SDK runs sync tools in a worker thread, which costs a thread hop per call;
requests here are sub-millisecond CPU work, so running them on the event loop is faster and also means
requests never run concurrently (a version switch can only happen between requests).

Run: `segos mcp --store STORE [--version V] [--http --port 8765] [--landing DIR] [--poll S]` (STORE a
folder or a URI: docs/storage.md), or `python -m segos_pipeline.cli mcp ...` (same options);
`segos mcp --print-config` prints a client
configuration. The command lives in the CLI layer (`cli/service.py`), which depends on this module, never
the reverse.
"""

from __future__ import annotations

import functools
import os
import socket
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
import pydantic_core
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import (
    CallToolResult,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    Resource,
    ResourceTemplateReference,
    TextContent,
    ToolAnnotations,
)
from pydantic import Field, ValidationError

from .._version import __version__
from ..config import (
    MAX_ATTEMPT,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_QUERIES,
    MAX_SKILLS,
    MAX_TEXT_CHARS,
    MAX_TOP,
    RetrievalConfig,
)
from ..text.excerpts import clip
from .compact import brief_neighbors, brief_status, bundle_text, search_text
from .mcp_quota import TraceQuota, session_key
from .mcp_slot import ServiceSlot

if TYPE_CHECKING:
    from .api import SegosService
    from .http import HttpLimits

_T = TypeVar("_T")
INSTRUCTIONS = (
    "segos retrieves skills (SKILL.md packages) for a task. Call retrieve_skill_bundle with the task to get "
    "a bounded bundle of skills in the order to use them, each with why it is included; search_skills gives "
    "a cheap overview first. After the attempt, call record_trace with the skills you actually used (in the "
    "order you first used them) and the reward (0..1) or a CTRF test report, so the graph learns from it."
)
SKILL_SCHEME = "skill://"
SKILL_URI = "skill://{+id}"  # `+`: skill ids are package paths (`skillsbench/pdf`), slashes included
# `skill://{id}/files/{path}` reads a package file. Not a template of its own: the SDK allows one
# multi-segment variable per template and both hold slashes, so `read_resource` recognises it (the skill
# id ends at the first `/files/` after which a known skill ends).
FILES = "/files/"
LIST_RESOURCES_MAX = 2000  # above this many skills, resources/list stays empty (the SDK does not paginate it)
COMPLETIONS_MAX = 100  # the most values one completion/complete answer may carry (MCP spec)

# Tool parameter types live at module level: the SDK evaluates the (postponed) annotations in these globals.
# Defaults named in descriptions come from the configuration `segos mcp` serves with; the bounds are in
# the input schema (`minimum`, `maximum`, `minLength`, `minItems`), so clients check them before calling.
_DEFAULTS = RetrievalConfig()
Version = Annotated[
    str | None,
    Field(
        description="Answer from this version (id, prefix or vN) instead of the served one.", max_length=200
    ),
]
Query = Annotated[
    str,
    Field(
        description=f"The task, in natural language (<= {MAX_TEXT_CHARS:,} chars).",
        min_length=1,
        max_length=MAX_TEXT_CHARS,
    ),
]
SkillRef = Annotated[str, Field(description="Skill id or name.", min_length=1, max_length=1000)]
Form = Annotated[
    Literal["json", "text"],
    Field(
        description='"json" (default): every figure, for programs; "text": the skills in order with one line '
        "of why each, for a model to read (about half the size)."
    ),
]
Details = Annotated[
    bool,
    Field(
        description="true: also the deployment figures behind the answer (the whole configuration, edge "
        "priors and evidence counts), for auditing; false (default) leaves them out."
    ),
]
MinScore = Annotated[
    float | None,
    Field(
        description=(
            "Relevance floor: no skills and no_match=true unless one reaches it (each result's `relevance`; "
            f"default {_DEFAULTS.min_score}, 0 turns it off)."
        ),
        ge=0,
        le=10,
    ),
]
MaxChars = Annotated[
    int | None, Field(description=f"Global character budget (default {_DEFAULTS.total_chars}).", ge=1)
]
TopK = Annotated[int, Field(description=f"How many skills to list (1-{MAX_TOP}).", ge=1, le=MAX_TOP)]
TopN = Annotated[
    int | None, Field(description=f"Bundle size (1-{MAX_TOP}, default {_DEFAULTS.top_n}).", ge=1, le=MAX_TOP)
]
SkillRefs = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=1000)]],
    Field(description="Skill ids or names.", min_length=1, max_length=MAX_TOP),
]


def expected_failure(exc: BaseException) -> bool:
    """A failure the caller can act on (its message says how), as opposed to a bug."""
    if isinstance(exc, ValueError | KeyError | FileNotFoundError):
        return True
    from ..store.snapshot import SnapshotError  # loaded with the service, before any request runs

    return isinstance(exc, SnapshotError)


def _tool_errors(
    slot: ServiceSlot,
) -> Callable[[Callable[..., Awaitable[dict[str, Any] | str]]], Callable[..., Awaitable[CallToolResult]]]:
    """Decorator: wait for the service, then expected failures → ToolError with the library's actionable
    message; results → `CallToolResult` (a compact text form as it is).

    A result is one text block holding the JSON object (compact), and no `structured_content`. Clients
    that receive both show the model only one of them (Claude Code and VS Code pass on the structured
    copy, text-only clients the text), so a second copy of a bundle is never read, yet it doubled the
    response and cost both ends a validation and serialization pass over it: a sizeable share of the MCP
    overhead per `retrieve_skill_bundle` in A/B runs against a server that sent both (docs/benchmarks.md).
    The text form reaches every client. Programs parse it with `json.loads`, or call
    `api.SegosService` directly.

    `model_construct` skips validating what was just built here; the SDK validates the wire shape of every
    result anyway before sending it.
    """

    def decorate(
        fn: Callable[..., Awaitable[dict[str, Any] | str]],
    ) -> Callable[..., Awaitable[CallToolResult]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
            try:
                await slot.wait()
                obj = await fn(*args, **kwargs)
            except Exception as exc:
                if not expected_failure(exc):
                    raise
                raise ToolError(str(exc)) from None
            text = obj if isinstance(obj, str) else pydantic_core.to_json(obj, fallback=str).decode()
            return CallToolResult.model_construct(
                content=[TextContent.model_construct(type="text", text=text)]
            )

        return wrapper

    return decorate


async def _off_loop(call: Callable[[], _T]) -> _T:
    """Run a service call on a worker thread. Name lookups with near-miss suggestions, loading a version a
    request names, and a trace's fsync take milliseconds to seconds; the event loop serves every other
    session meanwhile. A search or bundle of the served version stays on the loop (it is the latency
    that matters, and a thread hop adds to it)."""
    return await anyio.to_thread.run_sync(call)


def _contract(
    description: str | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    *,
    max_items: int | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A `record_trace` argument: its JSON type checked strictly (no coercion: `"0.5"` is not a reward, as
    in a file), its bounds advertised in the input schema but checked only by the trace contract, which
    strips text before measuring it and words the reasons as ingestion does. One validator for the values,
    so a trace is accepted or rejected alike through MCP and in a file."""
    bounds = {
        "minLength": min_length,
        "maxLength": max_length,
        "maxItems": max_items,
        "minimum": minimum,
        "maximum": maximum,
    }
    return Field(
        description=description,
        strict=True,
        json_schema_extra={k: v for k, v in bounds.items() if v is not None},
    )


def argument_errors(tool: str, error: ValidationError) -> str:
    """Arguments that do not fit a tool's input schema, one short line per field (no pydantic URL, no
    error type codes): what the caller needs to correct the call."""
    lines: dict[str, str] = {}
    for e in error.errors(include_url=False):
        loc = e.get("loc") or ()
        field = str(loc[0]) if loc else "arguments"
        if field in lines:  # one line per field: a union reports every member that refused the value
            continue
        where = ".".join(str(part) for part in loc) or field
        got = "" if e.get("type") == "missing" else f" (got {_short(e.get('input'))})"
        lines[field] = f"{where}: {e.get('msg', 'invalid')}{got}"
    return f"invalid arguments for {tool}:\n" + "\n".join(lines.values())


def _short(value: Any, limit: int = 60) -> str:
    return clip(repr(value), limit)


class SegosMCPServer(MCPServer):
    """`MCPServer` whose argument errors are short (see `argument_errors`) and whose resource listing
    names the served version's skills."""

    slot: ServiceSlot

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):  # the SDK's text is the full pydantic dump with a URL
                raise ToolError(argument_errors(name, cause)) from cause
            raise

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        """`skill://{id}/files/{path}`: a file of the skill's package (`read_file`); any other URI as the
        SDK reads it (the skill cards of the `skill://{+id}` template)."""
        text = str(uri)
        if not text.startswith(SKILL_SCHEME) or FILES not in text:
            return await super().read_resource(uri, context)
        service = await self.slot.wait()
        ref = urllib.parse.unquote(text[len(SKILL_SCHEME) :])
        split = await _off_loop(lambda: service.file_ref(ref))
        if split is None:  # a skill whose id holds /files/, or an unknown one: the card template answers
            return await super().read_resource(uri, context)
        return await _off_loop(lambda: read_file(service, *split))

    async def list_resources(self) -> list[Resource]:
        listed = await super().list_resources()
        try:
            service = await self.slot.wait()
            nodes = service.skill_table()
        except Exception:  # nothing served: the tools say why; a listing is not the place for it
            return listed
        if nodes.height > LIST_RESOURCES_MAX:
            return listed
        return listed + [
            Resource(
                uri=f"skill://{sid}",
                name=sid,
                title=name,
                description=capability or None,
                mime_type="text/markdown",
            )
            for sid, name, capability in nodes.select("id", "name", "capability").iter_rows()
        ]


def skill_card(detail: dict[str, Any]) -> str:
    """A skill's card (`render_skill`) with, after its `Source:` line, where its package is on this machine
    and how to read its files (the bundle texts stay as they are: their budgets count those characters)."""
    from ..retrieval.bundle import render_skill  # loaded with the service

    head, sep, rest = render_skill(detail["skill"]).partition("\n\n")
    if detail["folder"] is not None:
        where = f"Folder: {detail['folder']}"
        if detail["files"]:
            files = ", ".join(f["path"] for f in detail["files"])
            where += f"\nFiles: {files} (skill://{detail['skill']['id']}/files/{{path}})"
    else:
        where = f"Folder: none on this machine ({detail['folder_error']})"
    lines = head.split("\n")
    return "\n".join([*lines[:2], where, *lines[2:]]) + sep + rest


def read_file(service: SegosService | ServiceSlot, skill_id: str, path: str) -> list[ReadResourceContents]:
    """One package file as resource contents: text, or bytes (sent base64) when it is not UTF-8, with the
    mime type its name suggests. A path the package does not hold safely is the client's argument (-32602);
    a package not on the server's machine, its state (-32603)."""
    from .errors import FileRefused, PackageMissing  # loaded with the service

    try:
        found = service.skill_file(skill_id, path)
    except FileRefused as exc:
        raise ResourceNotFoundError(str(exc)) from None
    except PackageMissing as exc:
        raise ResourceError(str(exc)) from None
    return [ReadResourceContents(content=found.content, mime_type=found.mime_type)]


# Hints clients use to decide what to run without asking: every tool but record_trace only reads the
# store; record_trace appends to the landing folder (twice the same call records two attempts) and
# touches nothing outside segos' own files.
_READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


def build_server(
    service: SegosService | ServiceSlot | Callable[[], SegosService],
    name: str = "segos",
    quota: TraceQuota | None = None,
) -> SegosMCPServer:
    """The MCP server whose tools call `service`: a service, a slot, or a function that builds one (run on
    a thread when the server starts)."""
    if isinstance(service, ServiceSlot):
        slot = service
    elif callable(service):
        slot = ServiceSlot(service)
    else:
        slot = ServiceSlot.of(service)
    app = SegosMCPServer(
        name,
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        warn_on_duplicate_tools=False,
    )
    app.slot = slot
    service = slot  # the tool bodies call the loaded service through the slot
    tool_errors = _tool_errors(slot)
    quota = quota or TraceQuota.from_env(os.environ)

    @app.tool(title="Search skills", annotations=_READ, structured_output=False)
    @tool_errors
    async def search_skills(
        query: Query,
        top_k: TopK = 10,
        min_score: MinScore = None,
        version: Version = None,
        format: Form = "json",
    ) -> dict[str, Any] | str:
        """Ranked overview of the skills for a task: id, name, capability, score and relevance (no skill
        bodies); none, with no_match=true, when no skill is relevant to it."""

        def search() -> dict[str, Any]:
            return service.search(query, top_k, version=version, min_score=min_score)

        result = await _off_loop(search) if version is not None else search()
        return search_text(result) if format == "text" else result

    @app.tool(title="Retrieve a skill bundle", annotations=_READ, structured_output=False)
    @tool_errors
    async def retrieve_skill_bundle(
        query: Query,
        top_n: TopN = None,
        max_chars: MaxChars = None,
        min_score: MinScore = None,
        version: Version = None,
        format: Form = "json",
    ) -> dict[str, Any] | str:
        """The skills to use for a task, hydrated under the character budgets and listed in execution order
        (prerequisites first), with the edges among them and why each one is included; none, with
        no_match=true, when no skill is relevant to the task."""

        def bundle_of() -> dict[str, Any]:
            return service.retrieve_bundle(query, top_n, max_chars, version=version, min_score=min_score)

        bundle = await _off_loop(bundle_of) if version is not None else bundle_of()
        return bundle_text(bundle) if format == "text" else bundle

    @app.tool(title="Read skills", annotations=_READ, structured_output=False)
    @tool_errors
    async def hydrate_skills(
        names: SkillRefs, max_chars: MaxChars = None, version: Version = None
    ) -> dict[str, Any]:
        """The readable text of the named skills (identity, contract, body), clipped to the budgets. An
        unknown name gets an entry under `errors` and the others are still returned."""
        return await _off_loop(lambda: service.hydrate(names, max_chars, version=version, partial=True))

    @app.tool(title="Skill detail", annotations=_READ, structured_output=False)
    @tool_errors
    async def get_skill_detail(name: SkillRef, version: Version = None) -> dict[str, Any]:
        """Every parsed field of one skill, its full body, its edge counts by relation and what it learned
        from successful traces (the requests it served, the skills used with it)."""
        return await _off_loop(lambda: service.skill_detail(name, version=version))

    @app.tool(title="Skill neighbours", annotations=_READ, structured_output=False)
    @tool_errors
    async def get_skill_neighbors(
        name: SkillRef, version: Version = None, details: Details = False
    ) -> dict[str, Any]:
        """Typed out- and in-edges of one skill (semantic, workflow, dependency, alternative, avoid)."""
        found = await _off_loop(lambda: service.neighbors(name, version=version))
        return found if details else brief_neighbors(found)

    @app.tool(title="List graph versions", annotations=_READ, structured_output=False)
    @tool_errors
    async def list_versions() -> dict[str, Any]:
        """Every committed graph version, oldest first, and which one is served."""
        return service.list_versions()

    @app.tool(title="Server status", annotations=_READ, structured_output=False)
    @tool_errors
    async def get_status(details: Details = False) -> dict[str, Any]:
        """The version served (and whether pinned), its counts, and the trace landing; with details, the
        whole configuration too."""
        status = service.status()
        return status if details else brief_status(status)

    @app.tool(title="Record a trace", annotations=_WRITE, structured_output=False)
    @tool_errors
    async def record_trace(
        task_id: Annotated[
            str, _contract(f"Stable id of the task attempted (<= {MAX_ID_CHARS} chars).", 1, MAX_ID_CHARS)
        ],
        queries: Annotated[
            list[Annotated[str, _contract(max_length=MAX_TEXT_CHARS)] | dict[str, Any]],
            _contract(
                f"Queries issued (<= {MAX_QUERIES}): text, or {{text, retrieved?, seeds?}}; "
                f"text <= {MAX_TEXT_CHARS:,} chars.",
                max_items=MAX_QUERIES,
            ),
        ],
        used: Annotated[
            list[Annotated[str, _contract(None, 1, MAX_NAME_CHARS)]],
            _contract(
                f"Skills actually used, in first-use order (<= {MAX_SKILLS} names).", max_items=MAX_SKILLS
            ),
        ],
        reward: Annotated[
            float | None, _contract("Outcome in [0, 1] (or give ctrf).", minimum=0, maximum=1)
        ] = None,
        ctrf: Annotated[dict[str, Any] | None, _contract("A CTRF test report to derive it.")] = None,
        agent: Annotated[
            str | None, _contract("Model/harness that ran the attempt.", 1, MAX_NAME_CHARS)
        ] = None,
        attempt: Annotated[
            int | None,
            _contract(f"Attempt number, 1-{MAX_ATTEMPT:,} (default 1).", minimum=1, maximum=MAX_ATTEMPT),
        ] = None,
        trace_id: Annotated[str | None, _contract("Default: a fresh id.", 1, MAX_ID_CHARS)] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Report how an attempt went. Validated exactly as `segos ingest` validates a line (the trace
        contract, `segos trace-schema`), so what is recorded is ingested; appended to the trace landing
        folder that the next evolution window reads. Caps: ids and names <= 256 characters, the whole
        trace <= 1 MiB as a JSON line. The reply is a short acknowledgement (id, window, reward, unknown
        skill names: at most 20, with their count)."""
        if ctx is not None:  # the session's quota (a call outside a session, in tests, has none)
            content = {"queries": queries, "used": used, "ctrf": ctrf, "agent": agent, "task_id": task_id}
            quota.admit(session_key(ctx), len(pydantic_core.to_json(content, fallback=str)))
        return await _off_loop(
            lambda: service.record_trace(
                task_id, queries, used, reward, ctrf, agent, trace_id=trace_id, attempt=attempt
            )
        )

    @app.resource(
        SKILL_URI,
        name="skill",
        title="Skill",
        description="One skill's full card (identity, source, contract, body) as Markdown; {id} is the "
        "skill's id (its package path) or its name. skill://{id}/files/{path} reads a file of the skill's "
        "package (get_skill_detail lists them): UTF-8 files as text, others base64, at most 1 MiB, only "
        "inside the package folder.",
        mime_type="text/markdown",
    )
    async def skill_resource(id: str) -> str:
        await slot.wait()
        try:
            detail = await _off_loop(lambda: service.skill_detail(id))
        except Exception as exc:
            if not expected_failure(exc):
                raise
            from .errors import UnknownSkill  # loaded with the service

            # an unknown skill is the client's argument (-32602); anything else, the server's state (-32603)
            error = ResourceNotFoundError if isinstance(exc, UnknownSkill) else ResourceError
            raise error(str(exc)) from None
        return skill_card(detail)

    @app.completion()
    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion | None:
        """Skill ids for `skill://{id}` that start with what was typed so far."""
        if not isinstance(ref, ResourceTemplateReference) or ref.uri != SKILL_URI or argument.name != "id":
            return None
        ids = (await slot.wait()).skill_table()["id"]
        found = ids.filter(ids.str.starts_with(argument.value))
        return Completion(
            values=found.head(COMPLETIONS_MAX).to_list(),
            total=found.len(),
            has_more=found.len() > COMPLETIONS_MAX,
        )

    return app


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def check_listen(host: str, port: int) -> None:
    """Fail with an actionable message, before anything is served or announced, when the HTTP transport
    could not listen on (host, port): a host other than loopback, or a port that is taken. Without it
    uvicorn reports a taken port only after start-up, as a log line between tracebacks."""
    if host not in LOOPBACK:
        raise ValueError("the HTTP transport only listens on the loopback interface (127.0.0.1)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(infos[0][4])
    except (OSError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot listen on {host}:{port} ({reason}); choose another --port") from None


def serve(
    service: SegosService | ServiceSlot | Callable[[], SegosService],
    *,
    http: bool = False,
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:  # pragma: no cover - exercised through subprocess tests
    """Serve over stdio until the client closes it, or over streamable HTTP on loopback until stopped.

    A slot or a factory is loaded on a thread once the server runs, so the handshake does not wait for it.
    HTTP is the SDK's transport behind the limits of `http.serve_http` (from `$SEGOS_MCP_*`, docs/mcp.md);
    stdio is the SDK's transport."""
    app = build_server(service)
    limits = None
    if http:
        from .http import HttpLimits  # here: stdio never loads uvicorn

        check_listen(host, port)
        limits = HttpLimits.from_env(os.environ)  # a bad value is one error line, before anything starts
    anyio.run(_serve, app, limits, host, port, os.environ.get("SEGOS_MCP_TOKEN") or None)


async def _serve(
    app: SegosMCPServer, limits: HttpLimits | None, host: str, port: int, token: str | None = None
) -> None:
    app.slot.start()
    try:
        if limits is not None:
            from .http import serve_http

            await serve_http(app, host, port, limits, token)
        else:
            await app.run_stdio_async()
    finally:
        # A client that disconnects during the load still learns, through the exit status, of a store that
        # cannot be served; a load that succeeds meanwhile costs the wait once, at exit.
        await anyio.to_thread.run_sync(app.slot.settle)
