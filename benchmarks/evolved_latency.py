#!/usr/bin/env python
"""Evolved against cold query latency, interleaved in one process, on the suites of rankings_equal.py.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/evolved_latency.py [--passes 7] [--work DIR] [SUITE]

For each suite (`transfer`, `multi`, `witnessed`; all by default) every query is ranked by
`ranked_ids(q, 5)` on the cold and on the evolved version in turn, `--passes` times after one warm pass;
the minimum per query is kept and the p50 over queries reported, for all queries and for those of 2-4
sentences (the ones whose sentences vote on their own in the experience). Interleaving the two versions
query by query lets a shared, loaded machine slow both alike: compare the ratio, not the milliseconds.
To compare code trees, run it under each (PYTHONPATH) one after the other, and alternate.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import harness
import numpy as np
from rankings_equal import suites


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", nargs="*", default=["transfer", "multi", "witnessed"])
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parent / "out" / "rankings")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    from segos_pipeline import Retriever
    from segos_pipeline.retrieval.experience import clauses

    for name, (store, cold_id, evolved_id, texts) in suites(args.work).items():
        if name not in args.suite:
            continue
        cold, evolved = Retriever(store.load(cold_id)), Retriever(store.load(evolved_id))
        cold.prepare()
        evolved.prepare()
        ms = np.array(harness.interleaved_ms([cold, evolved], texts, args.passes))
        several = np.array([bool(clauses(q)) for q in texts])
        c, e = np.median(ms[:, 0]), np.median(ms[:, 1])
        line = f"{name}: {len(texts)} queries, cold {c:.3f} ms, evolved {e:.3f} ms, {e / c:.2f}x"
        if several.any():
            cs, es = np.median(ms[several, 0]), np.median(ms[several, 1])
            line += f"; {int(several.sum())} of 2-4 sentences: {cs:.3f} / {es:.3f} ms, {es / cs:.2f}x"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
