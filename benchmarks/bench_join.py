#!/usr/bin/env python
"""A/B of the similarity join (`graph/semantic_edges.topk_jaccard`) on a stored version's signature.

    .venv/bin/python benchmarks/bench_join.py STORE [--baseline-src FOLDER] [--workers 2]
        [--order measured,baseline,measured] [--out FILE.json]

`--baseline-src` names a folder holding another checkout's `segos_pipeline` package (e.g. the folder
`benchmarks/harness.py baseline COMMIT` prints). Every run is a fresh subprocess (the baseline's
with PYTHONPATH=FOLDER) that loads the latest version's signature, times `topk_jaccard` alone (wall, and
CPU of the process plus its pool workers) with the default graph config, and saves the edges; the parent
prints every run and whether all runs' (src, dst, weight) arrays and statistics are identical. Runs in the
order given, interleaved, so an A/B on a shared machine sees about the same load.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parent.parent


def run_join(store: str, workers: int, out: Path) -> dict[str, Any]:
    """One timed join in this process (the subprocess side)."""
    import numpy as np

    import segos_pipeline
    from segos_pipeline import SnapshotStore
    from segos_pipeline.config import GraphConfig
    from segos_pipeline.graph.semantic_edges import topk_jaccard

    s = SnapshotStore(store)
    signature = s.load(s.latest()).signature().matrix
    (src, dst, weight, stats), wall, cpu = harness.timed(
        lambda: topk_jaccard(signature, GraphConfig(), workers=workers)
    )
    np.savez(out, src=src, dst=dst, weight=weight)
    return {
        "code": str(Path(segos_pipeline.__file__).parent.parent.name),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "stats": stats.as_dict(),
    }


def _spawn(name: str, store: str, workers: int, out: Path, baseline: Path | None) -> dict[str, Any]:
    env = {"PYTHONPATH": str(baseline)} if name == "baseline" and baseline is not None else None
    cmd = [sys.executable, __file__, "--run", store, "--workers", str(workers), "--npz", str(out)]
    done = harness.run_child(cmd, env=env, cwd=ROOT, capture_stderr=True)
    return {"run": name, **json.loads(done.stdout.strip().splitlines()[-1])}


def _identical(files: list[Path]) -> bool:
    import numpy as np

    loaded = [np.load(f) for f in files]
    first = loaded[0]
    return all(
        np.array_equal(first[k], other[k]) and first[k].dtype == other[k].dtype
        for other in loaded[1:]
        for k in ("src", "dst", "weight")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", help="a store whose latest version has a signature (or --run's store)")
    ap.add_argument("--baseline-src", type=Path, default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--order", default="measured,baseline,measured")
    ap.add_argument("--out", type=Path, default=None, help="also write the runs as JSON here")
    ap.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--npz", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        print(json.dumps(run_join(args.store, args.workers, args.npz)))
        return 0
    order = [o.strip() for o in args.order.split(",") if o.strip()]
    if "baseline" in order and args.baseline_src is None:
        ap.error("--order names a baseline run: give --baseline-src")
    runs, files = [], []
    with tempfile.TemporaryDirectory(prefix="segos-bench-join-") as tmp:
        for i, name in enumerate(order):
            out = Path(tmp) / f"{i}-{name}.npz"
            run = _spawn(name, args.store, args.workers, out, args.baseline_src)
            print(json.dumps(run), flush=True)
            runs.append(run)
            files.append(out)
        same = _identical(files) and all(r["stats"] == runs[0]["stats"] for r in runs)
    print(f"all runs identical (src, dst, weight, stats): {same}")
    if args.out is not None:
        harness.write_json(args.out, {"workers": args.workers, "runs": runs, "identical": same})
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
