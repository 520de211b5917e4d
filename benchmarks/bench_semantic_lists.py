"""Inverted lists' two settings, swept on one store's skill vectors: lists per √n, and library size.

    .venv/bin/python benchmarks/bench_semantic_lists.py --store STORE --queries QUERIES.jsonl
        [--per-root 1,2,4] [--scan-rows 12288,16384,24576] [--sizes 100000,200000,300000,500000]
        [--limit 100] [--core 0] [--out FILE.json]

- `--per-root`: lists of `per_root`·√n over all the vectors (built here, not cached), each searched with
  every `--scan-rows` budget: build seconds, ms p50/p95 of `evidence_and_nearest`, recall of the exact top
  `semantic_candidates`.
- `--sizes`: the first N skills' vectors as a library of N, searched as shipped (`lists_count`,
  `IVF_SCAN_ROWS`), timed and compared with the exact search over those N: how recall falls as a library
  grows at a fixed read.
Pinned to one core; the queries are embedded once and only the semantic search is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import harness

harness.pin_to_core(harness.core_from_argv())  # before numpy starts its thread pools

import numpy as np  # noqa: E402

from segos_pipeline import SnapshotStore  # noqa: E402
from segos_pipeline.config import retrieval_for  # noqa: E402
from segos_pipeline.retrieval.ann import build_lists  # noqa: E402
from segos_pipeline.retrieval.embeddings import backend_for  # noqa: E402
from segos_pipeline.retrieval.semantic import (  # noqa: E402
    IVF_SCAN_ROWS,
    SemanticIndex,
    head_of,
    lists_count,
    vectors_for,
)


def timed(index: SemanticIndex, queries: list[np.ndarray], reference: list[np.ndarray]) -> dict[str, float]:
    for q in queries[:10]:  # warm-up
        index.evidence_and_nearest(q, None, 0)
    ms, recall = [], []
    for q, want in zip(queries, reference, strict=True):
        a = time.perf_counter_ns()
        nodes = index.evidence_and_nearest(q, None, 0)[0]
        ms.append((time.perf_counter_ns() - a) / 1e6)
        recall.append(float(np.isin(want, nodes).mean()) if len(want) else 1.0)
    return {**harness.percentiles(ms, 3), "recall": round(float(np.mean(recall)), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--per-root", default="")
    ap.add_argument("--scan-rows", default=str(IVF_SCAN_ROWS))
    ap.add_argument("--sizes", default="")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    snap = SnapshotStore(args.store).load()
    config = retrieval_for(snap.manifest)
    backend = backend_for(config.semantic)
    if backend is None:
        sys.exit("this version's retrieval has no semantic evidence (semantic = none)")
    vectors = vectors_for(snap, backend)
    m, floor = config.semantic_candidates, config.semantic_min_cosine
    lines = [json.loads(x) for x in args.queries.read_text().splitlines() if x.strip()][: args.limit]
    probe = SemanticIndex(vectors, backend, m, floor, build_lists(vectors.matrix, 1))  # one list: no build
    queries = [probe.query_vector(x.get("query") or x.get("instruction") or "") for x in lines]
    del probe
    out: dict[str, Any] = {"command": " ".join(sys.argv), "per_root": [], "sizes": []}

    def reference(matrix: np.ndarray) -> list[np.ndarray]:
        return [head_of((matrix @ q).astype(np.float64), m, floor)[0] for q in queries]

    n = vectors.matrix.shape[0]
    exact = reference(vectors.matrix) if args.per_root else []
    for per_root in [float(x) for x in args.per_root.split(",") if x]:
        k = max(1, round(per_root * math.sqrt(n)))
        t0 = time.perf_counter()
        lists = build_lists(vectors.matrix, k)
        built = round(time.perf_counter() - t0, 1)
        for rows in [int(x) for x in args.scan_rows.split(",")]:
            r = timed(SemanticIndex(vectors, backend, m, floor, lists, rows), queries, exact)
            row = {"per_root": per_root, "lists": k, "build_s": built, "scan_rows": rows, **r}
            out["per_root"].append(row)
            print(json.dumps(row), flush=True)
        del lists
    for size in [int(x) for x in args.sizes.split(",") if x]:
        part = replace(vectors, matrix=vectors.matrix[:size], hashes=vectors.hashes[:size])
        want = reference(part.matrix)
        lists = SemanticIndex(part, backend, m, floor, build_lists(part.matrix, lists_count(size)))
        row = {"skills": size, "lists": {**timed(lists, queries, want), "lists": len(lists.lists.centroids)}}
        out["sizes"].append(row)
        print(json.dumps(row), flush=True)
        del lists
    if args.out is not None:
        harness.write_json(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
