"""Retrieval metrics at k (SPEC §10), as pure functions over ranked lists and gold bundles.

A gold bundle is a list of gold items; each item is the set of skill ids its name resolves to (usually
one; several for a duplicated name; none for a name the library lacks, which then can never be found and
still counts in the denominator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class QueryMetrics:
    hit: float  # 1 if any gold item is in the top k
    recall: float  # share of gold items in the top k
    comp: float  # 1 if every gold item is in the top k
    rr: float  # reciprocal rank of the first gold item in the top k (0 if none)
    best_rank: int | None  # rank of the first gold item in the top k


def query_metrics(ranked: Sequence[str], gold: Sequence[set[str]], k: int) -> QueryMetrics:
    top = list(ranked[:k])
    if not gold:
        raise ValueError("a query needs at least one gold skill to be scored")
    found = [any(g in item for g in top) for item in gold]
    ranks = [r for r, skill in enumerate(top, start=1) if any(skill in item for item in gold)]
    best = ranks[0] if ranks else None
    return QueryMetrics(
        hit=float(any(found)),
        recall=sum(found) / len(gold),
        comp=float(all(found)),
        rr=1.0 / best if best else 0.0,
        best_rank=best,
    )


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else 0.0


def aggregate(per_query: Sequence[QueryMetrics]) -> dict[str, float | int | None]:
    """Means over queries; mean best rank is over the queries with a hit (as the paper reports it)."""
    n = len(per_query)
    if n == 0:
        return {
            "n": 0,
            "hit": 0.0,
            "recall": 0.0,
            "comp": 0.0,
            "mrr": 0.0,
            "mean_best_rank": None,
            "n_hit": 0,
        }
    best = [m.best_rank for m in per_query if m.best_rank is not None]
    return {
        "n": n,
        "hit": sum(m.hit for m in per_query) / n,
        "recall": sum(m.recall for m in per_query) / n,
        "comp": sum(m.comp for m in per_query) / n,
        "mrr": sum(m.rr for m in per_query) / n,
        "mean_best_rank": sum(best) / len(best) if best else None,
        "n_hit": len(best),
    }
