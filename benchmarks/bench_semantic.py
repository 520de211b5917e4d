"""Semantic evidence on a large version: the exact pass, the coarse funnel and the inverted lists.

    .venv/bin/python benchmarks/bench_semantic.py --store STORE --queries QUERIES.jsonl [--version V]
        [--limit 200] [--repeat 3] [--lists-from N] [--scan-rows 16384,32768] [--hit-at-5]
        [--core 0] [--out benchmarks/results]

For each query the searches run on the same skill vectors, pinned to one core (`--core`, default 0):
- exact: every vector scored (the reference);
- funnel: the leading 64 dimensions of every vector pick a shortlist, the full vectors rank it (what
  libraries below `semantic_lists_min_skills` use past 20k skills);
- lists R: inverted lists over the full vectors; a query scores the rows of the lists nearest it until it
  has read R rows (one run per `--scan-rows` value; the default is `IVF_SCAN_ROWS`).
`--lists-from N` builds (or loads) inverted lists from N skills (`semantic_lists_min_skills`; 1 forces them
on any library). It reports each search's time per query for `evidence_nodes_of` (what the ranker calls:
sparse, no length-N output; p50/p95, warm), the rows it scores, and against the exact pass the recall of
the exact evidence-bearing skills (the top `semantic_candidates`) and how many queries get the same
evidence. `--hit-at-5` also ranks every query end to end with a Retriever with the funnel and one with
the lists (built one after the other) and counts the queries with a `gold` skill in the top 5.
Writes `semantic.json` and `semantic.md` into `--out`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import replace
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


def rows_scored(index: SemanticIndex, q: np.ndarray) -> int:
    """How many skills' vectors a search scores for query vector `q`."""
    if index.lists is not None:
        return len(index.lists.scan(q, index.scan_rows)[0])
    rows = index.shortlist(q)
    return index.matrix.shape[0] if rows is None else len(rows)


def measure(
    run: Search, vectors: list[np.ndarray], reference: list[tuple[np.ndarray, np.ndarray]], repeat: int
) -> dict[str, Any]:
    outs = [run(q) for q in vectors]  # warm-up, and the evidence compared below
    times: list[float] = []
    for _ in range(repeat):
        for q in vectors:
            a = time.perf_counter_ns()
            run(q)
            times.append((time.perf_counter_ns() - a) / 1e6)
    recall, same = [], 0
    for (want, zw), (got, zg) in zip(reference, outs, strict=True):
        recall.append(float(np.isin(want, got).mean()) if len(want) else 1.0)
        same += bool(np.array_equal(want, got) and np.allclose(zw, zg, atol=1e-9))
    return {
        "ms": harness.percentiles(times, 3),
        "recall_of_exact_evidence": round(float(np.mean(recall)), 4),
        "queries_with_the_exact_evidence": same,
    }


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
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--lists-from", type=int, default=None, help="inverted lists past this many skills (0: none)"
    )
    ap.add_argument("--scan-rows", default=None, help="comma-separated row budgets for the lists")
    ap.add_argument("--hit-at-5", action="store_true", help="end-to-end hit@5, funnel against lists")
    ap.add_argument(
        "--hit-scan-rows",
        type=int,
        default=None,
        help="rows the lists read for hit@5",
    )
    ap.add_argument("--core", type=int, default=0, help="the one CPU core to run on")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)

    lines = [json.loads(x) for x in args.queries.read_text().splitlines() if x.strip()][: args.limit]
    texts = [query_text(q) for q in lines]
    t0 = time.perf_counter()
    snap = SnapshotStore(args.store).load(args.version)
    config = retrieval_for(snap.manifest)
    if args.lists_from is not None:
        config = replace(config, semantic_lists_min_skills=args.lists_from)
    sem = semantic_index(snap, config)
    if sem is None:
        sys.exit("this version's retrieval has no semantic evidence (semantic = none)")
    load_s = time.perf_counter() - t0
    n = sem.matrix.shape[0]
    lists_count = len(sem.lists.centroids) if sem.lists is not None else None
    m, floor = sem.candidates, sem.min_cosine
    vectors = [sem.query_vector(t) for t in texts]

    def exact(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos, z = head_of((sem.matrix @ q).astype(np.float64), m, floor)  # as SemanticIndex scores
        ranked = np.argsort(pos)
        return pos[ranked], z[ranked]

    results: dict[str, Any] = {}
    reference = [exact(q) for q in vectors]
    searches: dict[str, SemanticIndex | None] = {"exact": None}
    searches["funnel"] = SemanticIndex(sem.vectors, sem.backend, m, floor, lists=None)
    budgets = [int(x) for x in args.scan_rows.split(",")] if args.scan_rows else [sem.scan_rows]
    if sem.lists is not None:
        for b in budgets:
            searches[f"lists {b}"] = SemanticIndex(sem.vectors, sem.backend, m, floor, sem.lists, b)
    for name, index in searches.items():
        run = exact if index is None else index.evidence_nodes_of
        results[name] = measure(run, vectors, reference, args.repeat)
        read = [n if index is None else rows_scored(index, q) for q in vectors]
        results[name]["rows_scored_mean"] = round(float(np.mean(read)))
        print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
    del searches
    gc.collect()
    end_to_end: dict[str, float] = {}
    if args.hit_at_5:
        gold = [x for x in lines if x.get("gold")]
        del sem
        gc.collect()
        end_to_end["funnel"] = hit_at_5(snap, replace(config, semantic_lists_min_skills=0), gold)
        print(f"hit@5 funnel: {end_to_end['funnel']}", file=sys.stderr, flush=True)
        if args.hit_scan_rows is not None:  # read at construction of the Retriever's semantic index
            semantic_mod.IVF_SCAN_ROWS = args.hit_scan_rows
        end_to_end["lists"] = hit_at_5(snap, replace(config, semantic_lists_min_skills=1), gold)
        print(f"hit@5 lists: {end_to_end['lists']}", file=sys.stderr, flush=True)
    else:
        del sem
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_semantic.py " + " ".join(argv or sys.argv[1:]),
        "skills": n,
        "queries": len(texts),
        "lists": lists_count,
        "hit_at_5_scan_rows": semantic_mod.IVF_SCAN_ROWS,
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
        "# Semantic evidence on a large version: exact, funnel, inverted lists",
        "",
        f"`{meta['command']}` on {meta['platform']}, one core, load average {meta['load_average']}.",
        f"{n} skills, {len(texts)} queries x {args.repeat} warm passes of `evidence_nodes_of`; "
        f"lists: {meta['lists']}.",
        "",
        "| search | ms p50 | ms p95 | rows scored (mean) | recall of the exact evidence "
        "| queries with the exact evidence |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    if end_to_end:
        md += [
            f"End to end, hit@5 of the {sum(1 for x in lines if x.get('gold'))} queries with gold skills "
            f"(lists reading {meta['hit_at_5_scan_rows']} rows): "
            + ", ".join(f"{k} {v}" for k, v in end_to_end.items())
            + ".",
            "",
        ]
    harness.write_results(args.out / "semantic", payload, "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
