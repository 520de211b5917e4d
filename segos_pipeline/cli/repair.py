"""`segos repair`: damaged version files made again from the library (`graph/repair.py`). Registered into
the `segos` group by `main.py`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .common import (
    _emit_json,
    _fail,
    _store,
    friendly_errors,
    in_store,
    json_option,
    reporter,
    store_option,
    wait_option,
)

if TYPE_CHECKING:
    from ..store.snapshot import SnapshotStore


@click.command(name="repair")
@click.argument("version", required=False)
@store_option
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Repair every version (and name the damaged trace parts, with the way to restore them).",
)
@click.option(
    "--library",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The library to rebuild from (default: the folder the cold start records), e.g. after it moved.",
)
@json_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@wait_option
@friendly_errors
def repair_cmd(
    version: str | None,
    store: Path | None,
    every: bool,
    library: Path | None,
    as_json: bool,
    quiet: bool,
    wait: float,
) -> None:
    """Repair VERSION's damaged files (default: the newest version's) that a cold-start build of its
    library makes again: the cold start is rebuilt into the store's staging folder, and a rebuilt file
    replaces a damaged one (in every version that shares it) only if its sha256 is the manifest's. Files
    that verify are never touched; files a cold start does not make (an evolved version's own tables) are
    named with what to do. Exits 2 unless every version checked verifies afterwards.

    \b
    Example:
      segos repair --all --store data/store --json
    """
    from ..graph.repair import repair

    if every and version is not None:
        _fail("give a VERSION or --all, not both")
    if library is not None and not library.is_dir():
        _fail(f"library folder not found: {library} (give the folder the cold start was built from)")
    st = _store(store)
    st.lock_timeout = wait
    unreadable = st.unreadable_versions() if every else {}
    checked = [m["version"] for m in st.list_versions()] if every else [st.resolve(version)]
    result = repair(st, checked, library, progress=reporter("repair", quiet))
    parts = _damaged_parts(st) if every else []
    if as_json:
        out = result.to_dict()
        out["versions"] += [
            {"version": v, "ok": False, "repaired": [], "left": [{"file": "manifest.json", "problem": why}]}
            for v, why in sorted(unreadable.items())
        ]
        if every:
            out["traces"] = [{"part": p, "ok": False, "problem": why} for p, why in parts]
        _emit_json(out)
    else:
        for o in result.repaired:
            click.echo(f"{o.version}: repaired {o.file} ({o.detail})")
        touched = {o.version for o in result.outcomes}
        for vid in checked:
            if vid not in touched:
                click.echo(f"{vid}: ok")
        for o in result.left:
            click.echo(f"{o.version}: NOT REPAIRED {o.file}: {o.detail}")
        for vid, why in sorted(unreadable.items()):
            click.echo(f"{vid}: NOT REPAIRED: {why}; restore it from a backup, or delete its folder")
        for p, why in parts:
            click.echo(f"{p}: NOT REPAIRED: {why}")
    left = len(result.left) + len(unreadable)
    if left or parts:
        what = [f"{left} damaged file(s) or manifest(s) left as they were"] if left else []
        what += [f"{len(parts)} damaged trace part(s): {parts[0][1]}"] if parts else []
        _fail(f"{'; '.join(what)} (see above)")
    if not as_json:
        n = len(result.repaired)
        click.echo(f"repaired {n} file(s); every version checked verifies" if n else "nothing to repair")


def _damaged_parts(st: SnapshotStore) -> list[tuple[str, str]]:
    """Damaged trace parts (store-relative path, why and what to do): repair cannot make traces again."""
    from ..evolution.ingest import TraceStore, window_of_file
    from ..evolution.trace_parts import repair_hint

    out = []
    for p, why in TraceStore(st).damaged_parts():
        window = window_of_file(p)
        out.append((in_store(st, p), f"{why}; {repair_hint(p, window, st.root)}"))
    return out
