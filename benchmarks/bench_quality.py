"""Retrieval quality on the real SkillsBench dev queries over the whole real library, next to BM25.

    .venv/bin/python benchmarks/bench_quality.py [--shared ../shared/data] [--k 5] [--out benchmarks/results]

Methods, all on the same library, queries and k: plain BM25 (the `bm25s` package, over name +
description + body), segos lexical seeds only (no propagation), segos forward-only propagation, and segos
reverse-aware PPR (the default). Writes quality.json and quality.md. Constants are the defaults: these 44
queries are for seeing, not fitting.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import bm25s

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.evaluation.metrics import aggregate, percentile, query_metrics
from segos_pipeline.evaluation.replay import gold_sets, load_queries, replay

ROOT = Path(__file__).resolve().parent.parent


def bm25_replay(retriever: Retriever, queries, k: int) -> dict:
    """Plain BM25 over the same skills' name + description + body, scored with the same metrics."""
    nodes = retriever.snapshot.nodes
    corpus = [f"{n} {d} {b}" for n, d, b in nodes.select("name", "description", "body").iter_rows()]
    model = bm25s.BM25()
    model.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    ids = nodes["id"].to_list()
    per_query, latencies = [], []
    for q in queries.queries:
        gold, _ = gold_sets(retriever.names, q.gold)
        t0 = time.perf_counter()
        docs, scores = model.retrieve(
            bm25s.tokenize([q.query], stopwords="en", show_progress=False), k=k, show_progress=False
        )
        latencies.append((time.perf_counter() - t0) * 1000)
        ranked = [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
        per_query.append(query_metrics(ranked, gold, k))
    return {
        **aggregate(per_query),
        "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if not (args.shared / "skills").is_dir():
        print(f"skipped: real data not found at {args.shared} (it ships beside the project, not in it)")
        return 0
    queries = load_queries(args.shared / "eval" / "skillsbench-dev.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(tmp)
        manifest = build_cold_start(args.shared / "skills", store)
        snap = store.load()
        rows = {"bm25 (bm25s)": bm25_replay(Retriever(snap), queries, args.k)}
        for name, cfg in {
            "segos lexical seeds only": RetrievalConfig(propagate=False),
            "segos forward-only PPR": RetrievalConfig(reverse=False),
            "segos reverse-aware PPR (default)": RetrievalConfig(),
        }.items():
            rows[name] = replay(Retriever(snap, cfg), queries, k=args.k)
    result = {
        "library": str(args.shared / "skills"),
        "skills": manifest["counts"]["skills"],
        "semantic": manifest["counts"]["semantic"],
        "queries": len(queries.queries),
        "k": args.k,
        "methods": {
            name: {key: r[key] for key in ("hit", "recall", "comp", "mrr", "mean_best_rank", "latency_ms")}
            for name, r in rows.items()
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality.json").write_text(json.dumps(result, indent=2))
    k = args.k
    lines = [
        f"Real data: {result['skills']} skills, {result['queries']} SkillsBench dev queries, k = {k}.",
        "",
        f"| method | hit@{k} | recall@{k} | COMP@{k} | MRR | mean best rank | p50 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["methods"].items():
        mbr = "-" if r["mean_best_rank"] is None else f"{r['mean_best_rank']:.2f}"
        lines.append(
            f"| {name} | {r['hit']:.3f} | {r['recall']:.3f} | {r['comp']:.3f} | {r['mrr']:.3f} | {mbr} | "
            f"{r['latency_ms']['p50']:.2f} |"
        )
    (args.out / "quality.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
