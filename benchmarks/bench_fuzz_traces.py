"""Fuzz the trace adapters and ingestion with many mutated inputs in every format; write the figures.

    python benchmarks/bench_fuzz_traces.py --items 50000 --seeds 2

writes benchmarks/results/fuzz-traces.{md,json}: per format and seed, the inputs tried, stored,
quarantined (with a reason), duplicates, crashes (exceptions that escaped ingestion) and inputs silently
dropped (neither stored, quarantined nor a counted duplicate). The bar is 0 crashes and 0 dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import harness

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEFAULT_LIBRARY

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))
from tests.trace_fuzz import ingest_and_account, write_corpus  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=50_000, help="inputs per seed, over the four formats")
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()
    runs = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            store = SnapshotStore(Path(tmp) / "store")
            build_cold_start(DEFAULT_LIBRARY, store)
            start = time.perf_counter()
            corpus = write_corpus(Path(tmp) / "corpus", args.items, seed=seed)
            figures = ingest_and_account(TraceStore(store), corpus)
            seconds = round(time.perf_counter() - start, 1)
        for fmt, f in figures.items():
            runs.append({"seed": seed, "format": fmt, "seconds_all_formats": seconds, **f})
            print(json.dumps(runs[-1]), flush=True)
    totals = {k: sum(r.get(k, 0) for r in runs) for k in ("inputs", "stored", "quarantined", "crashes")}
    totals["silently_dropped"] = sum(r["silently_dropped"] for r in runs)
    command = "python benchmarks/bench_fuzz_traces.py " + " ".join(sys.argv[1:])
    lines = [
        "# Trace fuzzing",
        "",
        f"`{command}`: mutated inputs (hostile values, dropped/added keys, cut or invalid bytes) in every",
        "format the adapters read, ingested; each input must be stored, quarantined with a reason, or a",
        "counted duplicate.",
        "",
        "| seed | format | inputs | stored | quarantined | duplicates | conflicts | crashes | dropped |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['seed']} | {r['format']} | {r['inputs']:,} | {r.get('stored', 0):,} | "
            f"{r.get('quarantined', 0):,} | {r.get('duplicates', 0):,} | {r.get('conflicts', 0):,} | "
            f"{r['crashes']} | {r['silently_dropped']} |"
        )
    lines += [
        "",
        f"Totals: {totals['inputs']:,} inputs, {totals['crashes']} crashes, "
        f"{totals['silently_dropped']} silently dropped.",
        "",
    ]
    harness.write_results(
        RESULTS / "fuzz-traces", {"command": command, "totals": totals, "runs": runs}, "\n".join(lines)
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
