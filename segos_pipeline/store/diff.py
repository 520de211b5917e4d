"""What changed between two versions (SPEC §9): edges added / removed / reweighted / retyped, and
description changes, as the JSON shape of the spec, a Markdown report and a terminal table."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..text.excerpts import one_line
from .snapshot import Snapshot

_TOL = 1e-12


def edge_diff(before: pl.DataFrame, after: pl.DataFrame) -> dict[str, pl.DataFrame]:
    key = ["src", "dst", "relation"]
    a = before.select(*key, weight_before="weight")
    b = after.select(*key, weight_after="weight")
    joined = a.join(b, on=key, how="full", coalesce=True)
    added = joined.filter(pl.col("weight_before").is_null()).select(*key, weight="weight_after")
    removed = joined.filter(pl.col("weight_after").is_null()).select(*key, weight="weight_before")
    reweighted = joined.filter(
        pl.col("weight_before").is_not_null()
        & pl.col("weight_after").is_not_null()
        & ((pl.col("weight_after") - pl.col("weight_before")).abs() > _TOL)
    )
    retyped = (
        removed.select("src", "dst", relation_before="relation")
        .join(added.select("src", "dst", relation_after="relation"), on=["src", "dst"])
        .filter(pl.col("relation_before") != pl.col("relation_after"))
    )
    return {
        "added": added.sort(key),
        "removed": removed.sort(key),
        "reweighted": reweighted.sort(key),
        "retyped": retyped.sort("src", "dst", "relation_before", "relation_after"),
    }


def description_diff(before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    return (
        before.select(skill="id", before="description")
        .join(after.select(skill="id", after="description"), on="skill")
        .filter(pl.col("before").ne_missing(pl.col("after")))
        .sort("skill")
    )


def experience_diff(before: pl.DataFrame, after: pl.DataFrame) -> pl.DataFrame:
    """Witnessing requests added (tasks_before null), dropped (tasks_after null) or re-counted."""
    keys = ["skill", "text"]
    joined = before.select(*keys, tasks_before="tasks").join(
        after.select(*keys, tasks_after="tasks"), on=keys, how="full", coalesce=True
    )
    return joined.filter(pl.col("tasks_before").ne_missing(pl.col("tasks_after"))).sort(keys)


def diff_versions(a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """The SPEC §9 JSON shape, from version `a` to version `b`, with `experience` (what the skills learned
    from traces) beside `descriptions`."""
    edges = edge_diff(a.edges, b.edges)
    descriptions = description_diff(a.nodes, b.nodes)
    experience = experience_diff(a.experience, b.experience)
    return {
        "from": a.version,
        "to": b.version,
        "edges": {name: frame.to_dicts() for name, frame in edges.items()},
        "descriptions": descriptions.to_dicts(),
        "experience": experience.to_dicts(),
        "counts": {
            **{name: frame.height for name, frame in edges.items()},
            "descriptions": descriptions.height,
            "experience": experience.height,
        },
    }


def counts_by_relation(diff: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for kind in ("added", "removed", "reweighted"):
        for e in diff["edges"][kind]:
            out.setdefault(e["relation"], {"added": 0, "removed": 0, "reweighted": 0})[kind] += 1
    return out


def _weights(kind: str, edge: dict[str, Any]) -> tuple[float, float]:
    """(before, after) weight of a changed edge: an added edge changes from 0, a removed one to 0."""
    if kind == "added":
        return 0.0, edge["weight"]
    if kind == "removed":
        return edge["weight"], 0.0
    return edge["weight_before"], edge["weight_after"]


def largest_changes(diff: dict[str, Any], limit: int = 15) -> list[dict[str, Any]]:
    """Edges ranked by absolute weight change."""
    rows = [
        {"change": kind, "src": e["src"], "dst": e["dst"], "relation": e["relation"], "before": b, "after": a}
        for kind in ("added", "removed", "reweighted")
        for e in diff["edges"][kind]
        for b, a in [_weights(kind, e)]
    ]
    rows.sort(key=lambda r: (-abs(r["after"] - r["before"]), r["relation"], r["src"], r["dst"]))
    return rows[:limit]


def to_markdown(diff: dict[str, Any], limit: int = 15) -> str:
    c = diff["counts"]
    lines = [
        f"# Diff {diff['from']} → {diff['to']}",
        "",
        "| added | removed | reweighted | retyped | descriptions |",
        "|---|---|---|---|---|",
        f"| {c['added']} | {c['removed']} | {c['reweighted']} | {c['retyped']} | {c['descriptions']} |",
        "",
    ]
    by_rel = sorted(counts_by_relation(diff).items())
    if by_rel:
        rows = [f"| {r} | {v['added']} | {v['removed']} | {v['reweighted']} |" for r, v in by_rel]
        lines += _table("By relation", "relation | added | removed | reweighted", rows)
    top = largest_changes(diff, limit)
    if top:
        rows = [
            f"| {r['change']} | {r['relation']} | `{r['src']}` | `{r['dst']}` "
            f"| {r['before']:.4g} | {r['after']:.4g} |"
            for r in top
        ]
        lines += _table(
            f"Largest changes (top {len(top)})", "change | relation | src | dst | before | after", rows
        )
    if diff["edges"]["retyped"]:
        rows = [
            f"| `{r['src']}` | `{r['dst']}` | {r['relation_before']} | {r['relation_after']} |"
            for r in diff["edges"]["retyped"][:limit]
        ]
        lines += _table("Retyped", "src | dst | before | after", rows)
    if diff["descriptions"]:
        lines += ["## Descriptions", ""]
        for d in diff["descriptions"][:limit]:
            lines += [f"- `{d['skill']}`", f"  - before: {d['before']}", f"  - after: {d['after']}"]
        lines.append("")
    if diff.get("experience"):
        rows = [
            f"| `{e['skill']}` | {_cell(e['text'])} | {e['tasks_before'] or 0} | {e['tasks_after'] or 0} |"
            for e in diff["experience"][:limit]
        ]
        title = "Experience (witnessing requests of successful traces)"
        # the last section: no blank line after it
        lines += _table(title, "skill | request | tasks before | tasks after", rows)[:-1]
    return "\n".join(lines) + "\n"


def _table(title: str, header: str, rows: list[str]) -> list[str]:
    """A Markdown section: its title, a table of `rows` under the columns of `header`, a blank line."""
    return [f"## {title}", "", f"| {header} |", "|" + "---|" * (header.count("|") + 1), *rows, ""]


def _cell(text: str, chars: int = 80) -> str:
    """A request as one Markdown table cell: one line, pipes escaped, clipped."""
    return one_line(text.replace("|", "\\|"), chars)


def to_table(diff: dict[str, Any], limit: int = 15) -> str:
    c = diff["counts"]
    lines = [
        f"{diff['from']} -> {diff['to']}: +{c['added']} -{c['removed']} ~{c['reweighted']} edges, "
        f"{c['retyped']} retyped, {c['descriptions']} description(s) changed, "
        f"{c.get('experience', 0)} experience row(s) changed"
    ]
    for rel, v in sorted(counts_by_relation(diff).items()):
        lines.append(f"  {rel:<12} +{v['added']:<6} -{v['removed']:<6} ~{v['reweighted']}")
    for r in largest_changes(diff, limit):
        lines.append(
            f"  {r['change']:<10} {r['relation']:<11} {r['src']} -> {r['dst']}  "
            f"{r['before']:.4g} -> {r['after']:.4g}"
        )
    for r in diff["edges"]["retyped"][:limit]:
        lines.append(
            f"  retyped    {r['src']} -> {r['dst']}  {r['relation_before']} -> {r['relation_after']}"
        )
    for d in diff["descriptions"][:limit]:
        before, after = d["before"] or "", d["after"] or ""
        # the editors append words: show what was added, else the new text
        change = f"+ {after[len(before) :].strip()}" if after.startswith(before) else after
        lines.append(f"  description {d['skill']}: {one_line(change, 100)}")
    for e in learned_by_skill(diff, limit):
        lines.append(
            f"  experience  {e['skill']}  {e['requests']} request(s), {e['tasks_before']} -> "
            f"{e['tasks_after']} task(s), e.g. '{one_line(e['example'], 80)}'"
        )
    return "\n".join(lines)


def learned_by_skill(diff: dict[str, Any], limit: int = 15) -> list[dict[str, Any]]:
    """The experience part of a diff per skill, the skills with most changed requests first: how many, the
    tasks they held before and after, and the request most tasks asked after (else before)."""
    rows = diff.get("experience", [])
    if not rows:
        return []
    frame = pl.DataFrame(rows).with_columns(
        pl.col("tasks_before").fill_null(0), pl.col("tasks_after").fill_null(0)
    )
    return (
        frame.sort(["tasks_after", "tasks_before", "text"], descending=[True, True, False])
        .group_by("skill", maintain_order=True)
        .agg(
            pl.len().alias("requests"),
            pl.col("tasks_before").sum(),
            pl.col("tasks_after").sum(),
            pl.col("text").first().alias("example"),
        )
        .sort(["requests", "skill"], descending=[True, False])
        .head(limit)
        .to_dicts()
    )
