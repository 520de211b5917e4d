"""Commands that query a version: `segos retrieve` (one bundle) and `replay` (a query set's metrics)
(registered in `main.py`)."""

from __future__ import annotations

from pathlib import Path

import click

from .common import (
    _emit_json,
    _fail,
    _load_retriever,
    friendly_errors,
    json_option,
    k_option,
    min_score_option,
    store_option,
    top_n_option,
    version_option,
)


@click.command()
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
    from ..service.arguments import checked_query

    query = checked_query(query)
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
    # ids: what `segos show` and `segos explain` take (a library's folders, so they hold the names)
    width = max([len("skill"), *(len(s.id) for s in bundle.skills)])
    click.echo(f"{'':>3} {'skill':<{width}} {'score':>8} {'relev.':>6}  why")
    for s in bundle.skills:
        click.echo(f"{s.rank:>2}. {s.id:<{width}} {s.score:8.4f} {s.relevance:6.2f}  {s.why}")
    for p in bundle.pruned:
        click.echo(f"    pruned {p['id']} (avoid edge with {p['avoided_with']})")
    if show_text:
        for s in bundle.skills:
            click.echo("\n" + s.text)


@click.command(name="replay")
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


COMMANDS = (retrieve, replay_cmd)
