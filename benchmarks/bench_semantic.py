"""The semantic search (inverted lists) on a large version, against the exact search.

    .venv/bin/python benchmarks/bench_semantic.py --store STORE --queries QUERIES.jsonl [--version V]
        [--limit 200] [--repeat 5] [--scan-rows 16384,32768] [--hit-at-5] [--core 0]
        [--out benchmarks/results]

For each query, on the same skill vectors, pinned to one core (`--core`, default 0):
- exact: every vector scored, one matrix-vector product (the reference: what one list is);
- lists R: the version's inverted lists (2√n of them past IVF_SCAN_ROWS skills, one below), a query
  scoring the rows of the lists nearest it until it has read R rows (one run per `--scan-rows` value;
  the default is `IVF_SCAN_ROWS`, what a query reads).
The searches run interleaved, query by query, `--repeat` times; a query's time is the least of its
repeats (what the machine allows it; other processes only add). It reports the seconds to build or load
the lists, each search's time per query for `evidence_and_nearest` (what the ranker calls: sparse, no
length-N output; p50/p95 of the per-query minima), the rows it scores, and against the exact search the
recall of the exact evidence-bearing skills (the top `semantic_candidates`) and how many queries get the
same evidence, bit for bit. `--hit-at-5` also ranks every query end to end with a Retriever as shipped
and one whose lists are one list (the exact search), and counts the queries with a `gold` skill in the
top 5. Writes `semantic.json` and `semantic.md` into `--out`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness

# One core (`--core N`, default 0), before numpy starts its thread pools. Another process pinned to the
# same core halves what this one measures; pick a free one.
harness.pin_to_core(harness.core_from_argv())

import numpy as np  # noqa: E402

from segos_pipeline import Retriever, SnapshotStore  # noqa: E402
from segos_pipeline.config import RetrievalConfig, retrieval_for  # noqa: E402
from segos_pipeline.evaluation.replay import gold_sets  # noqa: E402
from segos_pipeline.retrieval import semantic as semantic_mod  # noqa: E402
from segos_pipeline.retrieval.semantic import SemanticIndex, head_of, semantic_index  # noqa: E402

Search = Any  # q -> (sorted nodes, z)


def measure(
    runs: dict[str, Search],
    vectors: list[np.ndarray],
    reference: list[tuple[np.ndarray, np.ndarray]],
    repeat: int,
) -> dict[str, dict[str, Any]]:
    """Every search on every query, interleaved query by query; a query's time is its least."""
    outs = {name: [run(q) for q in vectors] for name, run in runs.items()}  # warm, and compared below
    best = {name: [float("inf")] * len(vectors) for name in runs}
    for _ in range(repeat):
        for i, q in enumerate(vectors):
            for name, run in runs.items():
                a = time.perf_counter_ns()
                run(q)
                best[name][i] = min(best[name][i], (time.perf_counter_ns() - a) / 1e6)
    results = {}
    for name in runs:
        recall, same = [], 0
        for (want, zw), (got, zg) in zip(reference, outs[name], strict=True):
            recall.append(float(np.isin(want, got).mean()) if len(want) else 1.0)
            same += bool(np.array_equal(want, got) and np.array_equal(zw, zg))
        results[name] = {
            "ms": harness.percentiles(best[name], 3),
            "recall_of_exact_evidence": round(float(np.mean(recall)), 4),
            "queries_with_the_exact_evidence": same,
        }
    return results


def query_text(line: dict[str, Any]) -> str:
    return line.get("query") or line.get("instruction") or ""


def hit_at_5(snap: Any, config: RetrievalConfig, lines: list[dict[str, Any]]) -> float:
    """Share of the queries with any `gold` skill (a name, resolved as replay does) among a Retriever's
    first 5 under `config`."""
    r = Retriever(snap, config)
    hits = []
    for x in lines:
        gold = set().union(*gold_sets(r.names, x["gold"])[0])
        hits.append(bool(set(r.ranked_ids(query_text(x), 5)) & gold))
    del r
    gc.collect()
    return round(float(np.mean(hits)), 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--version", default=None)
    ap.add_argument("--queries", type=Path, required=True, help="JSONL with `query` or `instruction`")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scan-rows", default=None, help="comma-separated row budgets for the lists")
    ap.add_argument("--hit-at-5", action="store_true", help="end-to-end hit@5, lists against exact")
    ap.add_argument("--core", type=int, default=0, help="the one CPU core to run on")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)

    lines = [json.loads(x) for x in args.queries.read_text().splitlines() if x.strip()][: args.limit]
    texts = [query_text(q) for q in lines]
    snap = SnapshotStore(args.store).load(args.version)
    config = retrieval_for(snap.manifest)
    t0 = time.perf_counter()
    sem = semantic_index(snap, config)  # the vectors and lists: cached, or computed and built here
    load_s = time.perf_counter() - t0
    if sem is None:
        sys.exit("this version's retrieval has no semantic evidence (semantic = none)")
    matrix = sem.matrix
    n = matrix.shape[0]
    m, floor = sem.candidates, sem.min_cosine
    vectors = [sem.query_vector(t) for t in texts]

    def exact(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos, z = head_of((matrix @ q).astype(np.float64), m, floor)  # one list, read whole
        ranked = np.argsort(pos)
        return pos[ranked], z[ranked]

    reference = [exact(q) for q in vectors]
    budgets = [int(x) for x in args.scan_rows.split(",")] if args.scan_rows else [sem.scan_rows]
    searches = {
        f"lists {b}": SemanticIndex(sem.vectors, sem.backend, m, floor, sem.lists, b) for b in budgets
    }
    runs: dict[str, Search] = {"exact": exact}
    for k, v in searches.items():
        runs[k] = lambda q, v=v: v.evidence_and_nearest(q, None, 0)[:2]
    results = measure(runs, vectors, reference, args.repeat)
    for name, index in searches.items():
        results[name]["rows_scored_mean"] = round(
            float(np.mean([len(index.lists.scan(q, index.scan_rows)[0]) for q in vectors]))
        )
    results["exact"]["rows_scored_mean"] = n
    for name, r in results.items():
        print(f"{name}: {r}", file=sys.stderr, flush=True)
    lists_count = len(sem.lists.centroids)
    del searches, sem
    gc.collect()
    end_to_end: dict[str, float] = {}
    if args.hit_at_5:
        gold = [x for x in lines if x.get("gold")]
        end_to_end["lists"] = hit_at_5(snap, config, gold)
        print(f"hit@5 lists: {end_to_end['lists']}", file=sys.stderr, flush=True)
        semantic_mod.IVF_SCAN_ROWS = n  # read when the lists are made: one list, the exact search
        end_to_end["exact"] = hit_at_5(snap, config, gold)
        print(f"hit@5 exact: {end_to_end['exact']}", file=sys.stderr, flush=True)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_semantic.py " + " ".join(argv or sys.argv[1:]),
        "skills": n,
        "queries": len(texts),
        "lists": lists_count,
        "load_s": round(load_s, 2),
        "platform": harness.platform_line(),
        "load_average": list(os.getloadavg()),
    }
    payload = {"meta": meta, "results": results, "hit_at_5": end_to_end}
    rows = [
        f"| {name} | {r['ms']['p50']} | {r['ms']['p95']} | {r['rows_scored_mean']} | "
        f"{r['recall_of_exact_evidence']} | {r['queries_with_the_exact_evidence']} / {len(texts)} |"
        for name, r in results.items()
    ]
    md = [
        "# The semantic search on a large version: inverted lists against the exact search",
        "",
        f"`{meta['command']}` on {meta['platform']}, one core, load average {meta['load_average']}.",
        f"{n} skills, {len(texts)} queries, least of {args.repeat} interleaved warm passes of "
        f"`evidence_and_nearest`; lists: {meta['lists']}, built or loaded in {meta['load_s']} s "
        "(with the vectors).",
        "",
        "| search | ms p50 | ms p95 | rows scored (mean) | recall of the exact evidence "
        "| queries with the exact evidence |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    if end_to_end:
        md += [
            f"End to end, hit@5 of the {sum(1 for x in lines if x.get('gold'))} queries with gold skills: "
            + ", ".join(f"{k} {v}" for k, v in end_to_end.items())
            + ".",
            "",
        ]
    harness.write_results(args.out / "semantic", payload, "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
