"""CLI commands of the agent-facing service: `segos mcp`, `segos add|update|remove`.

Registered into the `segos` group by `main.py` (`main.add_command(...)`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

# the helpers main.py uses too, from common (importing `.main` would be an import cycle once registered)
from ..config import WRITER_WAIT_S
from .common import _emit_json, _store, _writing, friendly_errors, store_option, wait_option


@click.command(name="mcp")
@store_option
@click.option(
    "--version", "version", default=None, help="Serve this version only (default: follow the newest)."
)
@click.option("--http", is_flag=True, help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8765,
    show_default=True,
    help="Port of the HTTP transport.",
)
@click.option(
    "--landing",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder record_trace appends to (default: $SEGOS_LANDING, else STORE/landing); `segos ingest` "
    "reads it.",
)
@friendly_errors
def mcp_command(store: Path | None, version: str | None, http: bool, port: int, landing: Path | None) -> None:
    """Serve the skill graph to agents over MCP (stdio by default)."""
    from ..service.api import SegosService
    from ..service.mcp_server import check_listen, serve

    # Version switches go to stderr, which MCP clients keep as the server's log (stdout is the wire); set up
    # first, so that a damaged newest version passed over at start is reported too.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("segos mcp: %(message)s"))
    service_log = logging.getLogger("segos_pipeline.service.api")
    service_log.addHandler(handler)
    service_log.setLevel(logging.INFO)
    service = SegosService(_store(store), version, landing=landing)  # fails fast on an unknown version
    if http:
        check_listen("127.0.0.1", port)  # before announcing it: a taken port is one clear error line
    where = f"http://127.0.0.1:{port}/mcp" if http else "stdio"
    mode = "pinned" if service.pinned else "following the newest version"
    click.echo(f"segos mcp: serving {service.version} ({mode}) on {where}", err=True)
    serve(service, http=http, port=port)


def _change(
    action: str,
    skill_dir: Path,
    store: Path | None,
    library: Path | None,
    as_json: bool,
    wait: float = WRITER_WAIT_S,
) -> None:
    from ..graph.incremental import apply_change

    with _writing(store, wait) as st:
        result = apply_change(st, action, skill_dir, library=library)
    if as_json:
        _emit_json(result.to_dict())
        return
    c = result.counters
    if not result.changed:
        click.echo(f"{result.skill}: unchanged; still {result.version}")
        return
    click.echo(
        f"{action} {result.skill}: {c['recomputed_exact']} skill(s) recomputed, {c['merged']} merged, "
        f"{c['flipped_tokens']} join token(s) flipped; {result.timings_s['total']:.2f}s"
    )
    for p in result.problems:
        click.echo(f"  [{p['file']}] {p['problem']} -> {p['action']}")
    click.echo(result.version)


def _change_command(action: str, doc: str) -> click.Command:
    @click.command(name=action, help=doc)
    @click.argument("skill_dir", type=click.Path(file_okay=False, path_type=Path))
    @store_option
    @click.option(
        "--library",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Library root the skill ids are relative to (default: the one the parent version records).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the result (with the new manifest).")
    @wait_option
    @friendly_errors
    def command(
        skill_dir: Path, store: Path | None, library: Path | None, as_json: bool, wait: float
    ) -> None:
        _change(action, skill_dir, store, library, as_json, wait)

    return command


add_command = _change_command(
    "add", "Add the package SKILL_DIR (inside the library) as a new version; prints its id last."
)
update_command = _change_command(
    "update", "Re-read the edited package SKILL_DIR into a new version; prints its id last."
)
remove_command = _change_command(
    "remove", "Drop the skill SKILL_DIR (delete its folder first) in a new version; prints its id last."
)
COMMANDS = (mcp_command, add_command, update_command, remove_command)
