"""Replay a query file against a version: hit@k, recall@k, COMP@k, MRR, mean best rank, latency."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..retrieval.ranker import Retriever
from ..text.names import SkillNames
from .metrics import aggregate, percentile, query_metrics


@dataclass
class EvalQuery:
    query: str
    gold: list[str]
    task: str | None = None
    line: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class QueryFile:
    queries: list[EvalQuery]
    skipped: list[dict[str, Any]]  # {"line", "reason"} for lines that could not be used


def load_queries(path: str | Path) -> QueryFile:
    """Read a JSONL query file; each line needs `query` (or `instruction`) and a non-empty `gold` list.

    A bad line is skipped and reported with its line number, never fatal for the rest of the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"query file not found: {path}")
    queries, skipped = [], []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                skipped.append({"line": lineno, "reason": f"not JSON ({exc.msg})"})
                continue
            if not isinstance(obj, dict):
                skipped.append({"line": lineno, "reason": "not a JSON object"})
                continue
            text = obj.get("query") or obj.get("instruction")
            gold = obj.get("gold")
            if not isinstance(text, str) or not text.strip():
                skipped.append({"line": lineno, "reason": "no `query` or `instruction` text"})
                continue
            if isinstance(gold, str):
                gold = [gold]
            if not isinstance(gold, list) or not gold or not all(isinstance(g, str) for g in gold):
                skipped.append({"line": lineno, "reason": "`gold` must be a non-empty list of skill names"})
                continue
            task = obj.get("task") or obj.get("task_id") or obj.get("id")
            queries.append(EvalQuery(text, gold, str(task) if task is not None else None, lineno, obj))
    return QueryFile(queries, skipped)


def gold_sets(names: SkillNames, gold: list[str]) -> tuple[list[set[str]], list[str]]:
    sets, unknown = [], []
    for g in gold:
        ids = {names.ids[i] for i in names.resolve(g)}
        if not ids:
            unknown.append(g)
        sets.append(ids)
    return sets, unknown


def replay(retriever: Retriever, queries: QueryFile, k: int = 5, details: bool = False) -> dict[str, Any]:
    per_query, latencies, rows = [], [], []
    unknown_gold: set[str] = set()
    if queries.queries:  # one untimed query first: latency is reported for a warm retriever
        retriever.ranked_ids(queries.queries[0].query, k)
    for q in queries.queries:
        gold, unknown = gold_sets(retriever.names, q.gold)
        unknown_gold.update(unknown)
        t0 = time.perf_counter()
        ranked = retriever.ranked_ids(q.query, k)
        latencies.append((time.perf_counter() - t0) * 1000)
        m = query_metrics(ranked, gold, k)
        per_query.append(m)
        if details:
            rows.append({"task": q.task, "line": q.line, "gold": q.gold, "ranked": ranked, **m.__dict__})
    summary = aggregate(per_query)
    out: dict[str, Any] = {
        "version": retriever.snapshot.version,
        "k": k,
        **summary,
        "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
        "unknown_gold": sorted(unknown_gold),
        "skipped": queries.skipped,
    }
    if details:
        out["queries"] = rows
    return out
