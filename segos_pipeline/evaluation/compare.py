"""Before / after on two versions: one task's bundle side by side, and a query set's replay metrics.

What the quick start ends with (`segos compare`), so a newcomer sees at a glance what evolution changed:
which skills the bundle gained, lost or moved, whether they are the ones the task needs, and how the
held-out numbers moved, each number with a one-line meaning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..retrieval.ranker import Retriever
from .replay import QueryFile, gold_sets, replay

# (key in a replay result, label, what it measures): the legend printed next to each number.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("hit", "hit@{k}", "share of queries with at least one needed skill in the top {k}"),
    ("recall", "recall@{k}", "share of the needed skills found in the top {k}, averaged over queries"),
    ("comp", "COMP@{k}", "share of queries whose top {k} holds every needed skill (a complete bundle)"),
    ("mrr", "MRR", "1 / rank of the first needed skill, averaged (1.0: always first)"),
    ("mean_best_rank", "mean best rank", "rank of the first needed skill, where found (lower is better)"),
)
LOWER_IS_BETTER = {"mean_best_rank"}


@dataclass(frozen=True)
class BundleRow:
    """One position of the two bundles; `change` says what happened to the `after` skill."""

    rank: int
    before: str | None  # skill id at this rank in the before bundle
    after: str | None  # skill id at this rank in the after bundle
    change: str  # "same", "new", "up N", "down N" ("" when the after bundle is shorter)
    was: int | None  # the after skill's rank before (None: it is new)


def bundle_rows(before: list[str], after: list[str]) -> list[BundleRow]:
    """The two rankings position by position, each after skill marked against its rank before."""
    old_rank = {skill: r for r, skill in enumerate(before, start=1)}
    rows = []
    for r in range(1, max(len(before), len(after)) + 1):
        b = before[r - 1] if r <= len(before) else None
        a = after[r - 1] if r <= len(after) else None
        was = old_rank.get(a) if a is not None else None
        rows.append(BundleRow(r, b, a, _change(r, was, a is not None), was))
    return rows


def _change(rank: int, was: int | None, present: bool) -> str:
    if not present:
        return ""
    if was is None:
        return "new"
    if was == rank:
        return "same"
    return f"up {was - rank}" if was > rank else f"down {rank - was}"


def dropped(before: list[str], after: list[str]) -> list[str]:
    """Skills of the before bundle that the after bundle no longer has, in their old order."""
    kept = set(after)
    return [s for s in before if s not in kept]


def compare_bundles(
    old: Retriever, new: Retriever, query: str, queries: QueryFile | None = None
) -> dict[str, Any]:
    """The task's bundle on both versions; `needed` lists the skills its gold names (when the query is one
    of `queries`), so a reader sees whether what moved in is what the task needs."""
    old_skills, new_skills = old.retrieve(query).skills, new.retrieve(query).skills
    before, after = [s.id for s in old_skills], [s.id for s in new_skills]
    gold = next((q.gold for q in (queries.queries if queries else []) if q.query == query), None)
    needed = sorted(set().union(*gold_sets(new.names, gold)[0])) if gold else None
    return {
        "query": query,
        "before": before,
        "after": after,
        "rows": [asdict(r) for r in bundle_rows(before, after)],
        "dropped": dropped(before, after),
        "needed": needed,
        # display names (as `segos retrieve` shows them), by id
        "names": {s.id: s.name for s in (*old_skills, *new_skills)},
    }


def compare_replay(old: Retriever, new: Retriever, queries: QueryFile, k: int) -> dict[str, Any]:
    """Replay metrics of both versions on `queries`, one row per metric with its change and meaning."""
    a, b = replay(old, queries, k=k), replay(new, queries, k=k)
    rows = []
    for key, label, legend in METRICS:
        x, y = a[key], b[key]
        delta = None if x is None or y is None else round(y - x, 6)
        rows.append(
            {
                "metric": label.format(k=k),
                "key": key,
                "before": x,
                "after": y,
                "change": delta,
                "better": _better(key, delta),
                "legend": legend.format(k=k),
            }
        )
    return {"k": k, "n": b["n"], "unknown_gold": b["unknown_gold"], "metrics": rows}


def _better(key: str, delta: float | None) -> bool | None:
    """Whether the change is an improvement (None: no change, or nothing to compare)."""
    if not delta:
        return None
    return delta < 0 if key in LOWER_IS_BETTER else delta > 0
