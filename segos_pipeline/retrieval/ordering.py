"""Execution order of a bundle: prerequisites before the skills that consume them.

Semantic similarity selects skills but cannot order a workflow: the skill that matches a request best is
usually the *last* one called (SkillGraph, seeds/002: semantic ordering gives Kendall-τ −0.43 on API-Bank).
Order therefore comes from execution evidence only, in three tiers that are compared lexicographically
for every pair of members (a stronger tier decides; a weaker one only breaks its ties):

1. `dependency` edges among the members: u→v means u's outputs feed v's inputs on successful traces, so
   u runs first.
2. first-use precedence mined from the successful traces of the version's lineage (the round traces of
   every evolved version: stored whole as `traces.parquet`, or as round bucket files (`round-NNNNN.parquet`,
   one `round.parquet` in older versions, read as a scan) over the window's files the version references
   by hash): net count of traces that used u before v.
3. `workflow` edges among the members, u→v (u a lexical seed of a successful task, v used there). They
   are co-occurrence, not causation, so they only break ties the first two tiers leave open.

The pairwise preferences form a directed graph; the order is a topological sort that, among the skills
whose prerequisites are all placed, takes the best retrieval score first (then the smaller id). A cycle
(contradicting evidence) is broken by score: of the skills no unplaced skill outside their cycle must
precede, the best-scored one goes next.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from ..config import DEPENDENCY, WORKFLOW
from ..store.snapshot import Snapshot, SnapshotError, SnapshotStore
from ..store.version_files import VersionFiles
from .round_traces import has_round_traces, round_traces

ORDER_COLUMNS = ("trace_id", "used", "used_ordered", "reward", "success")  # what mining reads of a trace
SUCCESS_THRESHOLD = 0.9  # (paper) used when a trace table carries no `success` column


@dataclass(frozen=True)
class Precedence:
    """How often u was first used before v on a successful trace whose `used` carries order."""

    counts: Mapping[tuple[str, str], int] = field(default_factory=dict)
    traces: int = 0  # successful ordered traces the counts come from
    versions: tuple[str, ...] = ()  # versions whose round traces were read (newest first)
    skipped: tuple[str, ...] = ()  # lineage versions whose round traces were damaged (not counted)

    def before(self, u: str, v: str) -> int:
        return self.counts.get((u, v), 0)

    def net(self, u: str, v: str) -> int:
        """Traces that put u first minus traces that put v first (> 0: evidence for u before v)."""
        return self.before(u, v) - self.before(v, u)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs": len(self.counts),
            "traces": self.traces,
            "versions": list(self.versions),
            "skipped": list(self.skipped),
        }


def mine_precedence(traces: pl.DataFrame, success_threshold: float = SUCCESS_THRESHOLD) -> Precedence:
    """Precedence counts of a trace table (TRACE_SCHEMA, optionally with a boolean `success` column).

    Each trace counts a pair once; traces that store `used` without order (`used_ordered` false) and
    unsuccessful ones carry no precedence and are skipped.
    """
    if traces.is_empty():
        return Precedence()
    success = pl.col("success") if "success" in traces.columns else pl.col("reward") >= success_threshold
    ordered = pl.col("used_ordered") if "used_ordered" in traces.columns else pl.lit(True)
    ok = traces.filter(success & ordered).select("trace_id", "used")
    if ok.is_empty():
        return Precedence()
    # de-duplicate trace ids: a trace id repeated across rounds of one lineage is one observation
    ok = ok.unique(subset="trace_id", keep="first", maintain_order=True)
    pos = (
        ok.with_columns(pos=pl.int_ranges(pl.col("used").list.len()))
        .explode("used", "pos")
        .drop_nulls("used")
        .rename({"used": "skill"})
    )
    pairs = (
        pos.join(pos, on="trace_id", suffix="_v")
        .filter(pl.col("pos") < pl.col("pos_v"))
        .group_by("skill", "skill_v")
        .agg(n=pl.col("trace_id").n_unique())
    )
    counts = {(u, v): int(n) for u, v, n in pairs.iter_rows()}
    return Precedence(counts=counts, traces=ok.height)


@dataclass(frozen=True)
class LineageTraces:
    """The round traces of a version's lineage, concatenated, and which versions gave them."""

    table: pl.DataFrame | None
    read: tuple[str, ...]  # versions whose round traces are in `table` (newest first)
    skipped: tuple[str, ...]  # versions whose round traces failed their manifest hash or could not be read


def lineage_traces(store: SnapshotStore, snapshot: Snapshot) -> LineageTraces:
    """The round traces of `snapshot` and all its ancestors.

    A version's own traces are those its round consumed, so the lineage is the version itself and every
    parent up to the cold start. Each traces file is checked against its manifest hash first: loading a
    version verifies only its own files, and a damaged ancestor's table would otherwise feed the order of
    every bundle silently. Such a file is skipped and named in `skipped`; an unreadable manifest ends the
    walk (`segos verify` reports both).
    """
    tables: list[pl.DataFrame] = []
    read: list[str] = []
    skipped: list[str] = []
    manifest: dict[str, Any] | None = snapshot.manifest
    vid: str | None = snapshot.version
    seen: set[str] = set()
    while manifest is not None and vid is not None and vid not in seen:
        seen.add(vid)
        files = VersionFiles(store.versions_dir / vid, manifest)
        if has_round_traces(files):
            try:  # the columns mining reads, every file checked against its hash first
                tables.append(round_traces(files, ORDER_COLUMNS))
                read.append(vid)
            except (OSError, SnapshotError):
                skipped.append(vid)
        parent = manifest.get("parent")
        if not parent:
            break
        try:
            manifest = store.manifest(parent)
            vid = parent
        except (SnapshotError, OSError, ValueError):
            break
    table = pl.concat(tables, how="diagonal_relaxed") if tables else None
    return LineageTraces(table, tuple(read), tuple(skipped))


def lineage_precedence(store: SnapshotStore, snapshot: Snapshot) -> Precedence:
    lineage = lineage_traces(store, snapshot)
    mined = mine_precedence(lineage.table) if lineage.table is not None else Precedence()
    return replace(mined, versions=lineage.read, skipped=lineage.skipped)


# ------------------------------------------------------------------------------------------------ ordering


@dataclass(frozen=True)
class Constraint:
    """One pairwise decision: `before` runs before `after`, and which evidence tier decided it."""

    before: str
    after: str
    basis: str  # "dependency" | "precedence" | "workflow"
    evidence: float  # the net amount of the deciding tier (edge count or trace count)

    def as_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "basis": self.basis, "evidence": self.evidence}


@dataclass(frozen=True)
class ExecutionOrder:
    order: list[str]
    constraints: list[Constraint]
    broken: list[Constraint]  # constraints that had to be violated to break a cycle


def _tier_net(edges: Iterable[tuple[str, str, str]], relation: str) -> dict[tuple[str, str], int]:
    """Count of `relation` edges u→v per ordered pair (several relations may join one pair)."""
    out: dict[tuple[str, str], int] = {}
    for src, dst, rel in edges:
        if rel == relation and src != dst:
            out[(src, dst)] = out.get((src, dst), 0) + 1
    return out


def pairwise_constraints(
    members: Sequence[str],
    edges: Iterable[tuple[str, str, str]],
    precedence: Precedence | None = None,
    use_workflow: bool = True,
) -> list[Constraint]:
    """The decided pairs among `members` (each unordered pair at most once, in member order)."""
    edges = list(edges)
    dep = _tier_net(edges, DEPENDENCY)
    wf = _tier_net(edges, WORKFLOW) if use_workflow else {}
    out: list[Constraint] = []
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            tiers = (
                (DEPENDENCY, dep.get((a, b), 0) - dep.get((b, a), 0)),
                ("precedence", precedence.net(a, b) if precedence is not None else 0),
                (WORKFLOW, wf.get((a, b), 0) - wf.get((b, a), 0)),
            )
            for basis, net in tiers:
                if net:
                    first, second = (a, b) if net > 0 else (b, a)
                    out.append(Constraint(first, second, basis, float(abs(net))))
                    break
    return out


def _reach(nodes: list[str], succ: dict[str, set[str]]) -> dict[str, set[str]]:
    """Nodes reachable from each node (bundles are small: a search per node is fine)."""
    out: dict[str, set[str]] = {}
    for start in nodes:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for nxt in succ[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        out[start] = seen
    return out


def execution_order(
    members: Sequence[str],
    scores: Mapping[str, float],
    edges: Iterable[tuple[str, str, str]] = (),
    precedence: Precedence | None = None,
    use_workflow: bool = True,
) -> ExecutionOrder:
    """Order `members` so that prerequisites come first (see the module docstring for the rules).

    `edges` are (src, dst, relation) triples; those not among the members are ignored. `scores` is the
    retrieval score of each member (missing: 0); it breaks ties and cycles, then the smaller id does.
    """
    members = list(dict.fromkeys(members))
    member_set = set(members)
    edges = [(s, d, r) for s, d, r in edges if s in member_set and d in member_set]
    constraints = pairwise_constraints(members, edges, precedence, use_workflow)
    succ: dict[str, set[str]] = {m: set() for m in members}
    pred: dict[str, set[str]] = {m: set() for m in members}
    for c in constraints:
        succ[c.before].add(c.after)
        pred[c.after].add(c.before)

    def key(m: str) -> tuple[float, str]:
        s = float(scores.get(m, 0.0))
        return (-s if math.isfinite(s) else 0.0, m)

    remaining = set(members)
    order: list[str] = []
    broken: list[Constraint] = []
    by_pair = {(c.before, c.after): c for c in constraints}
    while remaining:
        ready = [m for m in remaining if not (pred[m] & remaining)]
        if not ready:
            # A cycle: take the source strongly connected components of what is left (no unplaced skill
            # outside them must precede them) and place their best-scored member first.
            rest = sorted(remaining)
            sub = {m: succ[m] & remaining for m in rest}
            reach = _reach(rest, sub)
            # m is in a source component when everything upstream of m is also downstream of m
            sources = [m for m in rest if all(o in reach[m] for o in rest if o != m and m in reach[o])]
            ready = [min(sources, key=key)]
            broken.extend(by_pair[(p, ready[0])] for p in sorted(pred[ready[0]] & remaining))
        nxt = min(ready, key=key)
        order.append(nxt)
        remaining.discard(nxt)
    return ExecutionOrder(order=order, constraints=constraints, broken=broken)
