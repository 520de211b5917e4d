"""Study queries: gold names and pairs resolved once, leakage buckets, the deterministic task split."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from ...store.snapshot import Snapshot
from ...text.lexicon import SIGNATURE_FIELDS
from ...text.names import SkillNames
from ...text.tokens import token_set
from ..metrics import leakage_bucket, overlap_fraction
from ..replay import EvalQuery, gold_sets


@dataclass
class StudyQuery:
    index: int
    task: str  # the query's task id (`line-N` when the file gives none): the unit of the transfer split
    query: str
    gold_names: list[str]
    gold: list[set[str]]
    pairs: list[tuple[set[str], set[str]]]  # gold dependency pairs, empty when the file gives none
    overlap: float  # leakage measure (see `metrics.overlap_fraction`)
    bucket: str

    def eval_query(self) -> EvalQuery:
        return EvalQuery(self.query, self.gold_names, self.task)


def _gold_pairs(q: EvalQuery) -> list[tuple[str, str]]:
    """Explicit `pairs: [[a, b], ...]`, or consecutive gold names when the line says `gold_ordered: true`
    (a plan: each step depends on the previous one)."""
    raw = q.extra.get("pairs")
    if isinstance(raw, list):
        return [
            (p[0], p[1])
            for p in raw
            if isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
        ]
    if q.extra.get("gold_ordered") is True:
        return list(zip(q.gold, q.gold[1:], strict=False))
    return []


def signature_sets(snapshot: Snapshot) -> dict[str, set[str]]:
    """Skill id → its signature tokens (the structured fields, no body): the text a query can echo."""
    ids = snapshot.nodes["id"]
    sig = (
        snapshot.tokens.filter(pl.col("field").is_in(SIGNATURE_FIELDS))
        .group_by("node")
        .agg(pl.col("token").unique())
    )
    return {str(ids[int(node)]): set(tokens) for node, tokens in sig.iter_rows()}


def prepare_queries(
    queries: Sequence[EvalQuery], snapshot: Snapshot, names: SkillNames
) -> tuple[list[StudyQuery], list[str]]:
    """Resolve gold names and pairs once (the node set never changes across versions) and bucket each
    query by its overlap with its gold skills' signature text."""
    sigs = signature_sets(snapshot)
    out, unknown = [], set()
    for i, q in enumerate(queries):
        gold, missing = gold_sets(names, q.gold)
        unknown.update(missing)
        pairs = []
        for a, b in _gold_pairs(q):
            (sa, sb), miss = gold_sets(names, [a, b])
            unknown.update(miss)
            pairs.append((sa, sb))
        overlap = overlap_fraction(token_set(q.query), [[sigs.get(s, set()) for s in item] for item in gold])
        task = q.task or f"line-{q.line or i + 1}"
        out.append(StudyQuery(i, task, q.query, list(q.gold), gold, pairs, overlap, leakage_bucket(overlap)))
    return out, sorted(unknown)


def split_tasks(
    tasks: Sequence[str], seed: int = 0, groups: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """Two disjoint halves of the distinct task ids, by a hash of the id (stable across runs, machines and
    query-file order; not tuned to the data). The first half gets the odd task when the count is odd.

    With `groups` (task → group key), a group never straddles the halves: groups are taken in hash order
    and fill the first half up to half the tasks, so templated variants of one task (API-Bank's "weather in
    London" / "weather in Paris") cannot leak from the evolution side into the measured side.
    """
    distinct = sorted(set(tasks))
    key_of = groups or {t: t for t in distinct}
    members: dict[str, list[str]] = {}
    for t in distinct:
        members.setdefault(key_of.get(t, t), []).append(t)
    order = sorted(members, key=lambda g: (hashlib.sha256(f"{seed}:{g}".encode()).hexdigest(), g))
    target = (len(distinct) + 1) // 2
    half_a: list[str] = []
    half_b: list[str] = []
    for g in order:
        (half_a if len(half_a) < target else half_b).extend(members[g])
    return sorted(half_a), sorted(half_b)
