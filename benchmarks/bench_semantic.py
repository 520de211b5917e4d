"""Semantic evidence on a large version: the exact pass, the coarse funnel and the inverted lists.

    .venv/bin/python benchmarks/bench_semantic.py --store STORE --queries QUERIES.jsonl [--version V]
        [--limit 200] [--repeat 3] [--lists-from N] [--out benchmarks/results]

For each query the three searches run on the same skill vectors, pinned to one core:
- exact: every vector scored (the reference);
- funnel: the leading 64 dimensions of every vector pick a shortlist, the full vectors rank it (what
  libraries of 20k-200k skills use);
- lists: inverted lists pick the rows the first pass reads (what libraries past 200k skills use).
`--lists-from N` builds inverted lists from N skills (`semantic_lists_min_skills`; to compare them on a
smaller library). It reports each one's time per query (p50/p95, warm) and, against the exact pass,
the recall of the exact evidence-bearing skills (the top `semantic_candidates`) and how many queries
get the same evidence.
Writes `semantic.json` and `semantic.md` into `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if hasattr(os, "sched_setaffinity"):  # one core, before numpy starts its thread pools
    os.sched_setaffinity(0, {0})
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

from segos_pipeline import Retriever, SnapshotStore  # noqa: E402
from segos_pipeline.config import retrieval_for  # noqa: E402
from segos_pipeline.retrieval import semantic as semantic_mod  # noqa: E402
from segos_pipeline.retrieval.semantic import SemanticIndex, head_scores  # noqa: E402


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50": round(float(np.percentile(a, 50)), 3), "p95": round(float(np.percentile(a, 95)), 3)}


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
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)

    lines = [json.loads(x) for x in args.queries.read_text().splitlines() if x.strip()][: args.limit]
    texts = [q.get("query") or q.get("instruction") or "" for q in lines]
    t0 = time.perf_counter()
    snap = SnapshotStore(args.store).load(args.version)
    config = retrieval_for(snap.manifest)
    if args.lists_from is not None:
        config = replace(config, semantic_lists_min_skills=args.lists_from)
    sem = Retriever(snap, config).semantic
    if sem is None:
        sys.exit("this version's retrieval has no semantic evidence (semantic = none)")
    load_s = time.perf_counter() - t0
    n = sem.matrix.shape[0]
    funnel = SemanticIndex(sem.vectors, sem.backend, sem.candidates, sem.min_cosine, lists=None)
    m, floor = sem.candidates, sem.min_cosine

    def exact(q: np.ndarray) -> np.ndarray:
        return head_scores(sem._exact(q, None), m, floor)

    methods = {"exact": exact, "funnel": funnel.evidence_of}
    if sem.lists is not None:
        methods["lists"] = sem.evidence_of
    vectors = [sem.query_vector(t) for t in texts]
    results: dict[str, Any] = {}
    reference = [exact(q) for q in vectors]
    for name, run in methods.items():
        times: list[float] = []
        outs = [run(q) for q in vectors]  # warm-up, and the evidence compared below
        for _ in range(args.repeat):
            for q in vectors:
                a = time.perf_counter_ns()
                run(q)
                times.append((time.perf_counter_ns() - a) / 1e6)
        recall, same = [], 0
        for ref, got in zip(reference, outs, strict=True):
            want = np.flatnonzero(ref)
            recall.append(float(np.isin(want, np.flatnonzero(got)).mean()) if len(want) else 1.0)
            same += bool(np.allclose(ref, got, atol=1e-9))
        results[name] = {
            "ms": percentiles(times),
            "recall_of_exact_evidence": round(float(np.mean(recall)), 4),
            "queries_with_the_exact_evidence": same,
        }
        print(f"{name}: {results[name]}", file=sys.stderr)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_semantic.py " + " ".join(argv or sys.argv[1:]),
        "skills": n,
        "queries": len(texts),
        "lists": len(sem.lists.centroids) if sem.lists is not None else None,
        "scan_rows": semantic_mod.IVF_SCAN_ROWS,
        "load_and_first_retriever_s": round(load_s, 2),
        "platform": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "load_average": list(os.getloadavg()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "semantic.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    rows = [
        f"| {name} | {r['ms']['p50']} | {r['ms']['p95']} | {r['recall_of_exact_evidence']} | "
        f"{r['queries_with_the_exact_evidence']} / {len(texts)} |"
        for name, r in results.items()
    ]
    md = [
        "# Semantic evidence on a large version: exact, funnel, inverted lists",
        "",
        f"`{meta['command']}` on {meta['platform']}, one core, load average {meta['load_average']}.",
        f"{n} skills, {len(texts)} queries x {args.repeat} warm passes; lists: {meta['lists']}, "
        f"rows read per query by the lists: at least {meta['scan_rows']}.",
        "",
        "| search | ms p50 | ms p95 | recall of the exact evidence | queries with the exact evidence |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    (args.out / "semantic.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
