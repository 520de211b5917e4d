"""CLI commands of the agent-facing service: `segos mcp`, `segos add|update|remove`.

Registered into the `segos` group by `main.py` (`main.add_command(...)`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import REMOTE_POLL_S
from ..paths import default_landing
from ..store.uri import is_uri  # standard library only: the server answers its client before polars loads

# the helpers main.py uses too, from common (importing `.main` would be an import cycle once registered)
from .common import (
    _emit_json,
    _writing,
    friendly_errors,
    given_cache,
    open_cli_store,
    store_option,
    store_root,
    wait_option,
)
from .versions import still_served

if TYPE_CHECKING:
    from ..service.api import SegosService


def server_log() -> logging.Logger:
    """The service's log (version switches) on stderr, which MCP clients keep as the server's log (stdout is
    the wire), each line once: the MCP SDK gives the root logger a handler of its own, so the service's log
    does not propagate to it."""
    service_log = logging.getLogger("segos_pipeline.service.api")
    if not any(getattr(h, "segos", False) for h in service_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("segos mcp: %(message)s"))
        handler.segos = True  # type: ignore[attr-defined]
        service_log.addHandler(handler)
    service_log.setLevel(logging.INFO)
    service_log.propagate = False
    return service_log


@click.command(name="mcp")
@store_option
@click.option(
    "--version",
    "version",
    default=None,
    help="Serve this version only (default: follow the store's served version, see `segos promote`).",
)
@click.option("--http", is_flag=True, help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option(
    "--poll",
    "poll",
    type=click.FloatRange(min=0),
    default=None,
    help=f"Seconds between two listings of a store given as a URI, when following the served version "
    f"(default {REMOTE_POLL_S:g}); requests in between ask the URI nothing. Unused for a store folder.",
)
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
@click.option(
    "--print-config",
    "print_config",
    type=click.Choice(["mcpServers", "server"]),
    is_flag=False,
    flag_value="mcpServers",
    default=None,
    help="Print a client configuration for these options (absolute paths) and exit: `mcpServers` (the "
    "default; Claude Desktop, Cursor, a project's .mcp.json) or `server` (the entry alone, for "
    "`claude mcp add-json segos`).",
)
@click.option("--json", "as_json", is_flag=True, help="Announce the start-up on stderr as a JSON object.")
@friendly_errors
def mcp_command(
    store: str | Path | None,
    version: str | None,
    http: bool,
    poll: float | None,
    port: int,
    landing: Path | None,
    print_config: str | None,
    as_json: bool,
) -> None:
    """Serve the skill graph to agents over MCP (stdio by default).

    `--json` writes the start-up line on stderr as a JSON object (stdout is the wire); with
    --print-config the configuration is JSON in any case.

    \b
    Example:
      segos mcp --store data/store --print-config
    """
    # here, not on the loading thread: the --cache option lives in this thread's click context
    root, cache = store_root(store), given_cache()
    if print_config is not None:
        entry = client_entry(root, version, landing, port if http else None, cache=cache, poll=poll)
        _emit_json({"mcpServers": {"segos": entry}} if print_config == "mcpServers" else entry)
        return
    from ..service.mcp_server import check_listen, serve
    from ..service.mcp_slot import ServiceSlot

    server_log()  # first, so that a damaged served version passed over at start is reported too
    if http:
        check_listen("127.0.0.1", port)  # before anything starts: a taken port is one clear error line
    where = f"http://127.0.0.1:{port}/mcp" if http else "stdio"

    def load() -> SegosService:
        from ..service.api import SegosService

        return SegosService(open_cli_store(root, cache), version, landing=landing, poll_s=poll)

    def ready(service: SegosService) -> None:
        if as_json:
            mode = "pinned" if service.pinned else "served"
            click.echo(json.dumps({"serving": service.version, "mode": mode, "on": where}), err=True)
            return
        mode = "pinned" if service.pinned else "following the served version"
        click.echo(f"segos mcp: serving {service.version} ({mode}) on {where}", err=True)

    # The store loads on a thread while the server answers the client's handshake (seconds on a large
    # library). A store that cannot be served ends the process with the reason, as `friendly_errors` would:
    # at once, from the loading thread, since the transport may be blocked reading a silent client.
    slot = ServiceSlot(load, on_ready=ready, on_error=_exit_unservable)
    serve(slot, http=http, port=port)


def _exit_unservable(exc: BaseException) -> None:
    from ..service.mcp_server import expected_failure

    message = str(exc) if expected_failure(exc) else f"{type(exc).__name__}: {exc}"
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    os._exit(2)


def segos_command() -> list[str]:
    """How a client starts this installation's `segos`, by absolute path: the console script next to the
    running interpreter (a venv's bin/), else the interpreter with `-m segos_pipeline.cli`."""
    python = Path(os.path.abspath(sys.executable))  # not resolved: a venv's python is a symlink out of it
    script = shutil.which("segos", path=str(python.parent))
    if script is not None:
        return [os.path.abspath(script)]
    return [str(python), "-m", "segos_pipeline.cli"]


def client_entry(
    store: str | Path,
    version: str | None,
    landing: Path | None,
    http_port: int | None,
    *,
    cache: Path | None = None,
    poll: float | None = None,
) -> dict[str, Any]:
    """The `mcpServers` entry that starts `segos mcp` with these options: absolute command, store and
    landing folder (a client starts servers in its own working directory, with a minimal PATH). A store
    URI is kept as given, with its cache folder (when one was given) and its polling interval."""
    if http_port is not None:  # a server the user runs: clients only need its URL
        return {"type": "http", "url": f"http://127.0.0.1:{http_port}/mcp"}
    remote: list[str] = []
    if is_uri(str(store)):
        from ..store.remote import cache_folder

        name = str(store)
        base = Path(cache).expanduser().resolve() if cache is not None else None
        default_where = default_landing(cache_folder(name, base))  # the landing folder inside its cache
        remote = ["--cache", str(base)] if base is not None else []
        remote += ["--poll", f"{poll:g}"] if poll is not None else []
    else:
        root = Path(store).expanduser().resolve()
        name, default_where = str(root), default_landing(root)
        if not (root / "versions").is_dir():
            click.echo(f"note: {root} holds no version yet; build one: segos build --store {root}", err=True)
    where = Path(landing if landing is not None else default_where).expanduser().resolve()
    command, *prefix = segos_command()
    args = [*prefix, "mcp", "--store", name, *remote, "--landing", str(where)]
    if version:
        args += ["--version", version]
    return {"type": "stdio", "command": command, "args": args}


def _change_command(action: str, doc: str, example: str) -> click.Command:
    @click.command(name=action, help=f"{doc}\n\n\b\nExample:\n  {example}")
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
        from ..graph.incremental import apply_change
        from ..store.served import served_or_none

        with _writing(store, wait) as st:
            result = apply_change(st, action, skill_dir, library=library)
            kept = served_or_none(st)
        if result.changed and not result.served:  # on stderr: stdout keeps the version id last
            click.echo(
                f"{still_served(kept)} (the change was made to {result.parent}, which is not served); serve "
                f"this version with `segos promote {result.version} --store {st.address}`",
                err=True,
            )
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

    return command


add_command = _change_command(
    "add",
    "Add the package SKILL_DIR (inside the library) as a new version; prints its id last.",
    "segos add path/to/library/new-skill --store data/store --json",
)
update_command = _change_command(
    "update",
    "Re-read the edited package SKILL_DIR into a new version; prints its id last.",
    "segos update path/to/library/csv-loader --store data/store",
)
remove_command = _change_command(
    "remove",
    "Drop the skill SKILL_DIR (delete its folder first) in a new version; prints its id last.",
    "segos remove path/to/library/old-skill --store data/store",
)
COMMANDS = (mcp_command, add_command, update_command, remove_command)
