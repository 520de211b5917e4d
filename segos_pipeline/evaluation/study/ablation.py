"""The graph ablation of SPEC §6.9: seeds alone against propagation over kNN graphs of several k."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...config import RetrievalConfig
from ...graph.build import knn_variant
from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot
from ...text.tokens import tokenize
from ..metrics import aggregate
from .config import CORE
from .measuring import Hydration, QueryResult, measure, per_query_values, summarize
from .queries import StudyQuery
from .rankers import Ranker

GRAPH_KS = (1, 2, 3, 5)  # cold-start kNN sizes compared (SPEC §6.9)
LENGTH_BUCKETS = (("short", 0, 20), ("medium", 21, 80), ("long", 81, None))  # query tokens, fixed up front
GOLD_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3+", 3, None))  # gold skills per query


def _in(value: int, lo: int, hi: int | None) -> bool:
    return value >= lo and (hi is None or value <= hi)


def _bucketed(
    results: Sequence[QueryResult], values: Sequence[int], spec: Sequence[tuple[str, int, int | None]]
) -> dict[str, Any]:
    out = {}
    for name, lo, hi in spec:
        agg = aggregate([r.metrics for r, v in zip(results, values, strict=True) if _in(v, lo, hi)])
        out[name] = {"n": agg["n"], **{key: agg[key] if agg["n"] else None for key in CORE}}
    return out


def graph_ablation(
    base: Snapshot, queries: Sequence[StudyQuery], k: int, retrieval: RetrievalConfig, hydration: Hydration
) -> dict[str, Any]:
    """Seeds alone against propagation over cold-start kNN graphs of k ∈ GRAPH_KS (the base version's
    semantic edges rebuilt per k, traced relations kept), overall and per query length and per number of
    gold skills: where, if anywhere, the graph helps (SPEC §6.9)."""
    lengths = [len(tokenize(q.query)) for q in queries]
    n_gold = [len(q.gold) for q in queries]
    runs: list[tuple[str, str, Ranker]] = [
        (
            "seeds_only",
            "lexical (+ semantic) seeds, no propagation",
            Retriever(base, retrieval.with_overrides(propagate=False)),
        )
    ]
    runs += [
        (
            f"ppr_k{kk}",
            f"reverse-aware PPR over the k = {kk} kNN graph",
            Retriever(knn_variant(base, kk), retrieval),
        )
        for kk in GRAPH_KS
    ]
    methods = []
    reference: list[QueryResult] | None = None
    for name, label, ranker in runs:
        results = measure(ranker, hydration, queries, k)
        reference = reference or results
        summary = summarize(results)
        entry = {
            "method": name,
            "label": label,
            **{key: summary[key] for key in (*CORE, "n")},
            "by_length": _bucketed(results, lengths, LENGTH_BUCKETS),
            "by_gold": _bucketed(results, n_gold, GOLD_BUCKETS),
            "vs_seeds_only": {
                key: float(np.mean(per_query_values(results, key) - per_query_values(reference, key)))
                for key in CORE
            },
        }
        methods.append(entry)
    best = max(methods[1:], key=lambda m: (m["recall"], m["comp"], m["hit"]))
    return {
        "version_graph": base.manifest.get("config", {}).get("graph", {}).get("knn_k"),
        "buckets": {
            "length_tokens": {name: [lo, hi] for name, lo, hi in LENGTH_BUCKETS},
            "gold": {name: [lo, hi] for name, lo, hi in GOLD_BUCKETS},
        },
        "methods": methods,
        "best_propagation": best["method"],
        "propagation_helps": bool(best["recall"] > methods[0]["recall"] or best["comp"] > methods[0]["comp"]),
    }
