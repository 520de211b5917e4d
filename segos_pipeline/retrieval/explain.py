"""Why one skill ranks where it does for a query (`segos explain QUERY SKILL`): the evidence behind its rank.

Everything comes from the one ranking a bundle is cut from (`Retriever.rank`), the bundle's members
(`Retriever.members`), the absolute relevance (`Retriever.relevance`) and the reasons of why.py
(`Retriever.reasons`), so what it says is what `segos retrieve` did.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .ranker import Retriever
from .why import headline

NO_EVIDENCE = (
    "no evidence for this query: the skill shares no indexed word or meaning with it, and the skill graph "
    "does not reach it from the query's seeds"
)


def _r(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def explain_rank(
    retriever: Retriever, query: str, ref: str, top_n: int | None = None, min_score: float | None = None
) -> dict[str, Any]:
    """The evidence behind the rank of the skill `ref` (id or name) for `query`; UnknownName (a ValueError)
    if no skill carries it."""
    r = retriever
    found = r.names.require(ref, r.snapshot.version)
    node = found[0]
    top_n = top_n or r.config.top_n
    ranking = r.rank(query)
    picked = r.members(ranking, top_n, min_score)
    members = [str(r.ids[i]) for i in picked.chosen]
    seeds = [str(r.ids[i]) for i in ranking.seeds]
    rank = ranking.position(node)
    relevance = r.relevance(ranking, np.array([node], dtype=np.int64), picked.floor)
    sid = str(r.ids[node])
    pruned = next((p["avoided_with"] for p in picked.pruned if p["id"] == sid), None)
    if rank is None:
        why, reasons = NO_EVIDENCE, []
    else:
        reasons = r.reasons(ranking, node, set(members) | set(seeds))
        why = headline(reasons)
    cosine = None if relevance.cosine is None else relevance.cosine[0]
    return {
        "version": r.snapshot.version,
        "query": query,
        "id": sid,
        "name": r.snapshot.nodes["name"][node],
        "also_matches": [str(r.ids[i]) for i in found[1:]],
        "rank": rank,  # 1-based among every skill with evidence; None: it has none
        "candidates": len(ranking.candidates),
        "evidence": rank is not None,
        "in_bundle": sid in members,
        "bundle": members,
        "top_n": top_n,
        "pruned_by": pruned,  # the member it has an avoid edge with, when that kept it out
        "no_match": picked.no_match,
        "min_score": picked.floor,
        "seed": sid in seeds,
        "score": _r(ranking.score_of(node)),  # ρ = s* + μ·m (+ experience)
        "lexical": _r(ranking.evidence.at(node)),  # m, field evidence (per query, the best 1)
        "graph": _r(ranking.graph_of(node)),  # s*, PPR mass from the seeds
        "semantic": _r(ranking.semantic_of(node)),  # z, embedding evidence
        "experience": _r(ranking.experience_of(node)),
        "co_use": _r(ranking.co_use_of(node)),
        "relevance": _r(relevance.value[0]),  # absolute, comparable across queries
        "words": _r(relevance.words[0]),
        "cosine": _r(cosine),
        "why": why,
        "reasons": reasons,
    }
