"""Retrieval quality on the dev sets of ../shared/data, long task texts and short queries, next to BM25.

    .venv/bin/python benchmarks/bench_quality.py [--shared ../shared/data] [--k 5] [--out benchmarks/results]

Query sets (dev only: the held-out sets are checked elsewhere and are not available here):
- `skillsbench-long`: the 44 SkillsBench dev task texts over the pooled 344-skill library;
- `skillsbench-keywords`: the same 44 tasks as 2-3 keyword phrases (the easy end of short queries);
- `metatool`: 1,000 one-sentence MetaTool requests over its 199 tools (paraphrases, one gold tool each);
- `apibank`: the 50 API-Bank level-3 requirements over the library generated from their APIs.

Methods, all on the same library, queries and k: flat BM25 (`bm25s` over name + description + body),
segos lexical evidence only (`semantic=none`), segos default (lexical + semantic evidence, kNN k = 2
graph), the same without propagation (seeds only), and the `paper` preset (k = 1 graph, every query token
seeds, no semantic evidence). Writes quality.json and quality.md. Constants are the project defaults;
nothing here is tuned per set.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

from segos_pipeline import Retriever, SnapshotStore, build_cold_start
from segos_pipeline.config import build_preset, retrieval_preset
from segos_pipeline.evaluation.metrics import aggregate, query_metrics
from segos_pipeline.evaluation.replay import QueryFile, gold_sets, load_queries, replay
from segos_pipeline.evaluation.study.rankers import BM25Ranker
from segos_pipeline.evolution.adapters import write_library
from segos_pipeline.evolution.adapters.apibank import plans

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python benchmarks/bench_quality.py"
KEYS = ("hit", "recall", "comp", "mrr", "mean_best_rank", "latency_ms")


def bm25_replay(retriever: Retriever, queries: QueryFile, k: int) -> dict[str, Any]:
    """Plain BM25 over the same skills, scored with the same metrics."""
    ranker = BM25Ranker(retriever.snapshot.nodes)
    per_query, latencies = [], []
    for q in queries.queries:
        gold, _ = gold_sets(retriever.names, q.gold)
        t0 = time.perf_counter()
        ranked = ranker.ranked_ids(q.query, k)
        latencies.append((time.perf_counter() - t0) * 1000)
        per_query.append(query_metrics(ranked, gold, k))
    return {
        **aggregate(per_query),
        "latency_ms": {"p50": harness.percentile(latencies, 50), "p95": harness.percentile(latencies, 95)},
    }


def apibank_queries(source: Path, out: Path) -> Path:
    """A query file of the API-Bank requirements, gold = the APIs each plan calls."""
    with out.open("w") as fh:
        for t in plans(source):
            fh.write(json.dumps({"task": t["task_id"], "query": t["query"], "gold": t["apis"]}) + "\n")
    return out


def measure(library: Path, queries: QueryFile, k: int, work: Path) -> dict[str, Any]:
    default, paper = SnapshotStore(work / "default"), SnapshotStore(work / "paper")
    build_cold_start(library, default, build_preset("default"))
    build_cold_start(library, paper, build_preset("paper"))
    snap, paper_snap = default.load(), paper.load()
    base = retrieval_preset("default")
    rows = {
        "bm25 (bm25s)": bm25_replay(Retriever(snap), queries, k),
        "segos lexical only": replay(Retriever(snap, base.with_overrides(semantic="none")), queries, k),
        "segos default (lexical + semantic)": replay(Retriever(snap), queries, k),
        "segos default, seeds only": replay(
            Retriever(snap, base.with_overrides(propagate=False)), queries, k
        ),
        "segos paper preset": replay(Retriever(paper_snap), queries, k),
    }
    return {
        "skills": snap.nodes.height,
        "queries": len(queries.queries),
        "methods": {name: {key: r[key] for key in KEYS} for name, r in rows.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    k = result["k"]
    lines = [
        "# Retrieval quality on the dev sets",
        "",
        f"Command: `{COMMAND}` (k = {k}; cold start, no traces). Dev data only; constants are the defaults.",
    ]
    for name, s in result["sets"].items():
        lines += [
            "",
            f"## {name}: {s['queries']} queries over {s['skills']} skills",
            "",
            f"| method | hit@{k} | recall@{k} | COMP@{k} | MRR | mean best rank | p50 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for method, r in s["methods"].items():
            mbr = "-" if r["mean_best_rank"] is None else f"{r['mean_best_rank']:.2f}"
            lines.append(
                f"| {method} | {r['hit']:.3f} | {r['recall']:.3f} | {r['comp']:.3f} | {r['mrr']:.3f} | {mbr} "
                f"| {r['latency_ms']['p50']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if not (args.shared / "skills").is_dir():
        print(f"skipped: real data not found at {args.shared} (it ships beside the project, not in it)")
        return 0
    shared = args.shared
    result: dict[str, Any] = {"k": args.k, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        apibank_src = shared / "traces" / "apibank" / "level-3.json"
        write_library(apibank_src, "apibank", work / "apibank-lib")
        sets = {
            "skillsbench-long": (shared / "skills", shared / "eval" / "skillsbench-dev.jsonl"),
            "skillsbench-keywords": (shared / "skills", shared / "eval" / "skillsbench-dev-keywords.jsonl"),
            "metatool": (
                shared / "eval" / "metatool-dev" / "library",
                shared / "eval" / "metatool-dev" / "dev.jsonl",
            ),
            "apibank": (work / "apibank-lib", apibank_queries(apibank_src, work / "apibank.jsonl")),
        }
        for name, (library, query_file) in sets.items():
            print(f"[bench_quality] {name}", file=sys.stderr)
            result["sets"][name] = measure(library, load_queries(query_file), args.k, work / name)
    md = markdown(result)
    harness.write_results(args.out / "quality", result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
