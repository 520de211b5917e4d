#!/usr/bin/env python
"""Query latency before and after an evolution round, and against the code it replaced (A/B, one run).

    .venv/bin/python benchmarks/bench_latency.py [--skills 100000] [--traces 1000000] [--baseline main]

What it measures (each query phase in a fresh subprocess pinned to CPU 0, OMP/OpenBLAS/Polars threads 1,
every query warmed once, then `--repeat` passes):
* `real`: the 344-skill library of ../shared/data/skills, queried with the 44 SkillsBench dev texts;
* `cold`: a generated library of `--skills` skills (segos_pipeline.evaluation.synthetic), cold start;
* `evolved`: its child after one evolution round over `--traces` SIMULATED traces
  (segos_pipeline.evaluation.simulate over the library's generated tasks; the round runs from the
  in-memory trace table, as benchmarks/bench_evolution.py does), queried with the same queries;
* `witnessed cold` / `witnessed evolved`: MetaTool's 199 tools (../shared/data/eval/metatool-dev), cold and
  after one round over 80 SIMULATED requests per tool recombined from its dev requests, so every tool's
  experience is at its bound: what experience costs a query where the cold start is cheapest (the shape of
  a completeness benchmark's round over 16,893 training requests on 464 tools), queried with the dev
  requests.
Each case runs under two code trees in the same run: this checkout (`current`) and `--baseline` (a git
ref, extracted with `git archive` into the work folder and put first on the worker's PYTHONPATH).

Bars: after the round, `ranked_ids` p50 ≤ 1.5 × the cold-start p50 (current code), on the generated
library and on the witnessed one; cold-start p50 of the generated library well under 20 ms; the real
library's p50 ≤ 2 ms. The generated library, its stores and
the evolved version are kept in `--work` and reused while their parameters are unchanged.

Writes `<out>/latency.json` and `<out>/latency.md`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parent.parent

REAL_LIBRARY = ROOT.parent / "shared" / "data" / "skills"
REAL_QUERIES = ROOT.parent / "shared" / "data" / "eval" / "skillsbench-dev.jsonl"
METATOOL = ROOT.parent / "shared" / "data" / "eval" / "metatool-dev"
# Requests per tool in the witnessed case: more than the per-skill experience bound (64), so every tool's
# experience is full, as after a large training window (a completeness benchmark's 16,893 training
# requests over 464 tools).
WITNESSED_PER_TOOL = 80
REAL_P50_MS = 2.0
SYN_P50_MS = 20.0
EVOLVED_RATIO = 1.5
WINDOW = "bench-latency"


say = functools.partial(harness.say, tag="latency")


# ========================================================================================== worker
# `bench_latency.py _worker ARGS_JSON RESULT_PATH`: one query phase, in a fresh pinned interpreter.


def _texts(args: dict[str, Any]) -> list[str]:
    lines = Path(args["queries"]).read_text().splitlines()
    texts = [q.get("instruction") or q.get("query") or "" for q in map(json.loads, filter(None, lines))]
    return texts[: args["limit"]]


def ratio_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Evolved against cold `ranked_ids` p50 with the two versions interleaved query by query in this one
    process (minimum of `repeat` passes a query): timed one after the other, each in its own process, the
    two versions of one run met different loads (docs/benchmarks.md, "Latency")."""
    harness.pin_to_core(0)
    from segos_pipeline import Retriever, SnapshotStore

    store = SnapshotStore(args["store"])
    rankers = [Retriever(store.load(v)) for v in args["versions"]]
    ms = harness.interleaved_ms(rankers, _texts(args), args["repeat"])
    cold, evolved = (harness.percentile([m[i] for m in ms], 50) for i in (0, 1))
    return {"cold_p50": round(cold, 4), "evolved_p50": round(evolved, 4), "ratio": round(evolved / cold, 3)}


def worker(args: dict[str, Any]) -> dict[str, Any]:
    harness.pin_to_core(0)
    import segos_pipeline
    from segos_pipeline import Retriever, SnapshotStore

    texts = _texts(args)
    snap = SnapshotStore(args["store"]).load(args["version"])
    t0 = time.perf_counter()
    retriever = Retriever(snap)
    init_s = time.perf_counter() - t0
    for q in texts:  # warm: stemmer caches, hydration cards
        retriever.retrieve(q)
    clock = time.perf_counter_ns
    timings: dict[str, list[float]] = {"ranked_ids": [], "retrieve": []}
    bundles = []
    for _ in range(args["repeat"]):
        for name, call in (
            ("ranked_ids", lambda q: retriever.ranked_ids(q, 5)),
            ("retrieve", retriever.retrieve),
        ):
            for q in texts:
                a = clock()
                call(q)
                timings[name].append((clock() - a) / 1e6)
    bundles = [retriever.ranked_ids(q, 5) for q in texts]
    out: dict[str, Any] = {
        "code": str(Path(segos_pipeline.__file__).resolve().parent.parent),
        "queries": len(texts),
        "repeat": args["repeat"],
        "retriever_init_s": round(init_s, 3),
        "ranked_ids_ms": harness.percentiles(timings["ranked_ids"]),
        "retrieve_ms": harness.percentiles(timings["retrieve"]),
        "bundles": bundles,
    }
    if hasattr(retriever, "push"):  # current code: where a query's time goes
        out["stages_ms"] = _stages(retriever, texts)
    return out


def _stages(retriever: Any, texts: list[str]) -> dict[str, Any]:
    """p50 of lexical evidence and of PPR per query, and the edges the local push read."""
    import numpy as np

    clock = time.perf_counter_ns
    lexical, ppr, pushed, work = [], [], 0, []
    for q in texts:
        a = clock()
        retriever.lexical.evidence(q)
        lexical.append((clock() - a) / 1e6)
        ranking = retriever.rank(q)
        seeds = ranking.seeds
        if not len(seeds):
            continue
        mu_m = [ranking.score_of(s) - ranking.graph_of(s) for s in seeds.tolist()]  # μ·m at the seeds
        weights = np.maximum(np.asarray(mu_m), 1e-12)
        a = clock()
        retriever.graph_mass(seeds, weights)
        ppr.append((clock() - a) / 1e6)
        pushed += 1
        work.append(retriever.push(seeds, weights).work)
    return {
        "lexical_evidence_p50": round(harness.percentile(lexical, 50), 4),
        "ppr_p50": round(harness.percentile(ppr, 50), 4) if ppr else None,
        "queries_by_local_push": pushed,
        "push_edges_read_max": max(work) if work else 0,
    }


# ========================================================================================== parent


def spawn(
    args: dict[str, Any], pythonpath: Path | None, result: Path, mode: str = "_worker"
) -> dict[str, Any]:
    result.unlink(missing_ok=True)
    env = {**harness.ONE_CORE_ENV, **({"PYTHONPATH": str(pythonpath)} if pythonpath is not None else {})}
    busy = harness.busy_cpus()
    cmd = [sys.executable, str(Path(__file__).resolve()), mode, json.dumps(args), str(result)]
    harness.run_child(cmd, env=env, cwd=pythonpath or ROOT)
    out = json.loads(result.read_text())
    out["busy_cpus_before"] = busy
    return out


def _largest_component(snapshot: Any) -> int:
    import numpy as np
    from scipy.sparse.csgraph import connected_components

    _, labels = connected_components(snapshot.transition, directed=True, connection="weak")
    return int(np.bincount(labels).max())


def prepare_real(work: Path) -> dict[str, Any] | None:
    if not REAL_LIBRARY.is_dir():
        say(f"real library not found at {REAL_LIBRARY}: the real case is skipped")
        return None
    from segos_pipeline import SnapshotStore, build_cold_start
    from segos_pipeline.retrieval.ranker import warm_caches

    store = SnapshotStore(work / "latency-real-store")
    if not store.list_versions():
        build_cold_start(REAL_LIBRARY, store)
    snap = store.load()
    warm_caches(snap)
    return {
        "store": str(store.root),
        "version": snap.version,
        "queries": str(REAL_QUERIES),
        "skills": snap.nodes.height,
    }


def prepare_witnessed(work: Path) -> dict[str, Any] | None:
    """MetaTool's 199 tools, cold and after one round whose window gives every tool a full experience
    (80 requests each, recombined from the tool's dev requests: real words in new orders and mixes), so
    that the query cost of experience is measured at its bound on a small library, where the cold start
    is cheapest."""
    if not (METATOOL / "library").is_dir():
        say(f"MetaTool dev data not found at {METATOOL}: the witnessed case is skipped")
        return None
    import random

    from segos_pipeline import SnapshotStore, build_cold_start
    from segos_pipeline.evolution.ingest import TraceStore
    from segos_pipeline.evolution.round import evolve
    from segos_pipeline.retrieval.ranker import warm_caches

    store = SnapshotStore(work / "latency-witnessed-store")
    manifests = store.list_versions()
    if len(manifests) < 2:
        shutil.rmtree(store.root, ignore_errors=True)
        store = SnapshotStore(store.root)
        build_cold_start(METATOOL / "library", store)
        queries = [json.loads(line) for line in (METATOOL / "dev.jsonl").read_text().splitlines() if line]
        by_tool: dict[str, list[list[str]]] = {}
        for q in queries:
            by_tool.setdefault(q["gold"][0], []).append(q["query"].split())
        words = [w for q in queries for w in q["query"].split()]
        rng = random.Random(7)
        lines = []
        for tool, requests in sorted(by_tool.items()):
            for i in range(WITNESSED_PER_TOOL):
                base = rng.choice(requests)
                text = rng.sample(base, rng.randint(max(1, len(base) // 2), len(base)))
                text += rng.sample(words, rng.randint(0, 4))
                trace = {
                    "trace_id": f"witnessed-{tool}-{i}",
                    "task_id": f"witnessed-{tool}-{i}",
                    "timestamp": "2026-11-27T02:00:00Z",
                    "queries": [{"text": " ".join(text)}],
                    "used": [tool],
                    "reward": 1.0,
                    "simulated": True,
                }
                lines.append(json.dumps(trace))
        path = work / "latency-witnessed.jsonl"
        path.write_text("\n".join(lines) + "\n")
        TraceStore(store).ingest_path(path, window="witnessed")
        evolve(store, "witnessed")
        manifests = store.list_versions()
    cold, evolved = store.load(manifests[0]["version"]), store.load(manifests[-1]["version"])
    for snap in (cold, evolved):
        warm_caches(snap)
    return {
        "store": str(store.root),
        "cold": cold.version,
        "evolved": evolved.version,
        "queries": str(METATOOL / "dev.jsonl"),
        "skills": cold.nodes.height,
        "witnesses": evolved.manifest.get("counters", {}).get("experience", {}).get("rows_after"),
    }


def prepare_synthetic(
    work: Path, n: int, seed: int, n_tasks: int, n_traces: int, l3: bool, evolve: bool = True
) -> dict[str, Any]:
    """The cold-start version of the generated library and its child after one simulated round (reused
    from `work` when present with the same parameters)."""
    from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
    from segos_pipeline.config import EvolutionConfig
    from segos_pipeline.evaluation.replay import load_queries
    from segos_pipeline.evaluation.simulate import SimulationConfig, simulate
    from segos_pipeline.evolution.round import commit_round, evolve_round
    from segos_pipeline.evolution.traces import trace_frame
    from segos_pipeline.retrieval.ranker import warm_caches

    lib = harness.synthetic_library(work, n, seed, n_tasks)
    store = SnapshotStore(work / f"latency-store-{n}-s{seed}")
    info: dict[str, Any] = {
        "library": str(lib),
        "store": str(store.root),
        "queries": str(lib / "queries.jsonl"),
    }
    manifests = store.list_versions()
    cold_m = next((m for m in manifests if m.get("kind") == "cold_start"), None)
    if cold_m is None or cold_m["library"]["skills"] != n:
        shutil.rmtree(store.root, ignore_errors=True)
        store = SnapshotStore(store.root)
        say(f"building the cold-start version of {n} generated skills")
        t = time.perf_counter()
        build_cold_start(lib, store)
        info["build_s"] = round(time.perf_counter() - t, 1)
        manifests = store.list_versions()
        cold_m = manifests[0]
    cold = store.load(cold_m["version"])
    warm_caches(cold)
    params = {"traces": n_traces, "seed": seed, "tasks": n_tasks, "l3": l3}
    evolution = EvolutionConfig(l3_descriptions=l3)
    evolved_m = next((m for m in manifests if m.get("bench_latency") == params), None)
    if evolved_m is None and not evolve:
        info.update(
            cold=cold.version,
            skills=cold.nodes.height,
            edges={"cold": cold.edges.height},
            largest_component={"cold": _largest_component(cold)},
        )
        return info
    if evolved_m is not None:
        evolved = store.load(evolved_m["version"])
    else:
        tasks = load_queries(lib / "queries.jsonl").queries
        say(f"simulating {n_traces} traces over {len(tasks)} tasks against {cold.version}")
        t = time.perf_counter()
        records = simulate(Retriever(cold), tasks, SimulationConfig(traces=n_traces, seed=seed))
        traces_table = trace_frame(records)
        del records
        simulate_s = time.perf_counter() - t
        say(f"simulated in {simulate_s:.0f}s; one evolution round from the in-memory trace table")
        t = time.perf_counter()
        state = evolve_round(cold, traces_table, evolution, RetrievalConfig(), progress=say)
        manifest = commit_round(
            store,
            state,
            WINDOW,
            evolution,
            RetrievalConfig(),
            extra={"bench_latency": params, "bench_latency_s": {"simulate": round(simulate_s, 1)}},
        )
        say(f"round committed as {manifest['version']} in {time.perf_counter() - t:.0f}s")
        evolved = store.load(manifest["version"])
    warm_caches(evolved)
    counters = evolved.manifest.get("counters", {})
    info.update(
        cold=cold.version,
        evolved=evolved.version,
        skills=cold.nodes.height,
        traces=n_traces,
        simulate_s=evolved.manifest.get("bench_latency_s", {}).get("simulate"),
        round_s=evolved.manifest.get("timings_s", {}).get("total"),
        induced={r: c.get("induced", 0) for r, c in counters.get("l1", {}).items() if "induced" in c},
        traces_selected=counters.get("traces", {}).get("selected"),
        edges={"cold": cold.edges.height, "evolved": evolved.edges.height},
        largest_component={"cold": _largest_component(cold), "evolved": _largest_component(evolved)},
    )
    return info


def measure(
    cases: dict[str, dict[str, Any]], trees: dict[str, Path | None], args: argparse.Namespace
) -> dict:
    """Every (case, code) pair, codes alternating within a case so both see the same machine."""
    results: dict[str, dict[str, Any]] = {}
    for case, info in cases.items():
        real = case == "real"
        for code, path in trees.items():
            say(f"{case} ({info['skills']} skills), {code} code: querying on CPU 0")
            job = {
                "store": info["store"],
                "version": info["version"],
                "queries": info["queries"],
                "limit": args.real_queries if real else args.queries,
                "repeat": args.real_repeat if real else args.repeat,
            }
            res = spawn(job, path, args.work / f"latency-{case}-{code}.json")
            results.setdefault(case, {})[code] = res
            say(f"  ranked_ids p50 {res['ranked_ids_ms']['p50']} ms, p95 {res['ranked_ids_ms']['p95']} ms")
    return results


def interleaved_ratios(cases: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Evolved against cold p50, both versions interleaved in one process (`ratio_worker`), current code."""
    ratios = {}
    for name, cold, evolved in (
        ("witnessed", "witnessed cold", "witnessed evolved"),
        ("generated", "cold", "evolved"),
    ):
        if cold in cases and evolved in cases:
            info = cases[cold]
            say(f"{name}: cold and evolved interleaved in one process on CPU 0")
            job = {
                "store": info["store"],
                "versions": [info["version"], cases[evolved]["version"]],
                "queries": info["queries"],
                "limit": args.queries,
                "repeat": args.repeat,
            }
            ratios[name] = spawn(job, None, args.work / f"latency-ratio-{name}.json", "_ratio")
            say(f"  evolved/cold p50 {ratios[name]['ratio']}×")
    return ratios


def bars(results: dict[str, Any], ratios: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []

    def row(what: str, value: float | None, bar: float | None, unit: str = "ms") -> None:
        ok = None if value is None or bar is None else value <= bar
        rows.append({"metric": what, "value": value, "bar": bar, "unit": unit, "pass": ok})

    cur = {case: r["current"] for case, r in results.items()}
    if "real" in cur:
        row(
            "real (344 skills): ranked_ids p50, current code",
            cur["real"]["ranked_ids_ms"]["p50"],
            REAL_P50_MS,
        )
        row("real (344 skills): retrieve p50, current code", cur["real"]["retrieve_ms"]["p50"], REAL_P50_MS)
    if "cold" in cur:
        row(
            "generated, cold start: ranked_ids p50, current code",
            cur["cold"]["ranked_ids_ms"]["p50"],
            SYN_P50_MS,
        )
    if "witnessed" in ratios:
        row(
            "MetaTool (199 tools), full experience / cold start, ranked_ids p50 interleaved, current code",
            ratios["witnessed"]["ratio"],
            EVOLVED_RATIO,
            "×",
        )
    if "generated" in ratios:
        row(
            "generated, after the round / cold start, ranked_ids p50 interleaved, current code",
            ratios["generated"]["ratio"],
            EVOLVED_RATIO,
            "×",
        )
    return rows


def markdown(result: dict[str, Any]) -> str:
    meta, results, syn = result["meta"], result["results"], result.get("synthetic", {})
    lines = [
        "# Query latency: cold start, after an evolution round, and against the previous code",
        "",
        f"Generated {meta['date']} by `{meta['command']}` on {meta['cpus']} CPU(s) ({meta['processor']}), "
        f"{meta['platform']}; code at commit {meta['code'].get('commit', '?')}"
        + (f" with uncommitted {', '.join(meta['code']['dirty'])}" if meta["code"].get("dirty") else "")
        + f"; baseline `{meta['baseline']}` = {meta['baseline_commit']}.",
        "Every query phase runs in a fresh process pinned to CPU 0 with one thread, after one warm pass. "
        "The machine is shared: compare rows of the same run, not runs. The evolved/cold bars time the "
        "two versions interleaved query by query in one process instead (minimum of the passes a query), "
        "so that both meet the same load.",
        "",
        "| bar | measured | bar | status |",
        "|---|---:|---:|:---:|",
    ]
    for r in result["bars"]:
        status = "—" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        lines.append(f"| {r['metric']} | {r['value']} {r['unit']} | ≤ {r['bar']} {r['unit']} | {status} |")
    lines += [
        "",
        "| case | skills | code | ranked_ids p50 | p95 | retrieve p50 | p95 | lexical p50 | PPR p50 | "
        "queries by local push | bundles equal to baseline |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, by_code in results.items():
        base = by_code.get("baseline", {}).get("bundles")
        for code, r in by_code.items():
            st = r.get("stages_ms", {})
            same = (
                "—"
                if code == "baseline" or base is None
                else f"{sum(a == b for a, b in zip(base, r['bundles'], strict=True))}/{len(base)}"
            )
            lines.append(
                f"| {case} | {result['skills'][case]} | {code} | {r['ranked_ids_ms']['p50']} | "
                f"{r['ranked_ids_ms']['p95']} | {r['retrieve_ms']['p50']} | {r['retrieve_ms']['p95']} | "
                f"{st.get('lexical_evidence_p50', '—')} | {st.get('ppr_p50', '—')} | "
                f"{st.get('queries_by_local_push', '—')} | {same} |"
            )
    if syn and "evolved" in syn:
        lines += [
            "",
            f"Generated library: {syn['skills']} skills; one evolution round over {syn['traces']} "
            f"SIMULATED traces ({syn.get('traces_selected')} kept by attempt selection; simulation "
            f"{syn.get('simulate_s')} s, round "
            f"{syn.get('round_s')} s when they were made), induced {json.dumps(syn.get('induced'))}; edges "
            f"{syn['edges']['cold']} → {syn['edges']['evolved']}; largest weakly connected component "
            f"{syn['largest_component']['cold']} → {syn['largest_component']['evolved']} skills.",
        ]
    lines += [
        "",
        "Queries: the real case uses the SkillsBench dev texts; the witnessed cases the first MetaTool dev "
        "requests; the generated cases the library's first "
        f"{meta['queries']} generated queries (the simulated traces came from the library's tasks). "
        "`lexical p50` and `PPR p50` time `LexicalIndex.evidence` and `Retriever.graph_mass` alone "
        "(current code). Numbers are milliseconds.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("_worker", "_ratio"):
        run = worker if argv[0] == "_worker" else ratio_worker
        Path(argv[2]).write_text(json.dumps(run(json.loads(argv[1]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skills", type=int, default=100_000)
    ap.add_argument("--traces", type=int, default=1_000_000)
    ap.add_argument(
        "--tasks", type=int, default=10_000, help="generated tasks (queries) the traces come from"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=200, help="generated queries timed")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--real-queries", type=int, default=44)
    ap.add_argument("--real-repeat", type=int, default=20)
    ap.add_argument("--baseline", default="main", help="git ref of the code to compare with ('' to skip)")
    ap.add_argument(
        "--l3",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="run L3 (description rewrites) in the round: it changes no edge, and costs minutes at 100k",
    )
    ap.add_argument("--cold-only", action="store_true", help="no evolution round: real and cold cases only")
    ap.add_argument("--prepare-only", action="store_true", help="make the versions, measure nothing")
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    real = prepare_real(args.work)
    witnessed = prepare_witnessed(args.work)
    syn = prepare_synthetic(
        args.work, args.skills, args.seed, args.tasks, args.traces, args.l3, evolve=not args.cold_only
    )
    if args.prepare_only:
        say(f"prepared: {json.dumps({k: v for k, v in syn.items() if k != 'library'})}")
        return 0
    cases: dict[str, dict[str, Any]] = {}
    if real:
        cases["real"] = real
    if witnessed:
        cases["witnessed cold"] = {**witnessed, "version": witnessed["cold"]}
        cases["witnessed evolved"] = {**witnessed, "version": witnessed["evolved"]}
    cases["cold"] = {**syn, "version": syn["cold"]}
    if "evolved" in syn:
        cases["evolved"] = {**syn, "version": syn["evolved"]}
    trees: dict[str, Path | None] = {}
    baseline_sha = None
    if args.baseline:
        baseline = harness.extract_baseline(args.baseline, args.work)
        trees["baseline"], baseline_sha = baseline.folder, baseline.commit
    trees["current"] = None
    results = measure(cases, trees, args)
    ratios = interleaved_ratios(cases, args)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_latency.py", *map(harness.shown, argv)]),
        "cpus": os.cpu_count(),
        "processor": harness.cpu_model(),
        "platform": harness.platform_line(),
        "code": harness.code_state(),
        "baseline": args.baseline,
        "baseline_commit": baseline_sha,
        "queries": args.queries,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    for by_code in results.values():
        for r in by_code.values():
            r["code"] = harness.shown(r["code"])
    result = {
        "meta": meta,
        "bars": bars(results, ratios),
        "interleaved": ratios,
        "skills": {case: info["skills"] for case, info in cases.items()},
        "synthetic": {k: v for k, v in syn.items() if k not in ("store", "library", "queries")},
        "results": results,
    }
    harness.write_results(args.out / "latency", result, markdown(result))
    print((args.out / "latency.md").read_text())
    return 1 if any(r["pass"] is False for r in result["bars"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
