"""One evolution round at 1M–10M SIMULATED traces on a generated library (issue 14's round bars).

    # 1. a store with the library's cold-start version and a simulated window (reused when present)
    .venv/bin/python benchmarks/bench_round.py prepare --work WORK --library LIB [--parent-store STORE]
                                                       [--traces 1000000] [--replicate 10]
    # 2. one round over the window, in a child process (time by stage, peak RSS), committed or not
    .venv/bin/python benchmarks/bench_round.py run --work WORK --window sim-1000000 [--no-l3]
                                                   [--out benchmarks/results/round.json]

`prepare` simulates `--traces` traces (`segos_pipeline.evaluation.simulate`, SIMULATED, never real) against
the cold-start version and writes them into the store as the window's Parquet parts (100k traces each;
what ingest writes; ingest itself is measured by bench_ingest.py and excluded from the round's bar).
`--replicate K` also writes a window of K copies of that window whose task and trace ids carry a copy
prefix (so every copy is a distinct set of tasks): simulating 10M traces one by one takes hours here, and
the round's cost depends on volume and tasks, which the copies give. The results say which windows are
copies.

`run` evolves the window with the local engine in a child process (`evolve`, as `segos evolve` does:
parent load, per-partition evidence, L1, L2, L3, commit) and records the wall time, the manifest's
stage timings and counters, and the child's peak RSS (getrusage of the child).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
PART_ROWS = 100_000


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _link_tree(src: Path, dst: Path) -> None:
    """A copy of a store's versions and caches by hard links (their files are never written again)."""
    for sub in ("versions", "cache"):
        if (src / sub).is_dir() and not (dst / sub).exists():
            subprocess.run(["cp", "-al", str(src / sub), str(dst / sub)], check=True)


def write_window(store_root: Path, window: str, table: pl.DataFrame) -> list[Path]:
    from segos_pipeline.evolution.ingest import TraceStore

    folder = TraceStore(store_root).window_dir(window) / "parts"
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, start in enumerate(range(0, table.height, PART_ROWS)):
        path = folder / f"{k:05d}.parquet"
        table.slice(start, PART_ROWS).write_parquet(path)
        out.append(path)
    return out


def prepare(args: argparse.Namespace) -> int:
    from segos_pipeline import Retriever, SnapshotStore, build_cold_start
    from segos_pipeline.evaluation.replay import load_queries
    from segos_pipeline.evaluation.simulate import SimulationConfig, simulate
    from segos_pipeline.evolution.ingest import TraceStore
    from segos_pipeline.evolution.traces import trace_frame

    store_root = args.work / "store"
    store_root.mkdir(parents=True, exist_ok=True)
    if args.parent_store:
        _link_tree(args.parent_store, store_root)
    store = SnapshotStore(store_root)
    cold = next((m for m in store.list_versions() if m.get("kind") == "cold_start"), None)
    if cold is None:
        say(f"building the cold-start version of {args.library}")
        build_cold_start(args.library, store)
        cold = next(m for m in store.list_versions() if m.get("kind") == "cold_start")
    info_path = args.work / "windows.json"
    info: dict[str, Any] = json.loads(info_path.read_text()) if info_path.is_file() else {}
    base = f"sim-{args.traces}"
    traces = TraceStore(store)
    if base not in traces.windows():
        parent = store.load(cold["version"])
        tasks = load_queries(args.library / "queries.jsonl").queries
        say(f"simulating {args.traces} traces over {len(tasks)} tasks against {parent.version}")
        t = time.perf_counter()
        records = simulate(Retriever(parent), tasks, SimulationConfig(traces=args.traces, seed=args.seed))
        table = trace_frame(records)
        del records
        write_window(store_root, base, table)
        info[base] = {
            "traces": table.height,
            "tasks": table["task_id"].n_unique(),
            "simulate_s": round(time.perf_counter() - t, 1),
            "parent": cold["version"],
            "how": f"simulated (seed {args.seed}, {len(tasks)} generated tasks)",
        }
        info_path.write_text(json.dumps(info, indent=2))
        say(f"window {base}: {table.height} traces in {info[base]['simulate_s']} s")
    if args.replicate > 1:
        big = f"sim-{args.traces * args.replicate}"
        if big not in traces.windows():
            t = time.perf_counter()
            files = traces.files(base)
            folder = traces.window_dir(big) / "parts"
            folder.mkdir(parents=True, exist_ok=True)
            n = 0
            for k in range(args.replicate):
                prefix = pl.lit(f"r{k:02d}-")
                for i, f in enumerate(files):
                    part = pl.read_parquet(f).with_columns(
                        trace_id=prefix + pl.col("trace_id"), task_id=prefix + pl.col("task_id")
                    )
                    part.write_parquet(folder / f"{k:02d}-{i:05d}.parquet")
                    n += part.height
            info[big] = {
                "traces": n,
                "parent": cold["version"],
                "how": f"{args.replicate} copies of window {base} with task and trace ids prefixed per copy",
                "write_s": round(time.perf_counter() - t, 1),
            }
            info_path.write_text(json.dumps(info, indent=2))
            say(f"window {big}: {n} traces ({info[big]['how']})")
    print(json.dumps(info, indent=2))
    return 0


def child(args: argparse.Namespace) -> int:
    """The measured round (runs in its own process so that its peak RSS is its own)."""
    from segos_pipeline import SnapshotStore
    from segos_pipeline.config import EngineConfig, EvolutionConfig
    from segos_pipeline.evolution.round import evolve

    say(f"round over {args.window}: start")
    store = SnapshotStore(args.work / "store")
    parent = next(m for m in store.list_versions() if m.get("kind") == "cold_start")["version"]
    config = EvolutionConfig(l3_descriptions=not args.no_l3)
    engine = EngineConfig(partitions=args.partitions) if args.partitions else EngineConfig()
    t = time.perf_counter()
    m = evolve(store, args.window, from_version=parent, config=config, engine=engine, progress=say)
    wall = time.perf_counter() - t
    say(f"committed {m['version']}")
    result = {
        "window": args.window,
        "version": m["version"],
        "wall_s": round(wall, 2),
        "timings_s": m.get("timings_s"),
        "engine": m.get("engine"),
        "counters": {k: m["counters"][k] for k in ("traces", "l3") if k in m["counters"]},
        "induced": {r: c.get("induced", 0) for r, c in m["counters"].get("l1", {}).items() if "induced" in c},
        "version_files_bytes": sum(f["bytes"] for f in m["files"].values()),
        "round_files": {k: v["bytes"] for k, v in m["files"].items() if k.endswith(".parquet")},
    }
    if not args.keep:
        shutil.rmtree(store.versions_dir / m["version"])
    print(json.dumps(result))
    return 0


def run(args: argparse.Namespace) -> int:
    cmd = [sys.executable, __file__, "child", "--work", str(args.work), "--window", args.window]
    cmd += ["--no-l3"] if args.no_l3 else []
    cmd += ["--keep"] if args.keep else []
    cmd += ["--partitions", str(args.partitions)] if args.partitions else []
    child = harness.run_child(cmd)
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = round(child.wall_s, 2)
    result["peak_rss_gib"] = round(child.peak_rss_bytes / 2**30, 3)
    info_path = args.work / "windows.json"
    if info_path.is_file():
        result["window_info"] = json.loads(info_path.read_text()).get(args.window)
    result["load_average"] = os.getloadavg()
    result["label"], result["no_l3"] = args.label, args.no_l3
    print(json.dumps(result, indent=2))
    if args.out:
        runs = json.loads(args.out.read_text()) if args.out.is_file() else []
        runs.append({"command": " ".join(sys.argv), **result})
        harness.write_json(args.out, runs)
    return 0


def report(args: argparse.Namespace) -> int:
    """benchmarks/results/round.md from the recorded runs (`--runs`, a JSON list written by `run --out`)."""
    runs = json.loads(args.runs.read_text())
    lines = [
        "# One evolution round at 1M–10M SIMULATED traces on 100k generated skills",
        "",
        "Written by `benchmarks/bench_round.py report`; every row is one `bench_round.py run` (command "
        "below the table). The machine has 2 cores shared with other sessions: the load average at the "
        "end of each run is given, and only rows of the same table run back to back compare.",
        "",
        "| code | window | L3 | wall s (evolve) | read window | select+reconstruct | evidence | L1 | L2 | "
        "L3 | stages total | peak RSS GiB | round traces stored | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        t = r.get("timings_s") or {}
        stored = r.get("round_files", {})
        kept = {k: v for k, v in stored.items() if k in ("traces.parquet", "round.parquet")}
        lines.append(
            f"| {r.get('label', 'this branch')} | {r['window']} | {'off' if r.get('no_l3') else 'on'} | "
            f"{r['wall_s']} | {t.get('read', '-')} | {t.get('select_and_reconstruct')} | "
            f"{t.get('evidence')} | {t.get('l1')} | {t.get('l2')} | {t.get('l3')} | {t.get('total')} | "
            f"{r['peak_rss_gib']} | "
            f"{', '.join(f'{k} {v / 1e6:.1f} MB' for k, v in kept.items())} | "
            f"{r['load_average'][0]:.1f} |"
        )
    lines += ["", "Commands:", ""]
    lines += [f"- `{r['command']}`" for r in runs]
    lines += ["", "Windows:", ""]
    seen = set()
    for r in runs:
        if r["window"] not in seen and r.get("window_info"):
            seen.add(r["window"])
            lines.append(f"- {r['window']}: {json.dumps(r['window_info'])}")
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--library", type=Path, required=True)
    p.add_argument("--parent-store", type=Path)
    p.add_argument("--traces", type=int, default=1_000_000)
    p.add_argument("--replicate", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    for name in ("run", "child"):
        r = sub.add_parser(name)
        r.add_argument("--work", type=Path, required=True)
        r.add_argument("--window", required=True)
        r.add_argument("--no-l3", action="store_true")
        r.add_argument("--keep", action="store_true", help="keep the evolved version in the store")
        r.add_argument("--partitions", type=int)
        r.add_argument("--out", type=Path)
        r.add_argument("--label", default="this branch", help="what code ran (recorded with the run)")
    rep = sub.add_parser("report")
    rep.add_argument("--runs", type=Path, required=True)
    rep.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "round.md")
    args = ap.parse_args()
    return {"prepare": prepare, "run": run, "child": child, "report": report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
