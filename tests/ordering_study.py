"""How well a bundle's execution order recovers the true API order: Kendall-τ and Set-F1 on API-Bank level-3.

The measurement of `retrieval/ordering.py` on throwaway stores it builds, evolves and serves. No command
runs it: `tests/unit/test_ordering.py` pins its result and `benchmarks/bench_service.py --only ordering`
reports it, so it lives beside the tests rather than in the package.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from segos_pipeline.evolution.adapters import iter_records, plans, write_library
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.graph.build import build_cold_start
from segos_pipeline.retrieval.ordering import execution_order
from segos_pipeline.service.api import SegosService
from segos_pipeline.store.snapshot import SnapshotStore

# ------------------------------------------------------------------------------------------------ metrics


def kendall_tau(predicted: Sequence[str], truth: Sequence[str]) -> float | None:
    """Kendall-τ between the order of the items the two sequences share (None below two shared items)."""
    pos = {t: i for i, t in enumerate(dict.fromkeys(truth))}
    common = [p for p in dict.fromkeys(predicted) if p in pos]
    n = len(common)
    if n < 2:
        return None
    concordant = discordant = 0
    for i in range(n):
        for j in range(i + 1, n):
            if pos[common[i]] < pos[common[j]]:
                concordant += 1
            else:
                discordant += 1
    return (concordant - discordant) / (n * (n - 1) / 2)


def set_f1(predicted: Iterable[str], truth: Iterable[str]) -> float:
    p, t = set(predicted), set(truth)
    if not p or not t:
        return 0.0
    hit = len(p & t)
    if hit == 0:
        return 0.0
    precision, recall = hit / len(p), hit / len(t)
    return 2 * precision * recall / (precision + recall)


# ------------------------------------------------------------------------------------ API-Bank study


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _score_order(members: Sequence[str], scores: Mapping[str, float]) -> list[str]:
    return sorted(members, key=lambda m: (-float(scores.get(m, 0.0)), m))


def evaluate_orders(service: Any, tasks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Kendall-τ and Set-F1 of `service`'s bundles against each task's true API order.

    Two settings, each with both orderings (execution order vs retrieval score):
    * `bundle`: the retrieved bundle (what an agent gets); Set-F1 is the bundle against the true set (the
      same for both orderings, which only permute it) and τ is over the true APIs the bundle holds;
    * `gold_set`: the true APIs themselves ordered by each rule (isolates ordering from retrieval).
    Tasks with fewer than two items to compare have no τ; `n_tau` says how many had one.
    """
    lo = service._request()
    names = lo.names
    rows: list[dict[str, Any]] = []
    for task in tasks:
        truth = [lo.names.ids[i] for a in task["apis"] if (i := names.resolve_one(a)) is not None]
        bundle = service.retrieve_bundle(task["query"])
        scores = {s["id"]: s["score"] for s in bundle["skills"]}
        members = list(scores)
        ranking = lo.retriever.rank(task["query"])
        idx = {t: names.resolve_one(t) for t in truth}
        gold_scores = {t: ranking.score_of(i) if i is not None else 0.0 for t, i in idx.items()}
        among = [(s, d, r) for s, d, r, _w in lo.edges_among(truth)]
        gold_exec = execution_order(truth, gold_scores, among, lo.precedence).order
        rows.append(
            {
                "task_id": task["task_id"],
                "truth": truth,
                "bundle": members,
                "set_f1": set_f1(members, truth),
                "tau_exec": kendall_tau(bundle["order"], truth),
                "tau_score": kendall_tau(_score_order(members, scores), truth),
                "gold_tau_exec": kendall_tau(gold_exec, truth),
                "gold_tau_score": kendall_tau(_score_order(truth, gold_scores), truth),
            }
        )

    return {**summarize_orders(rows), "rows": rows}


def summarize_orders(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean Set-F1 and Kendall-τ of per-task order rows (see `evaluate_orders`)."""

    def agg(key: str) -> dict[str, Any]:
        vals = [r[key] for r in rows if r[key] is not None]
        return {"mean": _mean(vals), "n_tau": len(vals)}

    return {
        "tasks": len(rows),
        "bundle": {
            "set_f1": _mean([r["set_f1"] for r in rows]),
            "kendall_tau": {"execution_order": agg("tau_exec"), "retrieval_score": agg("tau_score")},
        },
        "gold_set": {
            "set_f1": 1.0 if rows else None,
            "kendall_tau": {
                "execution_order": agg("gold_tau_exec"),
                "retrieval_score": agg("gold_tau_score"),
            },
        },
    }


def apibank_study(source: str | Path, work: str | Path) -> dict[str, Any]:
    """Ordering on API-Bank level-3 under two labelled protocols.

    * `same_task`: precedence and dependency edges are mined from the traces of all 50 tasks (one
      evolution round) and measured on the same tasks — what a deployed graph sees on recurring tasks;
    * `transfer`: two folds; each mines from half the tasks (sorted ids, even / odd positions) and is
      measured on the other half, so no measured task contributed to its own order statistics.
    Also `cold_start` (no traces at all: the execution order can only fall back to score order).
    """
    source, work = Path(source), Path(work)
    if work.exists():
        shutil.rmtree(work)
    lib = work / "library"
    write_library(source, "apibank", lib)
    tasks = sorted(plans(source), key=lambda t: t["task_id"])
    records = [r for r in iter_records(source, "apibank") if not hasattr(r, "reason")]

    def run(name: str, mine: set[str] | None, measure: list[Mapping[str, Any]]) -> dict[str, Any]:
        store = SnapshotStore(work / name)
        build_cold_start(lib, store)
        if mine:
            TraceStore(store).ingest([r for r in records if r.task_id in mine], window="apibank")
            evolve(store, "apibank")
        return evaluate_orders(SegosService(store, landing=work / "landing"), measure)

    ids = [t["task_id"] for t in tasks]
    even, odd = set(ids[0::2]), set(ids[1::2])
    cold = run("cold", None, tasks)
    same = run("same", set(ids), tasks)
    fold_a = run("fold-a", even, [t for t in tasks if t["task_id"] in odd])
    fold_b = run("fold-b", odd, [t for t in tasks if t["task_id"] in even])
    transfer_rows = fold_a["rows"] + fold_b["rows"]

    strip = lambda r: {k: v for k, v in r.items() if k != "rows"}  # noqa: E731
    return {
        "source": str(source),
        "tasks": len(tasks),
        "plan_lengths": {
            str(n): sum(len(t["apis"]) == n for t in tasks) for n in sorted({len(t["apis"]) for t in tasks})
        },
        "cold_start": strip(cold),
        "same_task": strip(same),
        "transfer": {**summarize_orders(transfer_rows), "folds": {"a": strip(fold_a), "b": strip(fold_b)}},
        "rows": {"same_task": same["rows"], "transfer": transfer_rows},
    }
