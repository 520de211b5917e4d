"""The MCP server driven by the SDK's own client over stdio: every tool, its errors, the record_trace →
ingest → evolve round trip, and a newly committed version picked up without a restart."""

from __future__ import annotations

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
from mcp.shared.exceptions import MCPError

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.service.mcp_server import SKILL_URI, argument_errors

from ..conftest import commit_copy, mcp_http_command, mcp_http_server

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout

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
            assert status["mode"] == "served" and status["counts"]["skills"] > 0

            overview = await call(client, "search_skills", query=QUERY, top_k=3)
            assert len(overview["results"]) == 3
            first_result = overview["results"][0]
            assert set(first_result) == {"rank", "id", "name", "capability", "score", "relevance", "seed"}
            assert overview["no_match"] is False and first_result["relevance"] >= overview["min_score"]

            # nothing relevant: no skills and no_match, from both tools; min_score 0 lists the closest
            for nonsense in ("xyzzy quux", "bake a chocolate cake"):
                none = await call(client, "search_skills", query=nonsense)
                assert none["results"] == [] and none["no_match"] is True, nonsense
                empty = await call(client, "retrieve_skill_bundle", query=nonsense)
                assert empty["skills"] == [] and empty["order"] == [] and empty["no_match"] is True
                assert empty["seeds"] == [] and empty["chars"] == 0
            closest = await call(client, "search_skills", query="xyzzy quux", min_score=0)
            assert closest["results"] and closest["no_match"] is False
            assert "min_score" in await error(client, "search_skills", query=QUERY, min_score=-1)

            bundle = await call(client, "retrieve_skill_bundle", query=QUERY, max_chars=4000)
            assert bundle["version"] == v1 and 0 < bundle["chars"] <= 4000
            assert [s["id"] for s in bundle["skills"]] == bundle["order"]
            assert [s["position"] for s in bundle["skills"]] == list(range(1, len(bundle["skills"]) + 1))
            for s in bundle["skills"]:
                assert s["why"] and s["reasons"] and s["text"]
            members = set(bundle["order"])
            assert all(e["src"] in members and e["dst"] in members for e in bundle["edges"])

            # the compact form: the same skills in the same order, one line of why each, their texts
            compact = await client.call_tool(
                "retrieve_skill_bundle", {"query": QUERY, "max_chars": 4000, "format": "text"}
            )
            text = compact.content[0].text  # type: ignore[union-attr]
            assert not compact.is_error and not text.lstrip().startswith("{")
            at = [text.index(f"(`{sid}`)") for sid in bundle["order"]]
            assert at == sorted(at) and text.count("Why: ") == len(bundle["order"])
            assert len(text) < len(json.dumps(bundle)) * 0.8
            listed = await client.call_tool("search_skills", {"query": QUERY, "format": "text"})
            assert overview["results"][0]["id"] in listed.content[0].text  # type: ignore[union-attr]
            none = await client.call_tool("retrieve_skill_bundle", {"query": "xyzzy quux", "format": "text"})
            assert "No skill in this library is relevant" in none.content[0].text  # type: ignore[union-attr]

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
            # one unknown name among known ones: the known ones are hydrated, the unknown one reported
            some = await call(client, "hydrate_skills", names=["csv-loader", "no-such-skill", first])
            assert [s["id"] for s in some["skills"]] == list(dict.fromkeys([detail["skill"]["id"], first]))
            assert [e["name"] for e in some["errors"]] == ["no-such-skill"]
            assert "unknown skill 'no-such-skill'" in some["errors"][0]["error"]
            assert hydrated["errors"] == []
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
                # what happens next, in a sentence for the agent: no shell command for an operator
                assert rec["window"] in rec["next"] and "segos " not in rec["next"] and "`" not in rec["next"]
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
    assert f"segos mcp: serving {version} (following the served version) on stdio" in err.decode()
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["id"] for a in answers] == [7] and answers[0]["result"]["serverInfo"]["name"] == "segos"
    assert proc.returncode == 0  # stdin closed: a clean exit


# Bounds every client sees in the input schema (JSON Schema keywords), by tool and parameter.
BOUNDS = {
    "search_skills": {
        "query": {"minLength": 1, "maxLength": 32_768},  # the trace contract's MAX_TEXT_CHARS
        "top_k": {"minimum": 1, "maximum": 100},
        "version": {"maxLength": 200},
    },
    "retrieve_skill_bundle": {
        "query": {"minLength": 1, "maxLength": 32_768},
        "top_n": {"minimum": 1, "maximum": 100},
        "max_chars": {"minimum": 1},
        "version": {"maxLength": 200},
    },
    "hydrate_skills": {
        "names": {"minItems": 1, "maxItems": 100},
        "max_chars": {"minimum": 1},
        "version": {"maxLength": 200},
    },
    "get_skill_detail": {"name": {"minLength": 1, "maxLength": 1000}, "version": {"maxLength": 200}},
    "get_skill_neighbors": {"name": {"minLength": 1, "maxLength": 1000}, "version": {"maxLength": 200}},
    "list_versions": {},
    "get_status": {},
    "record_trace": {
        "task_id": {"minLength": 1, "maxLength": 256},  # the trace contract's MAX_ID_CHARS
        "queries": {"maxItems": 64},  # MAX_QUERIES
        "used": {"maxItems": 512},  # MAX_SKILLS
        "reward": {"minimum": 0, "maximum": 1},
        "agent": {"minLength": 1, "maxLength": 256},  # MAX_NAME_CHARS
        "attempt": {"minimum": 1, "maximum": 1_000_000},  # MAX_ATTEMPT
        "trace_id": {"minLength": 1, "maxLength": 256},
    },
}
# The bounds of list items, by tool and parameter (a string item's length; an object item is bounded by
# the trace contract's 1 MiB line).
ITEM_BOUNDS = {
    ("hydrate_skills", "names"): {"minLength": 1, "maxLength": 1000},
    ("record_trace", "queries"): {"maxLength": 32_768},  # a query's text, MAX_TEXT_CHARS
    ("record_trace", "used"): {"minLength": 1, "maxLength": 256},  # a skill name, MAX_NAME_CHARS
}


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """The bound keywords of one property, looking into `anyOf` (an optional parameter is `X | null`)."""
    found = {
        k: v
        for k, v in schema.items()
        if k in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems")
    }
    for branch in schema.get("anyOf", []):
        found.update(_bounds(branch))
    return found


def test_tools_declare_hints_and_bounds_and_argument_errors_are_short(store: Path):
    async def scenario() -> None:
        async with Client(server(store)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS == set(BOUNDS)
            for name, tool in tools.items():
                assert tool.annotations is not None and tool.annotations.read_only_hint is not None, name
                props = tool.input_schema["properties"]
                for param, bounds in BOUNDS[name].items():
                    assert _bounds(props[param]) == bounds, (name, param, props[param])
                for param, prop in props.items():  # every argument that can be too big carries its bound
                    kinds = {prop.get("type")} | {b.get("type") for b in prop.get("anyOf", [])}
                    if kinds & {"integer", "number"}:
                        assert "minimum" in _bounds(prop), (name, param)
                    if "string" in kinds and "enum" not in prop:
                        assert "maxLength" in _bounds(prop), (name, param)
                    if "array" in kinds:
                        assert "maxItems" in _bounds(prop), (name, param)
                        assert _bounds(prop["items"]) == ITEM_BOUNDS[name, param], (name, param)

            # arguments the schema refuses: one short line per field, without pydantic's dump and URL
            text = await error(client, "search_skills", query="", top_k=500)
            assert text == (
                "invalid arguments for search_skills:\n"
                "query: String should have at least 1 character (got '')\n"
                "top_k: Input should be less than or equal to 100 (got 500)"
            )
            text = await error(client, "retrieve_skill_bundle", query=QUERY, top_n="five")
            assert text.splitlines() == [
                "invalid arguments for retrieve_skill_bundle:",
                "top_n: Input should be a valid integer, unable to parse string as an integer (got 'five')",
            ]
            text = await error(client, "hydrate_skills", names=[])
            assert "names: List should have at least 1 item" in text and "http" not in text
            assert "query: Field required" in await error(client, "search_skills")

    anyio.run(scenario)


def test_default_replies_leave_out_deployment_figures_and_details_gives_them(store: Path, tmp_path: Path):
    """An agent's context is not spent on deployment figures (the whole configuration, edge priors):
    `details=true` answers the full object of the Python API, the default that object less those keys.
    A bundle is never trimmed: its JSON is the record `segos retrieve --json` gives, key for key, and
    its compact form is the text."""
    from segos_pipeline.service.api import SegosService
    from segos_pipeline.service.compact import EDGE_DETAILS, STATUS_DETAILS

    full = SegosService(store, landing=tmp_path)

    async def scenario() -> None:
        async with Client(server(store, "--landing", str(tmp_path))) as client:
            bundle = await call(client, "retrieve_skill_bundle", query=QUERY)
            assert bundle == full.retrieve_bundle(QUERY)
            raw = await client.call_tool("retrieve_skill_bundle", {"query": QUERY, "format": "text"})
            assert len(raw.content[0].text) < 0.7 * len(json.dumps(bundle, separators=(",", ":")))  # type: ignore[union-attr]

            status = await call(client, "get_status")
            assert not set(STATUS_DETAILS) & set(status) and status["counts"]["skills"] == 60
            assert (await call(client, "get_status", details=True))["config"] == full.status()["config"]

            edges = await call(client, "get_skill_neighbors", name="csv-loader")
            whole = await call(client, "get_skill_neighbors", name="csv-loader", details=True)
            assert whole == full.neighbors("csv-loader") and edges["out"]
            for short, e in zip(edges["out"] + edges["in"], whole["out"] + whole["in"], strict=True):
                assert short == {k: v for k, v in e.items() if k not in EDGE_DETAILS}
                assert set(EDGE_DETAILS) <= set(e) and {"w0", "n_e"}.isdisjoint(short)

    anyio.run(scenario)


def test_argument_errors_take_one_line_per_field():
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(dict[str, list[str | int]]).validate_python({"queries": [None]})
    except ValidationError as exc:
        text = argument_errors("record_trace", exc)
    assert text.splitlines()[0] == "invalid arguments for record_trace:"
    assert len(text.splitlines()) == 2 and text.splitlines()[1].startswith("queries.0.str: ")
    assert "errors.pydantic.dev" not in text


def test_skills_are_resources_with_a_template_a_listing_and_completion(store: Path):
    from mcp.types import ResourceTemplateReference

    snap = SnapshotStore(store).load()
    ids = snap.nodes["id"].to_list()
    loader = next(i for i in ids if i.endswith("csv-loader"))

    async def scenario() -> None:
        async with Client(server(store)) as client:
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == [SKILL_URI] == ["skill://{+id}"]
            listed = (await client.list_resources()).resources
            assert sorted(r.uri for r in listed) == sorted(f"skill://{i}" for i in ids)
            assert all(r.mime_type == "text/markdown" and r.title for r in listed)

            read = await client.read_resource(f"skill://{loader}")
            [content] = read.contents
            assert content.mime_type == "text/markdown"
            assert content.text.startswith(f"### csv-loader (`{loader}`)")
            body = snap.nodes.filter(snap.nodes["id"] == loader)["body"][0]
            assert body.strip()[:200] in content.text  # the full card, not a clipped one
            by_name = await client.read_resource("skill://csv-loader")
            assert by_name.contents[0].text == content.text
            with pytest.raises(MCPError, match="unknown skill") as unknown:
                await client.read_resource("skill://no-such-skill")
            assert unknown.value.code == -32602  # invalid params: the client named no skill of the version

            prefix = loader.split("/")[0]
            done = await client.complete(
                ResourceTemplateReference(type="ref/resource", uri=SKILL_URI), {"name": "id", "value": prefix}
            )
            assert loader in done.completion.values
            assert all(v.startswith(prefix) for v in done.completion.values)
            assert done.completion.total == sum(i.startswith(prefix) for i in ids)

    anyio.run(scenario)


def test_print_config_starts_the_server_it_describes(store: Path, tmp_path: Path):
    """`segos mcp --print-config`: absolute paths to this interpreter's `segos`, the store and the landing
    folder; the printed entry, run as a client would run it from elsewhere, serves the store."""
    segos = Path(sys.executable).parent / "segos"
    landing = tmp_path / "landing"
    proc = subprocess.run(
        [str(segos), "mcp", "--store", str(store), "--landing", str(landing), "--print-config"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)["mcpServers"]["segos"]
    assert entry == {
        "type": "stdio",
        "command": str(segos),
        "args": ["mcp", "--store", str(store.resolve()), "--landing", str(landing.resolve())],
    }
    alone = subprocess.run(
        [str(segos), "mcp", "--print-config", "server", "--version", "v1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SEGOS_STORE": "rel-store", "SEGOS_LANDING": ""},
        timeout=60,
    )
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["args"] == [
        "mcp",
        "--store",
        str(tmp_path.resolve() / "rel-store"),
        "--landing",
        str(tmp_path.resolve() / "rel-store" / "landing"),
        "--version",
        "v1",
    ]
    assert "holds no version yet" in alone.stderr  # said on stderr, the JSON stays clean
    http = subprocess.run(
        [str(segos), "mcp", "--http", "--port", "9123", "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(http.stdout)["mcpServers"]["segos"] == {
        "type": "http",
        "url": "http://127.0.0.1:9123/mcp",
    }

    async def scenario() -> None:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(tmp_path))
        async with Client(params) as client:
            rec = await call(
                client, "record_trace", task_id="t", queries=[QUERY], used=["csv-loader"], reward=1.0
            )
            assert Path(rec["file"]).parent == landing.resolve()

    anyio.run(scenario)


def test_the_server_starts_without_the_numeric_stack():
    """What `segos mcp` imports before it can answer `initialize`: the CLI and the server module, neither of
    which may pull polars, numpy, scipy or pyarrow (the store loads on a thread after the handshake)."""
    code = (
        "import sys, segos_pipeline.cli, segos_pipeline.service.mcp_server\n"
        "print(sorted(m for m in ('polars', 'numpy', 'scipy', 'pyarrow') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_initialize_is_answered_while_the_store_loads(store: Path):
    """The handshake and tools/list are answered before the store is loaded: a server told to load a store
    that cannot be served still answers them, then exits with the reason."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "segos_pipeline.cli", "mcp", "--store", str(store), "--version", "v0099"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
    )
    try:
        out, err = proc.communicate(json.dumps(init).encode() + b"\n", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "no such version" in err.decode()
    # answered before the failing load ended: importing the numeric stack alone takes longer than that
    assert json.loads(out.splitlines()[0])["result"]["serverInfo"]["name"] == "segos"


def test_streamable_http_serves_the_same_tools_on_loopback(store: Path, tmp_path: Path):
    with mcp_http_server(store) as (port, _):

        async def scenario() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tools = await client.list_tools()
                assert {t.name for t in tools.tools} == TOOLS
                bundle = await call(client, "retrieve_skill_bundle", query=QUERY, max_chars=4000)
                assert bundle["skills"] and bundle["chars"] <= 4000
                assert [s["id"] for s in bundle["skills"]] == bundle["order"]
                assert "unknown skill" in await error(client, "get_skill_detail", name="no-such-skill")

        anyio.run(scenario)


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
            mcp_http_command(store, port),
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


def test_each_server_log_line_is_written_once(capfd):
    import logging

    from segos_pipeline.cli.service import server_log

    log = server_log()
    # what the MCP SDK's configure_logging does when a server is built (pytest's own root handlers make
    # its basicConfig a no-op here, so the root handler is added by hand)
    root_handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(root_handler)
    try:
        log.info("version v0042-abcdef12 loaded in 0.1 s")
        err = capfd.readouterr().err
        assert err.count("v0042-abcdef12") == 1 and "segos mcp: version v0042-abcdef12" in err
    finally:
        logging.getLogger().removeHandler(root_handler)
        log.propagate = True
        log.handlers.clear()


def test_a_slow_name_lookup_does_not_hold_up_other_sessions(store: Path, tmp_path: Path):
    """hydrate_skills (near-miss suggestions), get_skill_detail, get_skill_neighbors, record_trace and any
    call naming a version run on a worker thread: a search of the served version meanwhile is answered at
    once from the event loop. The lookup is slowed down here to make a blocked loop visible."""
    import time

    import anyio

    from segos_pipeline.service.api import SegosService
    from segos_pipeline.service.mcp_server import build_server

    service = SegosService(store, landing=tmp_path / "landing")
    hydrate = service.hydrate

    def slow_hydrate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        time.sleep(1.5)
        return hydrate(*args, **kwargs)

    service.hydrate = slow_hydrate  # type: ignore[method-assign]
    app = build_server(service)

    async def scenario() -> None:
        t0 = time.perf_counter()
        done: dict[str, float] = {}

        async def timed(name: str, tool: str, args: dict[str, Any]) -> None:
            await app.call_tool(tool, args)
            done[name] = time.perf_counter() - t0

        async with anyio.create_task_group() as tg:
            tg.start_soon(timed, "hydrate", "hydrate_skills", {"names": ["csv-loader", "csv-loadr"]})
            tg.start_soon(timed, "search", "search_skills", {"query": QUERY})  # asked right after
        # answered while the lookup still runs (a blocked loop would answer it after 1.5 s)
        assert done["search"] < 1.0 <= 1.5 <= done["hydrate"], done

    anyio.run(scenario)
