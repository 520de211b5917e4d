"""The evolution loop's commands: `segos ingest`, `trace-schema`, `evolve`, `diff`, `simulate`,
`generate-library` (registered in `main.py`)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import click

from ..config import ENGINES, TRACE_FORMATS, EngineConfig, EvolutionConfig
from ..progress import stage
from .common import (
    _emit_json,
    _fail,
    _load_retriever,
    _store,
    _writing,
    friendly_errors,
    json_option,
    reporter,
    require_extra,
    store_option,
    version_option,
    wait_option,
)
from .versions import still_served


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


@click.command()
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


@click.command("trace-schema")
@click.option("--json", "as_json", is_flag=True, help="Print the schema as JSON (what it prints anyway).")
def trace_schema(as_json: bool) -> None:
    """Print the JSON Schema of a native trace line (the contract `segos ingest` and `record_trace` apply).

    \b
    Example:
      segos trace-schema --json > trace.schema.json
    """
    from ..evolution.traces import trace_json_schema

    click.echo(json.dumps(trace_json_schema(), indent=2, sort_keys=True))


@click.command()
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
            f"{still_served(kept)} ({_why_not_served(manifest, config, kept)}); serve this version with "
            f"`segos promote {manifest['version']} --store {st.address}`",
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


@click.command()
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


@click.command()
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


@click.command(name="generate-library")
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


COMMANDS = (ingest, trace_schema, evolve, diff, simulate, generate_library)
