"""The `segos` command line. Interfaces here (commands, flags, JSON shapes) are relied on by other tools:
add to them freely, never change what exists."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import click

from ..config import ENGINES, PRESETS, TRACE_FORMATS, EngineConfig, EvolutionConfig, build_preset
from ..paths import DEFAULT_LIBRARY
from ..progress import stage
from .common import (
    _emit_json,
    _fail,
    _load_retriever,
    _store,
    _writing,
    friendly_errors,
    json_option,
    k_option,
    min_score_option,
    reporter,
    require_extra,
    store_name,
    store_option,
    top_n_option,
    version_option,
    wait_option,
)
from .compare import compare_cmd
from .evaluate import eval_cmd
from .service import COMMANDS as SERVICE_COMMANDS
from .skills import COMMANDS as SKILL_COMMANDS

# The library modules a command needs are imported in the command, so that every `segos ...` pays only for
# what it runs (an incremental `segos update` on a big library is bounded by start-up time otherwise).


@click.group()
@click.version_option(package_name="segos", prog_name="segos")
def main() -> None:
    """segos: a self-evolving Graph-of-Skills retrieval layer."""


@main.command()
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
            f"warning: {_staying(kept)}; {vid} is not served yet. Serve it with "
            f"`segos promote {vid} --store {store_name(st)}` (or build with --promote)",
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
        click.echo(f"see the build report: segos report {manifest['version']} --store {store_name(st)}")
    click.echo(manifest["version"])


@main.command()
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


@main.command()
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


@main.command()
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


def _staying(kept: str | None) -> str:
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


@main.command()
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


@main.command()
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
    from ..evolution.ingest import TraceStore
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
                "traces": [{"part": _in_store(st, p), "ok": False, "problem": why} for p, why in parts],
                "damaged_parts": len(parts),
            }
        _emit_json({"versions": rows, "damaged": len(problems), **extra})
    elif every or not problems:  # one damaged version is the error line alone, on stderr
        for vid in ok:
            click.echo(f"{vid}: ok")
        for vid, why in sorted(problems.items()):
            click.echo(f"{vid}: DAMAGED: {why}")
        if traces is not None:
            damaged_in = {
                p.parent.parent.name if p.parent.name == "parts" else p.parent.name for p, _ in parts
            }
            for window in traces.windows():
                if window not in damaged_in:
                    click.echo(f"traces/{window}: ok")
            for p, why in parts:
                click.echo(f"{_in_store(st, p)}: DAMAGED: {why}")
    if problems and not every:
        vid, why = next(iter(problems.items()))
        _fail(f"version {vid} is damaged: {why}")
    if parts:
        first = parts[0][0]
        window = first.parent.parent.name if first.parent.name == "parts" else first.parent.name
        click.echo(f"to repair a damaged trace part: {repair_hint(first, window, st.root)}", err=True)
    damaged = [f"{len(problems)} damaged version(s)"] if problems else []
    damaged += [f"{len(parts)} damaged trace part(s)"] if parts else []
    if problems:
        _fail(
            f"{', '.join(damaged)}; snapshots are never repaired in place: restore them from a backup, or "
            "delete their folders and rebuild"
        )
    if parts:
        _fail(f"{damaged[0]}: set each aside and re-ingest its window's source (above)")


def _in_store(st: Any, path: Path) -> str:
    """A path inside the store, relative to it (as `verify` names trace parts)."""
    try:
        return str(path.relative_to(st.root))
    except ValueError:
        return str(path)


@main.command()
@click.argument("query")
@store_option
@version_option
@top_n_option
@click.option(
    "--max-chars", type=click.IntRange(min=1), default=None, help="Global character budget (default 9000)."
)
@min_score_option("no skills unless one reaches it")
@json_option
@click.option("--show-text", is_flag=True, help="Print the hydrated skill texts.")
@friendly_errors
def retrieve(
    query: str,
    store: Path | None,
    version: str | None,
    top_n: int | None,
    max_chars: int | None,
    min_score: float | None,
    as_json: bool,
    show_text: bool,
) -> None:
    """Retrieve the skill bundle for QUERY.

    \b
    Example:
      segos retrieve "parse a csv file and plot a chart" --json
    """
    if not query.strip():
        _fail("the query is empty; describe the task to retrieve skills for")
    from ..service.arguments import check_query_length

    query = check_query_length(query.strip())
    retriever = _load_retriever(store, version, top_n=top_n, total_chars=max_chars)
    bundle = retriever.retrieve(query, min_score=min_score)
    if as_json:
        _emit_json(bundle.to_dict())
        return
    if bundle.no_match:
        click.echo(
            f"version {bundle.version}: no skill is relevant to this query (none reaches relevance "
            f"{bundle.min_score:g}; --min-score 0 lists the closest anyway)"
        )
        return
    click.echo(f"version {bundle.version}: {len(bundle.skills)} skill(s), {bundle.chars} chars")
    click.echo(f"{'':>3} {'skill':<36} {'score':>8} {'relev.':>6}")
    for s in bundle.skills:
        mark = "seed" if s.seed else "co-use" if s.co_use > 0 else "graph" if s.lexical == 0 else ""
        click.echo(f"{s.rank:>2}. {s.name:<36} {s.score:8.4f} {s.relevance:6.2f} {mark:<6} {s.id}")
    for p in bundle.pruned:
        click.echo(f"    pruned {p['id']} (avoid edge with {p['avoided_with']})")
    if show_text:
        for s in bundle.skills:
            click.echo("\n" + s.text)


@main.command(name="replay")
@click.argument("queries", type=click.Path(path_type=Path))
@store_option
@version_option
@k_option
@json_option
@click.option("--details", is_flag=True, help="Include per-query rankings.")
@friendly_errors
def replay_cmd(
    queries: Path, store: Path | None, version: str | None, k: int, as_json: bool, details: bool
) -> None:
    """Replay QUERIES (JSONL with `query`/`instruction` and `gold`) against a version.

    \b
    Example:
      segos replay queries.jsonl --store data/store --k 5 --json
    """
    if k < 1:
        _fail("--k must be at least 1")
    from ..evaluation.replay import load_queries, replay

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
    for row in result.get("queries", []):  # --details: one line a query, misses marked
        mark = "hit " if row["hit"] else "MISS"
        label = row["task"] or f"line {row['line']}"
        click.echo(f"  {mark} {label}: gold {', '.join(row['gold'])} | top {', '.join(row['ranked']) or '-'}")


def _parse_settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    """`--set key=value` pairs; values are read as JSON when they parse (numbers, booleans), else text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


@main.command()
@click.argument("traces", type=click.Path(path_type=Path))
@store_option
@click.option(
    "--window", default=None, help="Window id (e.g. 2026-11-29); default: each trace's timestamp date."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(TRACE_FORMATS),
    default="native",
    show_default=True,
    help="Format of the trace files.",
)
@click.option(
    "--queries",
    type=click.Path(path_type=Path),
    default=None,
    help="Eval JSONL giving the query text by task id (skillsbench-trials).",
)
@click.option(
    "--version", "version", default=None, help="Version whose skills names resolve against (default: latest)."
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10_000_000),
    default=None,
    help="Lines validated and stored per batch (memory follows it; default 50,000).",
)
@json_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@wait_option
@friendly_errors
def ingest(
    traces: Path,
    store: Path | None,
    window: str | None,
    fmt: str,
    queries: Path | None,
    version: str | None,
    batch_size: int | None,
    as_json: bool,
    quiet: bool,
    wait: float,
) -> None:
    """Validate TRACES (a file or folder) into the store's per-window trace tables.

    Every line is checked against the trace contract (`segos trace-schema`); a line that breaks it, and a
    trace id already stored with different content, is quarantined with its reason, never an abort.

    \b
    Example:
      segos ingest landing/ --store data/store --json
    """
    if not traces.exists():
        _fail(f"trace source not found: {traces}")
    from ..evolution.ingest import TraceStore
    from ..evolution.trace_batches import INGEST_BATCH

    progress = reporter("ingest", quiet)
    with _writing(store, wait) as st:  # an evolution round reading the window waits for the whole ingest
        report = TraceStore(st).ingest_path(
            traces,
            fmt,
            queries=queries,
            window=window,
            version=version,
            batch_size=batch_size or INGEST_BATCH,
            progress=progress,
        )
    progress.summary()
    if as_json:
        _emit_json(report.to_dict())
        return
    click.echo(
        f"read {report.read}: {report.accepted} accepted, {report.duplicates} duplicate(s) skipped, "
        f"{report.quarantined} quarantined (skills resolved against {report.version})"
    )
    traces_dir = TraceStore(st).root
    for w, c in sorted(report.windows.items()):
        where = f" ({traces_dir / w / 'quarantine.jsonl'})" if c["quarantined"] else ""
        click.echo(
            f"  window {w}: +{c['accepted']} (total {c['total']}), {c['quarantined']} quarantined{where}"
        )
    if report.conflicts:
        click.echo(f"  {report.conflicts} conflict(s): ids already ingested with different content")
    for reason, n in report.quarantine_reasons.items():
        click.echo(f"  quarantined x{n}: {reason}")
    if report.unknown_skills:
        click.echo(f"  unknown skills (dropped from the traces): {', '.join(report.unknown_skills)}")
    for item in report.skipped:  # left unread: links, non-regular files, torn last lines
        click.echo(f"  skipped {item['source']}: {item['reason']}")


@main.command("trace-schema")
@click.option("--json", "as_json", is_flag=True, help="Print the schema as JSON (what it prints anyway).")
def trace_schema(as_json: bool) -> None:
    """Print the JSON Schema of a native trace line (the contract `segos ingest` and `record_trace` apply).

    \b
    Example:
      segos trace-schema --json > trace.schema.json
    """
    from ..evolution.traces import trace_json_schema

    click.echo(json.dumps(trace_json_schema(), indent=2, sort_keys=True))


@main.command()
@store_option
@click.option("--window", required=True, help="The window of ingested traces to evolve on.")
@click.option(
    "--from",
    "from_version",
    default=None,
    help="Parent version: an id, vN, latest or served (default: latest).",
)
@click.option("--pool", is_flag=True, help="Pool all attempts instead of the final one per (task, agent).")
@click.option("--no-l1", is_flag=True, help="Skip the topology update.")
@click.option("--no-l2", is_flag=True, help="Skip the edge-weight update.")
@click.option("--no-l3", is_flag=True, help="Skip the description update.")
@click.option("--set", "settings", multiple=True, help="Evolution setting key=value (e.g. --set blend=true).")
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="local",
    show_default=True,
    help="Where the per-partition trace work runs: polars in this process, or Apache Spark (the same "
    "kernels; needs `pip install 'segos[spark]'` and Java 17).",
)
@click.option(
    "--spark-master",
    default=None,
    help="Spark master URL (e.g. spark://host:7077); default: $SPARK_REMOTE (Spark Connect), else local[*].",
)
@click.option(
    "--partitions",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Partitions of the window by task hash (default: from the window's size).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the manifest (with per-rule counters).")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@wait_option
@friendly_errors
def evolve(
    store: Path | None,
    window: str,
    from_version: str | None,
    pool: bool,
    no_l1: bool,
    no_l2: bool,
    no_l3: bool,
    settings: tuple[str, ...],
    engine: str,
    spark_master: str | None,
    partitions: int | None,
    as_json: bool,
    quiet: bool,
    wait: float,
) -> None:
    """Make version N+1 from version N and a window of traces; prints the new version id last.

    \b
    Example:
      segos evolve --window 2026-11-29 --from served --store data/store
    """
    config = EvolutionConfig().with_overrides(**_parse_settings(settings))
    config = config.with_overrides(
        pool_attempts=pool or config.pool_attempts,
        l1_topology=config.l1_topology and not no_l1,
        l2_weights=config.l2_weights and not no_l2,
        l3_descriptions=config.l3_descriptions and not no_l3,
    )
    if spark_master is not None and engine != "spark":
        _fail("--spark-master needs --engine spark")
    from ..evolution.engines import make_engine
    from ..evolution.round import evolve as run_evolution
    from ..retrieval.ranker import warm_caches
    from ..store.served import served_or_none

    engine_config = EngineConfig(engine=engine, spark_master=spark_master, partitions=partitions)
    if engine == "spark":
        require_extra("spark", ["pyspark", "pandas"], "--engine spark (Java 17 needed too)")
    progress = reporter("evolve", quiet)
    with _writing(store, wait) as st:
        manifest = run_evolution(
            st, window, from_version, config, progress=progress, engine=make_engine(engine_config)
        )
        kept = served_or_none(st)
    progress.add_timings(manifest.get("timings_s", {}))
    with stage(progress, "retrieval caches"):
        warm_caches(st.load(manifest["version"]))
    progress.summary()
    if as_json:
        _emit_json(manifest)
        return
    if not quiet:
        click.echo(f"{manifest['parent']} + window {window} -> round {manifest['round']}")
        for layer, rules in manifest["counters"].items():
            click.echo(f"  {layer}: {_counters_line(rules)}")
    if kept != manifest["version"]:
        click.echo(
            f"{_staying(kept)} ({_why_not_served(manifest, config, kept)}); serve this version with "
            f"`segos promote {manifest['version']} --store {store_name(st)}`",
            err=True,
        )
    click.echo(manifest["version"])


def _why_not_served(manifest: dict[str, Any], config: EvolutionConfig, kept: str | None) -> str:
    if kept is None:
        return "a round moves only a readable pointer"
    if manifest.get("parent") != kept:
        return (
            f"the round's parent {manifest.get('parent')} is not the served version; `--from served` "
            "evolves the served one"
        )
    if not config.auto_promote:
        return "auto_promote is off"
    return "the round's held-out check did not pass"


def _counters_line(rules: Any, prefix: str = "") -> str:
    """A round's counters of one layer as `key=value` pairs, nested ones dotted (the manifest has them as
    JSON: `--json`)."""
    if not isinstance(rules, dict):
        return f"{prefix}={rules}" if prefix else str(rules)
    parts = [
        _counters_line(v, f"{prefix}{k}" if not isinstance(v, dict) else f"{prefix}{k}.")
        for k, v in rules.items()
    ]
    return ", ".join(p for p in parts if p)


@main.command()
@click.argument("v1")
@click.argument("v2")
@store_option
@json_option
@click.option("--markdown", is_flag=True, help="Print the diff as a Markdown report.")
@click.option("--limit", type=int, default=15, show_default=True, help="Rows in the largest-changes listing.")
@friendly_errors
def diff(v1: str, v2: str, store: Path | None, as_json: bool, markdown: bool, limit: int) -> None:
    """What changed from version V1 to version V2.

    \b
    Example:
      segos diff v1 v2 --store data/store --json
    """
    from ..store.diff import diff_versions
    from ..store.diff import to_markdown as diff_markdown
    from ..store.diff import to_table as diff_table

    st = _store(store)
    result = diff_versions(st.load(v1), st.load(v2))
    if as_json:
        _emit_json(result)
    elif markdown:
        click.echo(diff_markdown(result, limit))
    else:
        click.echo(diff_table(result, limit))


@main.command()
@click.option(
    "--queries",
    type=click.Path(path_type=Path),
    default=None,
    help="Tasks with gold skills (JSONL; default: the demo queries shipped with segos).",
)
@store_option
@version_option
@click.option(
    "--traces",
    "n_traces",
    type=int,
    default=1000,
    show_default=True,
    help="How many SIMULATED traces to write.",
)
@click.option(
    "--window",
    default="2026-11-29",
    show_default=True,
    callback=lambda ctx, param, value: _date(param, value),
    help="Date the simulated traces carry (YYYY-MM-DD).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Simulator seed (same seed, same traces)."
)
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="JSONL file to write (native format)."
)
@json_option
@friendly_errors
def simulate(
    queries: Path | None,
    store: Path | None,
    version: str | None,
    n_traces: int,
    window: str,
    seed: int,
    out: Path,
    as_json: bool,
) -> None:
    """Write SIMULATED traces (labelled `simulated: true`) for TASKS against a version.

    \b
    Example:
      segos simulate --traces 200 --out simulated.jsonl --store data/store
    """
    from ..evaluation.replay import load_queries
    from ..evaluation.simulate import SimulationConfig, to_native
    from ..evaluation.simulate import simulate as run_simulation
    from ..paths import DEFAULT_QUERIES

    retriever = _load_retriever(store, version)
    tasks = load_queries(queries or DEFAULT_QUERIES).queries
    records = run_simulation(retriever, tasks, SimulationConfig(traces=n_traces, seed=seed, window=window))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(to_native(r)) + "\n")
    ok = sum(r.reward >= 0.9 for r in records)
    if as_json:
        _emit_json({"traces": len(records), "successful": ok, "tasks": len(tasks), "out": str(out)})
        return
    click.echo(f"wrote {len(records)} SIMULATED traces ({ok} successful) for {len(tasks)} tasks to {out}")


def _date(param: click.Parameter, value: str) -> str:
    """A YYYY-MM-DD option value, or a usage error naming the option (not "Invalid isoformat string")."""
    try:  # fromisoformat alone also takes 20261129 and 2026-W48-1
        ok = len(value) == 10 and date.fromisoformat(value) is not None
    except ValueError:
        ok = False
    if not ok:
        raise click.BadParameter(f"expected YYYY-MM-DD, got {value!r}", param=param)
    return value


@main.command(name="generate-library")
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["apibank", "toolbench"]),
    required=True,
    help="Format of the source: its tools become the library's packages.",
)
@json_option
@friendly_errors
def generate_library(source: Path, out_dir: Path, fmt: str, as_json: bool) -> None:
    """Write a SKILL.md library generated from a trace source's APIs (API-Bank, ToolBench).

    \b
    Example:
      segos generate-library apibank/ generated-library/ --format apibank --json
    """
    from ..evolution.adapters import write_library

    summary = write_library(source, fmt, out_dir)
    if as_json:
        _emit_json(summary)
        return
    click.echo(f"wrote {summary['skills']} skill package(s) from {fmt} to {summary['out_dir']}")
    for key, value in summary.items():  # the adapter's counts and lists, each on its own line
        if key in ("format", "out_dir", "skills") or value in ([], None, ""):
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        click.echo(f"  {key.replace('_', ' ')}: {shown}")


main.add_command(eval_cmd)
main.add_command(compare_cmd)
for _cmd in (*SERVICE_COMMANDS, *SKILL_COMMANDS):  # mcp add update remove | skills show explain export
    main.add_command(_cmd)
