"""Flat headline numbers of one version beside the cold-start baselines (Dagster metadata)."""

from __future__ import annotations

from ...config import RetrievalConfig, retrieval_for
from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot
from ...text.names import SkillNames
from ..replay import QueryFile
from .config import CORE
from .measuring import Hydration, measure, measure_snapshot, summarize
from .queries import prepare_queries
from .rankers import BM25Ranker


def headline_numbers(
    snapshot: Snapshot,
    base: Snapshot,
    queries: QueryFile,
    k: int = 5,
    retrieval: RetrievalConfig | None = None,
) -> dict[str, float]:
    """Flat `eval.<method>.<metric>@k` numbers for one version next to the baselines on its cold start
    (bm25, lexical, ppr), cheap enough to attach to every version as orchestrator metadata."""
    rconf = retrieval or retrieval_for(base.manifest)
    prepared, _ = prepare_queries(queries.queries, base, SkillNames(base.nodes))
    if not prepared:
        return {}
    hyd = Hydration(base.nodes, rconf)
    rows = {
        "bm25": measure(BM25Ranker(base.nodes), hyd, prepared, k),
        "lexical": measure(Retriever(base, rconf.with_overrides(propagate=False)), hyd, prepared, k),
        "ppr": measure(Retriever(base, rconf), hyd, prepared, k),
        "version": measure_snapshot(snapshot, prepared, k, rconf),
    }
    out: dict[str, float] = {}
    for name, res in rows.items():
        s = summarize(res)
        for key in CORE:
            out[f"eval.{name}.{key}@{k}" if key != "mrr" else f"eval.{name}.mrr"] = round(float(s[key]), 4)
    out[f"eval.version_minus_ppr.recall@{k}"] = round(
        out[f"eval.version.recall@{k}"] - out[f"eval.ppr.recall@{k}"], 4
    )
    return out
