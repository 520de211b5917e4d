"""Commands over a store's versions: `segos build`, `versions`, `promote`, `rollback`, `report`, `verify`
(registered in `main.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..config import PRESETS, build_preset
from ..paths import DEFAULT_LIBRARY
from ..progress import stage
from .common import (
    _emit_json,
    _fail,
    _store,
    _writing,
    friendly_errors,
    in_store,
    json_option,
    reporter,
    store_option,
    wait_option,
)


@click.command()
@click.argument("library", required=False, type=click.Path(path_type=Path))
@store_option
@click.option(
    "--preset",
    type=click.Choice(PRESETS),
    default="default",
    show_default=True,
    help="Settings: 'default' (what wins on dev data) or 'paper' (the published kNN k = 1, no idf cutoff, "
    "no semantic evidence); recorded in the manifest, and retrieval over the version starts from it.",
)
@click.option("--allow-empty", is_flag=True, help="Commit a version even if LIBRARY holds no skill package.")
@click.option(
    "--promote",
    is_flag=True,
    help="Serve the new version (followers switch to it) even if the store already holds versions; "
    "into an empty store the first version is always served.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the manifest instead of a summary.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@wait_option
@friendly_errors
def build(
    library: Path | None,
    store: Path | None,
    preset: str,
    allow_empty: bool,
    promote: bool,
    as_json: bool,
    quiet: bool,
    wait: float,
) -> None:
    """Build the cold-start graph version of LIBRARY (default: the demo library shipped with segos).

    Into a store that already holds versions, the new version is not served (followers keep serving the
    served version) unless --promote is given; `segos promote VERSION` serves it later.

    \b
    Example:
      segos build path/to/skills --store data/store --promote
    """
    from ..graph.build import build_cold_start
    from ..retrieval.ranker import warm_caches
    from ..store.served import promote as serve
    from ..store.served import served_or_none

    library = library or DEFAULT_LIBRARY
    if not library.is_dir():
        _fail(f"skill library folder not found: {library} (give a folder that contains SKILL.md packages)")
    progress = reporter("build", quiet)
    with _writing(store, wait, create=True) as st:
        first = not st.list_versions()
        manifest = build_cold_start(
            library, st, build_preset(preset), progress=progress, allow_empty=allow_empty
        )
        vid = manifest["version"]
        if promote or first:
            serve(st, vid, "cold start (segos build --promote)" if promote else "first version", verify=False)
        kept = served_or_none(st)
    progress.add_timings(manifest.get("timings_s", {}))
    if kept != vid:  # on stderr: stdout keeps the version id last (and --json its shape)
        click.echo(
            f"warning: {still_served(kept)}; {vid} is not served yet. Serve it with "
            f"`segos promote {vid} --store {st.address}` (or build with --promote)",
            err=True,
        )
    with stage(progress, "retrieval caches"):
        warm_caches(st.load(manifest["version"]))
    progress.summary()
    if as_json:
        _emit_json(manifest)
        return
    counts = manifest["counts"]
    sem = counts["semantic"]
    click.echo(f"skills: {counts['skills']}   problems reported: {counts['problems']}")
    click.echo(
        f"semantic edges: {sem['directed_edges']} directed, {sem['unordered_pairs']} unordered pairs, "
        f"max degree {sem['max_degree']}, {sem['isolated']} isolated"
    )
    if counts["problems"]:
        click.echo(f"see the build report: segos report {manifest['version']} --store {st.address}")
    click.echo(manifest["version"])


@click.command()
@store_option
@json_option
@friendly_errors
def versions(store: Path | None, as_json: bool) -> None:
    """List the versions in a store, oldest first; the served one is marked (`"served": true`).

    \b
    Example:
      segos versions --store data/store --json
    """
    from ..store.served import served
    from ..store.snapshot import SnapshotError

    st = _store(store)
    manifests = st.list_versions()
    for vid, why in sorted(st.unreadable_versions().items()):  # on stderr: --json's stdout keeps its shape
        click.echo(f"warning: {vid} is not listed: {why} (`segos verify --all` reports it)", err=True)
    try:
        serving = served(st) if manifests else None
    except SnapshotError as exc:  # a pointer to a version not listed: the listing is what helps then
        serving = None
        click.echo(f"warning: {exc}", err=True)
    if as_json:
        _emit_json([{**m, "served": m["version"] == serving} for m in manifests])
        return
    if not manifests:
        click.echo("no versions yet; run `segos build`")
        return
    click.echo(
        f"{'version':<16} {'kind':<11} {'parent':<16} {'window':<12} {'skills':>7} {'edges':>8}  created"
    )
    for m in manifests:
        c = m.get("counts", {})
        mark = "  <- served" if m["version"] == serving else ""
        click.echo(
            f"{m['version']:<16} {m.get('kind', ''):<11} {m.get('parent') or '-':<16} "
            f"{m.get('window') or '-':<12} {c.get('skills', 0):>7} {c.get('edges', 0):>8}  {m['created_at']}"
            f"{mark}"
        )


@click.command()
@click.argument("version")
@store_option
@json_option
@wait_option
@friendly_errors
def promote(version: str, store: Path | None, as_json: bool, wait: float) -> None:
    """Serve VERSION: `segos mcp` and every service following the store switch to it. VERSION is an id, a
    unique prefix, vN or `latest`; a damaged version is refused. `segos rollback` undoes it.

    \b
    Example:
      segos promote v3 --store data/store
    """
    from ..store.served import promote as serve
    from ..store.served import served_or_none

    with _writing(store, wait) as st:
        before = served_or_none(st)
        now = serve(st, version, f"segos promote {version}")
    _served_result(now, before, as_json)


@click.command()
@store_option
@json_option
@wait_option
@friendly_errors
def rollback(store: Path | None, as_json: bool, wait: float) -> None:
    """Serve again the version served before the current one (each promotion is kept, newest last).

    \b
    Example:
      segos rollback --store data/store
    """
    from ..store.served import rollback as roll_back
    from ..store.served import served_or_none

    with _writing(store, wait) as st:
        before = served_or_none(st)
        now = roll_back(st, "segos rollback")
    _served_result(now, before, as_json)


def still_served(kept: str | None) -> str:
    """Which version stays served, for a command whose new version is not served."""
    if kept is None:
        return "the store's served.json is unreadable (`segos promote VERSION` rewrites it)"
    return f"{kept} stays served"


def _served_result(now: Any, before: str | None, as_json: bool) -> None:
    """What `promote` and `rollback` print: the pointer (JSON) or one line, the served id last."""
    if as_json:
        _emit_json({**now.as_dict(), "was": before})
        return
    was = before or "an unreadable served.json (rewritten)"
    click.echo(f"served: {was} -> {now.version}" if before != now.version else "served: unchanged")
    click.echo(now.version)


@click.command()
@click.argument("version", required=False)
@store_option
@json_option
@friendly_errors
def report(version: str | None, store: Path | None, as_json: bool) -> None:
    """Show the build report (every parsing problem and what was done) of VERSION.

    \b
    Example:
      segos report --store data/store --json
    """
    st = _store(store)
    snap = origin = st.load(version)
    # An evolution round parses nothing: its library is the one its nearest parsing ancestor read.
    while "report.parquet" not in origin.manifest.get("files", {}) and origin.manifest.get("parent"):
        origin = st.load(origin.manifest["parent"])
    table = origin.read_extra("report.parquet")
    if origin is not snap:
        click.echo(
            f"note: {snap.version} ({snap.manifest.get('kind')}) parsed no library; this is the report of "
            f"{origin.version} ({origin.manifest.get('kind')}), whose library it serves",
            err=True,
        )
    if as_json:
        _emit_json({"version": snap.version, "report_of": origin.version, "problems": table.to_dicts()})
        return
    if table.is_empty():
        click.echo(f"{origin.version}: no problems")
        return
    for row in table.iter_rows(named=True):
        click.echo(f"[{row['severity']}] {row['file']}: {row['problem']} -> {row['action']}")


@click.command()
@click.argument("version", required=False)
@store_option
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Check every version, report unreadable manifests, and check every trace window's parts.",
)
@json_option
@friendly_errors
def verify(version: str | None, store: Path | None, every: bool, as_json: bool) -> None:
    """Check VERSION's files (default: the newest version's) against the sha256 hashes in its manifest, its
    id against its manifest, and its folder for files the manifest does not list; `--all` also checks the
    stored trace parts against their hashes.

    \b
    Example:
      segos verify --all --store data/store --json
    """
    from ..evolution.ingest import TraceStore, window_of_file
    from ..evolution.trace_parts import repair_hint

    st = _store(store)
    if every and version is not None:
        _fail("give a VERSION or --all, not both")
    problems = st.unreadable_versions() if every else {}
    checked = [m["version"] for m in st.list_versions()] if every else [st.resolve(version)]
    ok = []
    for vid in checked:
        files = st.files(vid)
        bad = files.verify()
        why = [f"{', '.join(bad)} differ from the manifest"] if bad else []
        why += files.manifest_problems()
        if why:
            problems[vid] = "; ".join(why)
        else:
            ok.append(vid)
    traces = TraceStore(st) if every else None
    parts = traces.damaged_parts() if traces is not None else []
    if as_json:
        rows = [{"version": v, "ok": True, "problem": None} for v in ok]
        rows += [{"version": v, "ok": False, "problem": why} for v, why in sorted(problems.items())]
        extra = {}
        if every:
            extra = {
                "traces": [{"part": in_store(st, p), "ok": False, "problem": why} for p, why in parts],
                "damaged_parts": len(parts),
            }
        _emit_json({"versions": rows, "damaged": len(problems), **extra})
    elif every or not problems:  # one damaged version is the error line alone, on stderr
        for vid in ok:
            click.echo(f"{vid}: ok")
        for vid, why in sorted(problems.items()):
            click.echo(f"{vid}: DAMAGED: {why}")
        if traces is not None:
            damaged_in = {window_of_file(p) for p, _ in parts}
            for window in traces.windows():
                if window not in damaged_in:
                    click.echo(f"traces/{window}: ok")
            for p, why in parts:
                click.echo(f"{in_store(st, p)}: DAMAGED: {why}")
    if problems and not every:
        vid, why = next(iter(problems.items()))
        _fail(
            f"version {vid} is damaged: {why} (`segos repair {vid}` makes damaged cold-start files again "
            "from the library)"
        )
    if parts:
        first = parts[0][0]
        window = window_of_file(first)
        click.echo(f"to repair a damaged trace part: {repair_hint(first, window, st.root)}", err=True)
    damaged = [f"{len(problems)} damaged version(s)"] if problems else []
    damaged += [f"{len(parts)} damaged trace part(s)"] if parts else []
    if problems:
        _fail(
            f"{', '.join(damaged)}; `segos repair --all` makes damaged cold-start files again from the "
            "library; restore anything else from a backup, or delete the versions' folders and rebuild"
        )
    if parts:
        _fail(f"{damaged[0]}: set each aside and re-ingest its window's source (above)")


COMMANDS = (build, versions, promote, rollback, report, verify)
