"""The everyday skill commands: `segos skills`, `show`, `explain`, `export` (registered in `main.py`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..text.excerpts import one_line
from .common import (
    _emit_json,
    _load_retriever,
    _store,
    friendly_errors,
    json_option,
    min_score_option,
    store_option,
    top_n_option,
    version_option,
)


@click.command(name="skills")
@store_option
@version_option
@click.option(
    "--filter",
    "text",
    default=None,
    help="Only skills whose id, name or capability contains TEXT (case-insensitive).",
)
@json_option
@friendly_errors
def skills_command(store: Path | None, version: str | None, text: str | None, as_json: bool) -> None:
    """List a version's skills (id, name, capability), by id; a table on a terminal, plain lines otherwise.

    \b
    Example:
      segos skills --filter csv --store data/store
    """
    import polars as pl

    snap = _store(store).load(version)
    table = snap.nodes.select("id", "name", pl.col("capability").fill_null("")).sort("id")
    if text:
        needle = text.lower()
        table = table.filter(
            pl.any_horizontal(
                pl.col(c).str.to_lowercase().str.contains(needle, literal=True) for c in table.columns
            )
        )
    rows = table.to_dicts()
    if as_json:
        _emit_json({"version": snap.version, "filter": text, "count": len(rows), "skills": rows})
        return
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        view = Table(title=f"{len(rows)} skill(s) in {snap.version}", title_justify="left")
        for column in ("id", "name", "capability"):
            view.add_column(column, overflow="fold")
        for row in rows:
            view.add_row(row["id"], row["name"], row["capability"])
        Console().print(view)
        return
    for row in rows:
        click.echo(f"{row['id']}\t{row['name']}\t{row['capability']}")


@click.command(name="show")
@click.argument("skill")
@store_option
@version_option
@json_option
@friendly_errors
def show_command(skill: str, store: Path | None, version: str | None, as_json: bool) -> None:
    """Show SKILL (an id or a name): its fields, package folder and files, edges and body.

    `--json` is the record MCP `get_skill_detail` answers.

    \b
    Example:
      segos show csv-loader --json
    """
    from ..service.api import SegosService

    st = _store(store)
    detail = SegosService(st, st.resolve(version), reload="sync").skill_detail(skill)
    if as_json:
        _emit_json(detail)
        return
    row = detail["skill"]
    click.echo(f"{row['name']}  ({row['id']}, version {detail['version']})")
    if row.get("capability"):
        click.echo(f"capability: {row['capability']}")
    for key in ("inputs", "outputs", "entrypoints"):
        if row.get(key):
            click.echo(f"{key}: {'; '.join(row[key])}")
    click.echo(f"folder: {detail['folder'] or '(not on this machine: ' + str(detail['folder_error']) + ')'}")
    for f in detail["files"]:
        click.echo(f"  {f['path']} ({f['bytes']:,} bytes)")
    if detail["files_truncated"]:
        click.echo("  ... (more files)")
    degree = ", ".join(
        f"{rel} {detail['degree']['out'][rel]} out/{detail['degree']['in'][rel]} in"
        for rel in detail["degree"]["out"]
    )
    click.echo(f"edges: {degree}")
    if detail["also_matches"]:
        click.echo(f"also matches: {', '.join(detail['also_matches'])}")
    learned = detail["experience"]
    if learned["requests"]:
        click.echo(f"learned: {learned['requests']} request(s) of {learned['tasks']} successful task(s)")
        for r in learned["top"]:
            click.echo(f"  {r['tasks']:>3} task(s)  {one_line(r['text'], 100)}")
    if learned["used_with"]:
        click.echo(
            "used with: " + ", ".join(f"{c['id']} ({c['tasks']} task(s))" for c in learned["used_with"])
        )
    click.echo("\n" + (row.get("body") or row.get("description") or ""))


@click.command(name="explain")
@click.argument("query")
@click.argument("skill")
@store_option
@version_option
@top_n_option
@min_score_option("the bundle is judged by it")
@json_option
@friendly_errors
def explain_command(
    query: str,
    skill: str,
    store: Path | None,
    version: str | None,
    top_n: int | None,
    min_score: float | None,
    as_json: bool,
) -> None:
    """Why SKILL ranks where it does for QUERY: its rank, score and every piece of evidence behind it.

    \b
    Example:
      segos explain "parse a csv file and plot a chart" csv-loader --json
    """
    from ..retrieval.explain import explain_rank
    from ..service.arguments import checked_query

    out = explain_rank(_load_retriever(store, version), checked_query(query), skill, top_n, min_score)
    if as_json:
        _emit_json(out)
        return
    where = f"rank {out['rank']} of {out['candidates']}" if out["evidence"] else "not ranked"
    member = "in the bundle" if out["in_bundle"] else "not in the bundle"
    if out["pruned_by"]:
        member += f" (pruned: avoid edge with {out['pruned_by']})"
    if out["no_match"]:
        member += f" (no skill reaches relevance {out['min_score']:g})"
    click.echo(f"{out['name']} ({out['id']}), version {out['version']}: {where}, {member}")
    click.echo(f"why: {out['why']}")
    if not out["evidence"]:
        return
    cosine = "-" if out["cosine"] is None else f"{out['cosine']:.4f}"
    click.echo(
        f"score ρ {out['score']:.4f} (graph s* {out['graph']:.4f}, lexical m {out['lexical']:.4f}, "
        f"semantic z {out['semantic']:.4f}, experience {out['experience']:.4f}, co-use {out['co_use']:.4f})"
    )
    click.echo(
        f"relevance {out['relevance']:.3f} (words {out['words']:.3f}, cosine {cosine}); "
        f"seed: {'yes' if out['seed'] else 'no'}"
    )
    for r in out["reasons"]:
        via = f" via {r['via']}" if r.get("via") else ""
        click.echo(f"  {r['kind']}{via}: weight {r['weight']}")


@click.command(name="export")
@click.argument("query")
@click.option(
    "--to",
    "dest",
    type=click.Path(path_type=Path),
    required=True,
    help="Folder to write the skills into, e.g. .claude/skills (created; must be empty unless --force).",
)
@store_option
@version_option
@top_n_option
@min_score_option("nothing is exported unless a skill reaches it")
@click.option(
    "--force", is_flag=True, help="Write into a non-empty folder, replacing same-named skill folders."
)
@json_option
@friendly_errors
def export_command(
    query: str,
    dest: Path,
    store: Path | None,
    version: str | None,
    top_n: int | None,
    min_score: float | None,
    force: bool,
    as_json: bool,
) -> None:
    """Write the bundle for QUERY as a skills folder: one folder per skill with its SKILL.md and files.

    Claude Code loads the folders as its own skills when DIR is `.claude/skills`. A query no skill is
    relevant to writes nothing and exits 1.

    \b
    Example:
      segos export "parse a csv file and plot a chart" --to .claude/skills
    """
    from ..service.arguments import checked_query
    from ..service.export import export_bundle

    retriever = _load_retriever(store, version, top_n=top_n)
    bundle = retriever.retrieve(checked_query(query), hydrate=False, min_score=min_score)
    result = export_bundle(bundle, retriever.snapshot.manifest, dest, force=force)
    if as_json:
        _emit_json(result.to_dict())
    else:
        _say(result)
    if result.no_match:
        sys.exit(1)


def _say(result: Any) -> None:
    if result.no_match:
        click.echo(
            f"version {result.version}: no skill is relevant to this query (none reaches relevance "
            f"{result.min_score:g}); nothing was exported",
            err=True,
        )
        return
    click.echo(f"version {result.version}: {len(result.skills)} skill(s) written to {result.to}")
    for s in result.skills:
        click.echo(f"  {s.folder}  ({s.id}, {len(s.files)} file(s))")
        for item in s.skipped:
            click.echo(f"    skipped {item['path']}: {item['reason']}")


COMMANDS = (skills_command, show_command, explain_command, export_command)
