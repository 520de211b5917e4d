"""Fuzz benchmark: hostile and good skill packages of every shape through the parser, in chunks.

    .venv/bin/python benchmarks/fuzz_packages.py [--count 100000] [--chunk 10000] [--seed 0]
        [--build-chunks 1]

Each chunk is one library written by tests/hostile_packages.py and parsed in a fresh child process with a
time limit, so a crash (exception, dying interpreter) or a hang is counted instead of ending the run. The
first --build-chunks chunks also go through the whole cold-start build (tokens, graph, snapshot). Figures
(items tried, crashes, silently dropped items, good packages lost) go to
benchmarks/results/fuzz-packages.{md,json}.
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHUNK_TIMEOUT_S = 1_800


def run_chunk(n: int, seed: int, build: bool) -> dict:
    """In the child: write one library, parse it (and build it), check every package."""
    sys.path.insert(0, str(ROOT))
    from segos_pipeline.graph.parsing import parse_library
    from tests.hostile_packages import check, write_fuzz_library

    with tempfile.TemporaryDirectory(prefix="segos-fuzz-") as tmp:
        lib = Path(tmp) / "lib"
        t = time.perf_counter()
        cases = write_fuzz_library(lib, n, seed)
        written = time.perf_counter() - t
        t = time.perf_counter()
        parsed = parse_library(lib)
        parse_s = time.perf_counter() - t
        violations = check(parsed, cases)
        build_s = None
        if build:
            from segos_pipeline import SnapshotStore, build_cold_start

            t = time.perf_counter()
            build_cold_start(lib, SnapshotStore(Path(tmp) / "store"))
            build_s = time.perf_counter() - t
    return {
        "items": n,
        "kinds": dict(collections.Counter(case.kind for case in cases)),
        "nodes": parsed.nodes.height,
        "report_rows": parsed.report.height,
        "violations": {k: len(v) for k, v in violations.items()},
        "examples": {k: v[:5] for k, v in violations.items() if v},
        "write_s": round(written, 2),
        "parse_s": round(parse_s, 2),
        "build_s": None if build_s is None else round(build_s, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--build-chunks", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "fuzz-packages")
    args = ap.parse_args()
    command = "python benchmarks/fuzz_packages.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    chunks, crashes = [], []
    t0 = time.perf_counter()
    for i, start in enumerate(range(0, args.count, args.chunk)):
        n = min(args.chunk, args.count - start)
        spec = json.dumps({"n": n, "seed": args.seed + i, "build": i < args.build_chunks})
        code = (
            f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import fuzz_packages as f; "
        )
        code += f"print(json.dumps(f.run_chunk(**json.loads({spec!r}))))"
        try:
            done = harness.run_child(
                [sys.executable, "-c", code],
                cwd=ROOT,
                capture_stderr=True,
                check=False,
                timeout=CHUNK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            crashes.append({"chunk": i, "items": n, "error": f"timed out after {CHUNK_TIMEOUT_S} s"})
            continue
        if done.returncode != 0:
            crashes.append({"chunk": i, "items": n, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        chunk = json.loads(done.stdout.strip().splitlines()[-1])
        chunks.append(chunk)
        print(
            f"chunk {i}: {json.dumps({k: chunk[k] for k in ('items', 'violations', 'parse_s', 'build_s')})}"
        )
    kinds: collections.Counter[str] = collections.Counter()
    violations: collections.Counter[str] = collections.Counter()
    for chunk in chunks:
        kinds.update(chunk["kinds"])
        violations.update(chunk["violations"])
    parsed_items = sum(c["items"] for c in chunks)
    parse_s = sum(c["parse_s"] for c in chunks)
    result = {
        "command": command,
        "items_tried": args.count,
        "items_parsed": parsed_items,
        "crashes": len(crashes),
        "crashed_chunks": crashes,
        "silently_dropped": violations["dropped"],
        "good_lost_or_changed": violations["good_lost"],
        "readable_but_skipped": violations["node_skipped"],
        "unreadable_but_a_node": violations["skipped_as_node"],
        "kinds": dict(sorted(kinds.items())),
        "chunks": chunks,
        "parse_us_per_package": round(parse_s / parsed_items * 1e6) if parsed_items else None,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    harness.write_results(args.out, result, _markdown(result))
    print(json.dumps({k: v for k, v in result.items() if k not in ("chunks", "kinds")}, indent=2))


def _markdown(r: dict) -> str:
    built = ", ".join(f"chunk {i} in {c['build_s']} s" for i, c in enumerate(r["chunks"]) if c["build_s"])
    built = built or "none"
    lines = [
        "# Fuzz: hostile skill packages",
        "",
        f"Command: `{r['command']}` ({r['seconds']} s wall, shared 2-core machine).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| packages tried | {r['items_tried']} |",
        f"| packages parsed (chunks that did not crash) | {r['items_parsed']} |",
        f"| crashes (chunks ending in an exception, a dead interpreter or a timeout) | {r['crashes']} |",
        f"| silently dropped (neither a node nor a report row) | {r['silently_dropped']} |",
        f"| good packages lost or changed | {r['good_lost_or_changed']} |",
        f"| readable packages skipped | {r['readable_but_skipped']} |",
        f"| unreadable packages that became nodes | {r['unreadable_but_a_node']} |",
        f"| parse time per package (whole chunk, all cores) | {r['parse_us_per_package']} µs |",
        "",
        f"Chunks also built end to end (`build_cold_start`: tokens, graph, snapshot): {built}. Timings are",
        "from a machine shared by many processes; they bound nothing, the counts above are the result.",
        "",
        "Packages by shape (tests/hostile_packages.py):",
        "",
        "| shape | packages |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in r["kinds"].items()],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
