"""`segos compare`: two versions side by side (a task's bundle, a query set's replay), as the quick start
ends. Registered into the `segos` group by `main.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .common import _emit_json, _fail, _load_retriever, friendly_errors, json_option, k_option, store_option

MARK_NEEDED = "*"


@click.command(name="compare")
@click.argument("before")
@click.argument("after")
@store_option
@click.option("--query", default=None, help="A task: print its bundle on both versions, side by side.")
@click.option(
    "--queries",
    type=click.Path(path_type=Path),
    default=None,
    help="A query file with gold bundles (JSONL, as `segos replay` reads): print both versions' replay "
    "metrics; a --query found in it gets its needed skills marked.",
)
@k_option
@json_option
@friendly_errors
def compare_cmd(
    before: str,
    after: str,
    store: Path | None,
    query: str | None,
    queries: Path | None,
    k: int,
    as_json: bool,
) -> None:
    """Compare version BEFORE with version AFTER (ids, prefixes or vN), e.g. the cold start and the
    evolved version.

    \b
    Example:
      segos compare v1 v3 --query "fit an xgboost model" --queries holdout.jsonl
    """
    if not query and queries is None:
        _fail("give --query TASK (its bundle on both versions), --queries FILE (replay metrics), or both")
    if query is not None and not query.strip():
        _fail("the --query is empty; describe the task to retrieve skills for")
    from ..evaluation.compare import compare_bundles, compare_replay
    from ..evaluation.replay import load_queries

    old, new = _load_retriever(store, before), _load_retriever(store, after)
    qf = load_queries(queries) if queries is not None else None
    if qf is not None and not qf.queries:
        _fail(f"no usable queries in {queries} ({len(qf.skipped)} line(s) skipped)")
    out: dict[str, Any] = {"before": old.snapshot.version, "after": new.snapshot.version}
    if query:
        out["bundle"] = compare_bundles(old, new, query.strip(), qf)
    if qf is not None:
        out["replay"] = {"queries": str(queries), **compare_replay(old, new, qf, k)}
    if as_json:
        _emit_json(out)
        return
    if "bundle" in out:
        _echo_bundle(out["bundle"], out["before"], out["after"])
    if "replay" in out:
        _echo_replay(out["replay"], out["before"], out["after"])


def _echo_bundle(b: dict[str, Any], before: str, after: str) -> None:
    names, needed = b["names"], set(b["needed"] or [])

    def cell(skill: str | None) -> str:
        if skill is None:
            return ""
        return names.get(skill, skill) + (f" {MARK_NEEDED}" if skill in needed else "")

    width = max([len(cell(s)) for s in (*b["before"], *b["after"])] + [len(before), len(after)]) + 2
    click.echo(f'task: "{b["query"]}"')
    click.echo(f"  #  {'before: ' + before:<{width + 8}}{'after: ' + after:<{width + 7}}change")
    for row in b["rows"]:
        change = row["change"] + (f" (was #{row['was']})" if row["change"].startswith(("up", "down")) else "")
        click.echo(
            f"{row['rank']:>3}  {cell(row['before']):<{width + 8}}{cell(row['after']):<{width + 7}}{change}"
        )
    if b["dropped"]:
        click.echo(f"  no longer in the bundle: {', '.join(names.get(s, s) for s in b['dropped'])}")
    if b["needed"] is not None:
        got = [sum(s in needed for s in b[side]) for side in ("before", "after")]
        click.echo(
            f"  {MARK_NEEDED} a skill the task needs (its gold bundle): {got[0]} of {len(needed)} before, "
            f"{got[1]} of {len(needed)} after"
        )


def _echo_replay(r: dict[str, Any], before: str, after: str) -> None:
    click.echo(f"replay of {r['n']} queries with gold bundles ({r['queries']}), top {r['k']}")
    click.echo(f"  {'metric':<15}{'before':>8}{'after':>8}  {'change':<15} what it measures")
    for m in r["metrics"]:
        verdict = {True: " better", False: " worse", None: ""}[m["better"]]
        change = _signed(m["change"]) + verdict
        click.echo(
            f"  {m['metric']:<15}{_num(m['before']):>8}{_num(m['after']):>8}  {change:<15} {m['legend']}"
        )
    click.echo(f"  before = {before}, after = {after}")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    if value is None:
        return "-"
    return "same" if value == 0 else f"{value:+.3f}"
