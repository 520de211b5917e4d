"""Measuring one ranker: per-query metrics, bundle characters, summaries and paired comparisons."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ...config import RetrievalConfig
from ...retrieval.bundle import render_skill
from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot
from ..metrics import (
    LEAKAGE_BUCKETS,
    QueryMetrics,
    aggregate,
    pair_corecovery,
    paired_bootstrap,
    percentile,
    query_metrics,
)
from .config import CORE, PER_QUERY, StudyConfig
from .queries import StudyQuery
from .rankers import Ranker


@dataclass
class QueryResult:
    metrics: QueryMetrics
    latency_ms: float
    chars: int  # characters of the hydrated bundle of the top k under the retrieval budgets
    pair: float | None  # dependency-pair co-recovery (None without gold pairs)
    ranked: list[str]


class Hydration:
    """Bundle characters of a ranked list, with the retriever's hydration rule (per-skill and global
    budgets, a skill that does not fit is cut), without rendering text per query."""

    def __init__(self, nodes: pl.DataFrame, config: RetrievalConfig):
        self.config = config
        self.index = {sid: i for i, sid in enumerate(nodes["id"].to_list())}
        self.lengths = np.array([len(render_skill(row)) for row in nodes.iter_rows(named=True)], dtype=int)

    def chars(self, ranked: Sequence[str]) -> int:
        total = 0
        for sid in ranked:
            budget = min(self.config.per_skill_chars, self.config.total_chars - total)
            if budget <= 0:
                break
            total += min(int(self.lengths[self.index[sid]]), budget)  # `clip` keeps exactly `budget`
        return total


def measure(ranker: Ranker, hydration: Hydration, queries: Sequence[StudyQuery], k: int) -> list[QueryResult]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        ranked = ranker.ranked_ids(q.query, k)
        latency = (time.perf_counter() - t0) * 1000
        out.append(
            QueryResult(
                query_metrics(ranked, q.gold, k),
                latency,
                hydration.chars(ranked[:k]),
                pair_corecovery(ranked, q.pairs, k),
                ranked[:k],
            )
        )
    return out


def measure_snapshot(
    snapshot: Snapshot, queries: Sequence[StudyQuery], k: int, retrieval: RetrievalConfig
) -> list[QueryResult]:
    return measure(Retriever(snapshot, retrieval), Hydration(snapshot.nodes, retrieval), queries, k)


def summarize(results: Sequence[QueryResult]) -> dict[str, Any]:
    """The replay contract's numbers plus bundle characters and pair co-recovery."""
    pairs = [r.pair for r in results if r.pair is not None]
    lat = [r.latency_ms for r in results]
    chars = [r.chars for r in results]
    return {
        **aggregate([r.metrics for r in results]),
        "latency_ms": {"p50": percentile(lat, 50), "p95": percentile(lat, 95)},
        "bundle_chars": float(np.mean(chars)) if chars else 0.0,
        "bundle_chars_p95": percentile(chars, 95),
        "pair_corecovery": float(np.mean(pairs)) if pairs else None,
        "n_pair_queries": len(pairs),
    }


def per_query_values(results: Sequence[QueryResult], key: str) -> np.ndarray:
    return np.array([getattr(r.metrics, PER_QUERY[key]) for r in results], dtype=float)


def compare(
    results: Sequence[QueryResult], reference: Sequence[QueryResult], config: StudyConfig
) -> dict[str, Any]:
    """Paired bootstrap of results − reference for each core metric (and pair co-recovery on the queries
    that have gold pairs)."""

    def boot(values: Sequence[float], ref: Sequence[float]) -> dict[str, Any]:
        return paired_bootstrap(values, ref, config.n_boot, config.seed, config.level)

    out = {key: boot(per_query_values(results, key), per_query_values(reference, key)) for key in CORE}
    keep = [i for i, r in enumerate(reference) if r.pair is not None]
    if keep:
        out["pair_corecovery"] = boot(
            [results[i].pair or 0.0 for i in keep], [reference[i].pair or 0.0 for i in keep]
        )
    return out


def buckets(results: Sequence[QueryResult], queries: Sequence[StudyQuery]) -> dict[str, Any]:
    out = {}
    for b in LEAKAGE_BUCKETS:
        part = [r for r, q in zip(results, queries, strict=True) if q.bucket == b]
        agg = aggregate([r.metrics for r in part])
        pairs = [r.pair for r in part if r.pair is not None]
        out[b] = {
            "n": agg["n"],
            # an empty bucket has no score (None), not a score of 0
            **{key: agg[key] if agg["n"] else None for key in CORE},
            "mean_best_rank": agg["mean_best_rank"],
            "pair_corecovery": float(np.mean(pairs)) if pairs else None,
        }
    return out
