"""The `segos` command line. Interfaces here (commands, flags, JSON shapes) are relied on by other tools:
add to them freely, never change what exists."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .build import build_cold_start
from .config import RetrievalConfig
from .paths import DEFAULT_LIBRARY, default_store
from .replay import load_queries, replay
from .retrieval import Retriever
from .snapshot import SnapshotError, SnapshotStore


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's expected failures into one actionable stderr line and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SnapshotError as exc:
            _fail(str(exc))
        except FileNotFoundError as exc:
            _fail(str(exc) if exc.filename is None else f"{exc.strerror or 'not found'}: {exc.filename}")
        except (ValueError, KeyError) as exc:
            _fail(str(exc))

    return wrapper


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def _progress(quiet: bool) -> Callable[[str], None] | None:
    return None if quiet else (lambda msg: click.echo(f"[segos] {msg}", err=True))


store_option = click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Snapshot store folder (default: $SEGOS_STORE or data/store).",
)
version_option = click.option(
    "--version", "version", default=None, help="Version id, prefix or vN (default: latest)."
)


def _store(path: Path | None) -> SnapshotStore:
    return SnapshotStore(path or default_store())


def _load_retriever(store: Path | None, version: str | None, **overrides: Any) -> Retriever:
    config = RetrievalConfig().with_overrides(**{k: v for k, v in overrides.items() if v is not None})
    return Retriever(_store(store).load(version), config)


@click.group()
@click.version_option(package_name="segos", prog_name="segos")
def main() -> None:
    """segos: a self-evolving Graph-of-Skills retrieval layer."""


@main.command()
@click.argument("library", required=False, type=click.Path(path_type=Path))
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the manifest instead of a summary.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@friendly_errors
def build(library: Path | None, store: Path | None, as_json: bool, quiet: bool) -> None:
    """Build the cold-start graph version of LIBRARY (default: the demo library in data/)."""
    library = library or DEFAULT_LIBRARY
    if not library.is_dir():
        _fail(f"skill library folder not found: {library} (give a folder that contains SKILL.md packages)")
    manifest = build_cold_start(library, _store(store), progress=_progress(quiet or as_json))
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
        click.echo(f"see the build report: segos report {manifest['version']} --store {_store(store).root}")
    click.echo(manifest["version"])


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def versions(store: Path | None, as_json: bool) -> None:
    """List the versions in a store, oldest first."""
    manifests = _store(store).list_versions()
    if as_json:
        _emit_json(manifests)
        return
    if not manifests:
        click.echo("no versions yet; run `segos build`")
        return
    click.echo(
        f"{'version':<16} {'kind':<11} {'parent':<16} {'window':<12} {'skills':>7} {'edges':>8}  created"
    )
    for m in manifests:
        c = m.get("counts", {})
        click.echo(
            f"{m['version']:<16} {m.get('kind', ''):<11} {m.get('parent') or '-':<16} "
            f"{m.get('window') or '-':<12} {c.get('skills', 0):>7} {c.get('edges', 0):>8}  {m['created_at']}"
        )


@main.command()
@click.argument("version", required=False)
@store_option
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def report(version: str | None, store: Path | None, as_json: bool) -> None:
    """Show the build report (every parsing problem and what was done) of VERSION."""
    snap = _store(store).load(version)
    table = snap.read_extra("report.parquet")
    if as_json:
        _emit_json({"version": snap.version, "problems": table.to_dicts()})
        return
    if table.is_empty():
        click.echo(f"{snap.version}: no problems")
        return
    for row in table.iter_rows(named=True):
        click.echo(f"[{row['severity']}] {row['file']}: {row['problem']} -> {row['action']}")


@main.command()
@click.argument("version", required=False)
@store_option
@friendly_errors
def verify(version: str | None, store: Path | None) -> None:
    """Check VERSION's files against the sha256 hashes in its manifest."""
    st = _store(store)
    vid = st.resolve(version)
    bad = st.verify(vid)
    if bad:
        _fail(f"version {vid} is damaged: {', '.join(bad)} differ from the manifest")
    click.echo(f"{vid}: ok")


@main.command()
@click.argument("query")
@store_option
@version_option
@click.option("--top-n", type=int, default=None, help="Bundle size (default 5).")
@click.option("--max-chars", type=int, default=None, help="Global character budget (default 9000).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--show-text", is_flag=True, help="Print the hydrated skill texts.")
@friendly_errors
def retrieve(
    query: str,
    store: Path | None,
    version: str | None,
    top_n: int | None,
    max_chars: int | None,
    as_json: bool,
    show_text: bool,
) -> None:
    """Retrieve the skill bundle for QUERY."""
    if not query.strip():
        _fail("the query is empty; describe the task to retrieve skills for")
    retriever = _load_retriever(store, version, top_n=top_n, total_chars=max_chars)
    bundle = retriever.retrieve(query)
    if as_json:
        _emit_json(bundle.to_dict())
        return
    click.echo(f"version {bundle.version}: {len(bundle.skills)} skill(s), {bundle.chars} chars")
    for s in bundle.skills:
        mark = "seed" if s.seed else "graph" if s.lexical == 0 else ""
        click.echo(f"{s.rank:>2}. {s.name:<36} {s.score:8.4f} {mark:<5} {s.id}")
    for p in bundle.pruned:
        click.echo(f"    pruned {p['id']} (avoid edge with {p['avoided_with']})")
    if show_text:
        for s in bundle.skills:
            click.echo("\n" + s.text)


@main.command(name="replay")
@click.argument("queries", type=click.Path(path_type=Path))
@store_option
@version_option
@click.option("--k", type=int, default=5, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--details", is_flag=True, help="Include per-query rankings.")
@friendly_errors
def replay_cmd(
    queries: Path, store: Path | None, version: str | None, k: int, as_json: bool, details: bool
) -> None:
    """Replay QUERIES (JSONL with `query`/`instruction` and `gold`) against a version."""
    if k < 1:
        _fail("--k must be at least 1")
    retriever = _load_retriever(store, version)
    qf = load_queries(queries)
    if not qf.queries:
        _fail(f"no usable queries in {queries} ({len(qf.skipped)} line(s) skipped)")
    result = replay(retriever, qf, k=k, details=details)
    for s in qf.skipped:
        click.echo(f"warning: {queries}:{s['line']}: skipped, {s['reason']}", err=True)
    if result["unknown_gold"]:
        click.echo(f"warning: gold names not in the library: {', '.join(result['unknown_gold'])}", err=True)
    if as_json:
        _emit_json(result)
        return
    mbr = result["mean_best_rank"]
    click.echo(f"version {result['version']}  k={k}  queries={result['n']}")
    click.echo(
        f"hit@{k} {result['hit']:.3f}  recall@{k} {result['recall']:.3f}  COMP@{k} {result['comp']:.3f}  "
        f"MRR {result['mrr']:.3f}  mean best rank {mbr if mbr is None else round(mbr, 3)}"
    )
    click.echo(f"latency ms p50 {result['latency_ms']['p50']:.3f}  p95 {result['latency_ms']['p95']:.3f}")


if __name__ == "__main__":  # pragma: no cover
    main()
