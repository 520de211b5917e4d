"""Evolution rounds on real traces, and the speed of one round on simulated volume.

    .venv/bin/python benchmarks/bench_evolution.py [--shared ../shared/data] [--out benchmarks/results]
                                                   [--skills 10000] [--traces 100000] [--skip-speed]

1. REAL: the SkillsBench dev trials over the whole real library (query = the task's instruction, used =
   skills_loaded, which carries no order): edges induced per type, pairs ζ blocked, and replay of the 44
   dev queries on the evolved version against its parent (deployment protocol: the same tasks).
2. REAL: API-Bank level-3 over the library generated from its APIs (ordered, all-successful plans):
   the same counters, and replay of the requirements (gold = each plan's APIs) on parent vs evolved.
3. SIMULATED (labelled): one round over N simulated traces on a generated library of S skills
   (default 100k traces, 10k skills), timed per stage, for both the default final-attempt selection and
   pooled attempts. The traces come from `segos_pipeline.evaluation.simulate`; their numbers are never
   real ones.
Writes evolution.json and evolution.md.
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

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.config import EvolutionConfig
from segos_pipeline.evaluation.replay import EvalQuery, QueryFile, load_queries, replay
from segos_pipeline.evolution.adapters import iter_records, write_library
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve, evolve_round
from segos_pipeline.evolution.traces import trace_frame

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("hit", "recall", "comp", "mrr", "mean_best_rank")


def _edges_and_blocks(manifest: dict[str, Any]) -> dict[str, Any]:
    l1 = manifest["counters"].get("l1", {})
    return {
        "workflow_induced": l1.get("workflow", {}).get("induced", 0),
        "dependency_induced": l1.get("dependency", {}).get("induced", 0),
        "avoid_induced": l1.get("avoid", {}).get("induced", 0),
        "dependency_pairs_considered": l1.get("dependency", {}).get("pairs_considered", 0),
        "blocked_by_zeta": l1.get("dependency", {}).get("blocked_by_zeta", 0),
        "blocked_missing_io": l1.get("dependency", {}).get("blocked_missing_io", 0),
        "max_overlap_below_zeta": l1.get("dependency", {}).get("max_overlap_below_zeta", 0.0),
        "avoid_blocked_by_invariant": l1.get("avoid", {}).get("blocked_by_invariant", 0),
        "semantic_attenuated": manifest["counters"].get("l2", {}).get("semantic_edges_attenuated", 0),
        "descriptions_committed": manifest["counters"].get("l3", {}).get("committed", 0),
        "traces": manifest["counters"]["traces"],
    }


def _replay_pair(store: SnapshotStore, parent: str, child: str, queries: QueryFile, k: int) -> dict[str, Any]:
    out = {}
    for label, vid in (("parent", parent), ("evolved", child)):
        r = replay(Retriever(store.load(vid)), queries, k=k)
        out[label] = {key: r[key] for key in KEYS}
    return out


def real_skillsbench(shared: Path, k: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(tmp)
        parent = build_cold_start(shared / "skills", store)["version"]
        eval_file = shared / "eval" / "skillsbench-dev.jsonl"
        report = TraceStore(store).ingest(
            iter_records(
                shared / "traces" / "skillsbench-trials" / "dev.jsonl",
                "skillsbench-trials",
                queries=eval_file,
            ),
            window="skillsbench-dev",
        )
        m = evolve(store, "skillsbench-dev")
        return {
            "ingest": {
                "accepted": report.accepted,
                "quarantined": report.quarantined,
                "unknown_skills": report.unknown_skills,
            },
            "round": _edges_and_blocks(m),
            "replay": _replay_pair(store, parent, m["version"], load_queries(eval_file), k),
        }


def real_apibank(shared: Path, k: int) -> dict[str, Any]:
    from segos_pipeline.evolution.adapters import plans

    source = shared / "traces" / "apibank" / "level-3.json"
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "apibank-library"
        summary = write_library(source, "apibank", lib)
        store = SnapshotStore(Path(tmp) / "store")
        parent = build_cold_start(lib, store)["version"]
        report = TraceStore(store).ingest(iter_records(source, "apibank"), window="apibank-l3")
        m = evolve(store, "apibank-l3")
        queries = QueryFile([EvalQuery(p["query"], p["apis"], p["task_id"]) for p in plans(source)], [])
        return {
            "library": {k_: v for k_, v in summary.items() if isinstance(v, int | float | str)},
            "ingest": {"accepted": report.accepted, "quarantined": report.quarantined},
            "round": _edges_and_blocks(m),
            "replay": _replay_pair(store, parent, m["version"], queries, k),
        }


def simulated_speed(n_skills: int, n_traces: int, out_dir: Path) -> dict[str, Any]:
    from segos_pipeline.evaluation.simulate import SimulationConfig, simulate
    from segos_pipeline.evaluation.synthetic import generate_library, generate_queries

    lib = out_dir / f"synthetic-{n_skills}"
    if not (lib / "queries.jsonl").is_file():
        generate_library(lib, n_skills, seed=0)
        queries = generate_queries(lib, max(200, n_skills // 10), seed=0)
        (lib / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(tmp)
        t = time.perf_counter()
        build_cold_start(lib, store)
        build_s = time.perf_counter() - t
        parent = store.load()
        tasks = load_queries(lib / "queries.jsonl").queries
        t = time.perf_counter()
        records = simulate(Retriever(parent), tasks, SimulationConfig(traces=n_traces, seed=0))
        frame = trace_frame(records)
        sim_s = time.perf_counter() - t
        rows = {}
        for label, cfg in {
            "final attempt per (task, agent)": EvolutionConfig(),
            "pooled attempts": EvolutionConfig(pool_attempts=True),
        }.items():
            t = time.perf_counter()
            result = evolve_round(parent, frame, cfg, RetrievalConfig())
            total = time.perf_counter() - t
            rows[label] = {
                "seconds": round(total, 2),
                "stages_s": {k_: round(v, 2) for k_, v in result.timings.items()},
                "selected": result.counters["traces"]["selected"],
                "induced": {
                    r: c.get("induced", 0) for r, c in result.counters.get("l1", {}).items() if "induced" in c
                },
                "l3_committed": result.counters.get("l3", {}).get("committed", 0),
            }
    return {
        "label": "SIMULATED",
        "skills": n_skills,
        "traces": n_traces,
        "build_s": round(build_s, 2),
        "simulate_s": round(sim_s, 2),
        "rounds": rows,
    }


def _markdown(result: dict[str, Any]) -> str:
    lines = ["# Evolution rounds", ""]
    for name in ("skillsbench_dev_trials", "apibank_level3"):
        part = result.get(name)
        if not part:
            continue
        r = part["round"]
        lines += [
            f"## {name} (REAL traces)",
            "",
            "| workflow | dependency | avoid | dep. pairs considered | blocked by ζ | blocked: no I/O | "
            "max overlap < ζ | semantic attenuated | descriptions |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {r['workflow_induced']} | {r['dependency_induced']} | {r['avoid_induced']} | "
            f"{r['dependency_pairs_considered']} | {r['blocked_by_zeta']} | {r['blocked_missing_io']} | "
            f"{r['max_overlap_below_zeta']} | {r['semantic_attenuated']} | {r['descriptions_committed']} |",
            "",
            f"traces: {json.dumps(r['traces'])}",
            "",
            "| version | hit@5 | recall@5 | COMP@5 | MRR | mean best rank |",
            "|---|---|---|---|---|---|",
        ]
        for label, m in part["replay"].items():
            mbr = "-" if m["mean_best_rank"] is None else f"{m['mean_best_rank']:.2f}"
            lines.append(
                f"| {label} | {m['hit']:.3f} | {m['recall']:.3f} | {m['comp']:.3f} | {m['mrr']:.3f} | {mbr} |"
            )
        lines.append("")
    sim = result.get("simulated_speed")
    if sim:
        lines += [
            f"## One round, SIMULATED traces: {sim['traces']} traces on {sim['skills']} generated skills",
            "",
            f"build {sim['build_s']} s, simulation {sim['simulate_s']} s (bar: round ≤ 60 s)",
            "",
            "| selection | traces kept | round s | stages s | induced | L3 committed |",
            "|---|---|---|---|---|---|",
        ]
        for label, r in sim["rounds"].items():
            lines.append(
                f"| {label} | {r['selected']} | {r['seconds']} | {json.dumps(r['stages_s'])} | "
                f"{json.dumps(r['induced'])} | {r['l3_committed']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--skills", type=int, default=10_000)
    ap.add_argument("--traces", type=int, default=100_000)
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    result: dict[str, Any] = {}
    if (args.shared / "skills").is_dir():
        print("real SkillsBench dev trials ...", file=sys.stderr)
        result["skillsbench_dev_trials"] = real_skillsbench(args.shared, args.k)
        print("real API-Bank level-3 ...", file=sys.stderr)
        result["apibank_level3"] = real_apibank(args.shared, args.k)
    else:
        print(f"real data not found at {args.shared}: real-trace sections skipped", file=sys.stderr)
    if not args.skip_speed:
        print(f"SIMULATED round: {args.traces} traces on {args.skills} skills ...", file=sys.stderr)
        work = ROOT / "benchmarks" / "out"
        work.mkdir(parents=True, exist_ok=True)
        result["simulated_speed"] = simulated_speed(args.skills, args.traces, work)
    suffix = "" if not args.skip_speed else "-real"
    md = _markdown(result)
    harness.write_results(args.out / f"evolution{suffix}", result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
