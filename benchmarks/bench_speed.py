#!/usr/bin/env python
"""Speed benchmark of the cold-start build and of retrieval, against the project's speed bars.

    .venv/bin/python benchmarks/bench_speed.py [--sizes 344,100000,300000,1000000] [--out benchmarks/results]
        [--baseline-src FOLDER]

`--baseline-src` names a folder holding another checkout's `segos_pipeline` package (e.g. the code before a
change: the folder `benchmarks/harness.py baseline COMMIT` prints): every synthetic case then also
builds once with that code (same library, same conditions, just before the measured build) and reports
both builds' stages and peak RSS, and how many semantic edges differ between them.

Cases (`--sizes`, comma-separated): `344` or `real` is the real library at /work/shared/data/skills
(skipped with a message when absent) queried with the SkillsBench dev instructions; any other number N is
a synthetic library of N skills from `segos_pipeline.evaluation.synthetic`, generated once into `--work`
and reused while its parameters (size, seed, generator version) are unchanged, queried with generated
queries.

Every measurement runs in a fresh subprocess of this script, so:
* build times exclude interpreter start and imports (only the `build_cold_start` call is timed), and the
  build uses the machine's default threading (all cores);
* the peak RSS of a build is that process's own high-water mark (`os.wait4` rusage of the child), not
  polluted by the generator or by this orchestrating process;
* the query phase starts with OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / POLARS_MAX_THREADS = 1 in the
  environment and pins itself to CPU 0 before numpy or polars are imported.

Writes `<out>/speed.json` (everything measured) and `<out>/speed.md` (bars, PASS/FAIL).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness

ROOT = Path(__file__).resolve().parent.parent
REAL_LIBRARY = ROOT.parent / "shared" / "data" / "skills"
REAL_QUERIES = ROOT.parent / "shared" / "data" / "eval" / "skillsbench-dev.jsonl"
GIB = 1024**3

# The speed bars (SPEC / project brief). Build and query bars of the real library; synthetic bars are
# stated for 100k skills and applied as upper bounds to smaller synthetic libraries as well.
REAL_BUILD_S = 2.0
REAL_QUERY_P50_MS = 2.0
SYN_BUILD_S = 60.0
SYN_PEAK_RSS_BYTES = 2 * GIB
SYN_QUERY_P50_MS = 20.0
SYN_BAR_MAX_SKILLS = 100_000
# Issue 14's bars for a 1M-skill library (applied to synthetic libraries of 1M skills and more).
SYN_1M_SKILLS = 1_000_000
SYN_1M_BUILD_S = 300.0
SYN_1M_PEAK_RSS_BYTES = 8 * GIB
IDLE_CPUS = 0.2  # other processes' CPU use below which the machine counts as idle (--wait-idle)
WAIT_IDLE_S = 0.0  # set from --wait-idle


say = harness.say


# =========================================================================================== workers
# `bench_speed.py _worker build|query ARGS_JSON RESULT_PATH` — run in a fresh interpreter by the parent.


def _stage_of(msg: str) -> str | None:
    """Which stage starts after a build progress line (see segos_pipeline.graph.build)."""
    if msg.startswith("parsed") and "skills;" in msg:
        return "tokenise"
    if msg.startswith("tokenised"):
        return "join"
    if msg.startswith("semantic graph"):
        return "transition+write"
    if msg.startswith("committed"):
        return "done"
    return None


def _stage_rss(current: dict[str, str], pid: int) -> dict[str, float]:
    return {current["stage"]: harness.rss_bytes(pid)}


def worker_build(args: dict[str, Any]) -> dict[str, Any]:
    t_import = time.perf_counter()
    import polars as pl

    import segos_pipeline
    from segos_pipeline import SnapshotStore, build_cold_start
    from segos_pipeline.retrieval import embeddings, semantic
    from segos_pipeline.retrieval.ranker import warm_caches

    import_s = time.perf_counter() - t_import
    runs = []
    store_root = Path(args["store_root"])
    for r in range(args["repeat"]):
        store = store_root / f"run{r}"
        shutil.rmtree(store, ignore_errors=True)
        marks: list[tuple[str, float]] = []
        # peak RSS per build stage, sampled from /proc/self/statm (the stage is the last progress line)
        current = {"stage": "parse"}
        by_stage = functools.partial(_stage_rss, current, os.getpid())
        with harness.PeakSampler(by_stage, interval=0.02) as rss:
            t0 = time.perf_counter()

            def progress(
                msg: Any,
                t0: float = t0,
                current: dict[str, str] = current,
                marks: list[tuple[str, float]] = marks,
                run: int = r + 1,
            ) -> None:
                if not isinstance(msg, str):  # progress ticks (segos_pipeline.progress): stages are messages
                    return
                now = time.perf_counter() - t0
                stage = _stage_of(msg)
                if stage:
                    marks.append((stage, now))
                    current["stage"] = stage
                print(f"    [build {run}/{args['repeat']} {now:7.2f}s] {msg}", file=sys.stderr, flush=True)

            manifest = build_cold_start(args["library"], store, progress=progress)
            total = time.perf_counter() - t0
            caches = None
            if args.get("warm"):
                # what `segos build` adds after the commit: the lexical index and the skill vectors (with
                # the embedding model's load), so the first query pays for neither; every run pays it in
                # full. Synthetic builds skip it (their peak RSS is barred for the build alone): there the
                # query phase's Retriever() makes the caches, and its time is reported.
                semantic._RECENT.clear()
                embeddings.backend_for.cache_clear()
                t1 = time.perf_counter()
                warm_caches(SnapshotStore(store).load(manifest["version"]), progress=progress)
                caches = time.perf_counter() - t1
        starts = {"parse": 0.0, **dict(marks)}
        order = ["parse", "tokenise", "join", "transition+write", "done"]
        stages = {
            s: round(starts[nxt] - starts[s], 4)
            for s, nxt in itertools.pairwise(order)
            if s in starts and nxt in starts
        }
        runs.append(
            {
                "seconds": round(total, 4),
                "caches_s": round(caches, 4) if caches is not None else None,
                "with_caches_s": round(total + caches, 4) if caches is not None else None,
                "stages_s": stages,
                "manifest_timings_s": manifest["timings_s"],
                "version": manifest["version"],
                "store": str(store),
                "counts": manifest["counts"],
                "peak_rss_by_stage_bytes": rss.peaks,
                "store_bytes": sum(int(f["bytes"]) for f in manifest["files"].values()),
            }
        )
    runs_profile = _profile_build(args, build_cold_start) if args.get("profile") else None
    return {
        "import_s": round(import_s, 3),
        "runs": runs,
        "polars_threads": pl.thread_pool_size(),
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "profile": runs_profile,
        "code": harness.shown(str(Path(segos_pipeline.__file__).parent.parent)),
    }


def _profile_build(args: dict[str, Any], build: Callable[..., dict[str, Any]]) -> str:
    """One extra (untimed) build under cProfile; the top functions go to a text file."""
    import cProfile
    import io
    import pstats

    store = Path(args["store_root"]) / "profile"
    shutil.rmtree(store, ignore_errors=True)
    prof = cProfile.Profile()
    prof.enable()
    build(args["library"], store)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    out.write("== by cumulative time ==\n")
    stats.sort_stats("cumulative").print_stats(45)
    out.write("\n== by internal time ==\n")
    stats.sort_stats("tottime").print_stats(30)
    path = Path(args["profile"])
    path.write_text(out.getvalue())
    shutil.rmtree(store, ignore_errors=True)
    return str(path)


def worker_query(args: dict[str, Any]) -> dict[str, Any]:
    # One core: pinned before numpy/polars are imported so their thread pools see a single CPU
    # (the *_NUM_THREADS variables were set by the parent in this process's environment).
    harness.pin_to_core(0)
    import polars as pl

    from segos_pipeline import Retriever, SnapshotStore
    from segos_pipeline.text.names import SkillNames

    queries = [json.loads(line) for line in Path(args["queries"]).read_text().splitlines() if line.strip()]
    queries = queries[: args["limit"]] if args.get("limit") else queries
    texts = [q.get("instruction") or q.get("query") or "" for q in queries]
    t0 = time.perf_counter()
    snap = SnapshotStore(args["store"]).load(args.get("version"))
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = Retriever(snap)
    init_s = time.perf_counter() - t0

    # Warm-up: one pass of each call so caches (stemmer LRU, sliced operators) are as in steady state.
    for q in texts:
        retriever.retrieve(q)
        retriever.ranked_ids(q, 5)
    timings: dict[str, list[float]] = {"retrieve": [], "ranked_ids": []}
    clock = time.perf_counter_ns
    for name, call in (
        ("retrieve", retriever.retrieve),
        ("ranked_ids", lambda q: retriever.ranked_ids(q, 5)),
    ):
        for rep in range(args["repeat"]):
            for q in texts:
                a = clock()
                call(q)
                timings[name].append((clock() - a) / 1e6)
            print(f"    [query] {name}: pass {rep + 1}/{args['repeat']}", file=sys.stderr, flush=True)

    # Retrieval quality on the same queries (not a bar; shows the synthetic queries are neither trivial
    # nor hopeless): a query is a hit when one of its gold skills is in the top 5.
    # The same against the full ranking (every skill with evidence, no cut at the depth): how often the
    # cut ranking's top 5 (and its two-phase lexical answers on a large library) differ from it.
    names = SkillNames(snap.nodes)
    hits = hits_full = judged = same = approximate = 0
    for q, text in zip(queries, texts, strict=True):
        cut = retriever.ranked_ids(text, 5)
        full = [str(retriever.ids[i]) for i in retriever.select(retriever.rank(text), 5)[0]]
        same += cut == full
        approximate += retriever.lexical.evidence(text, depth=5).approximate
        gold = {i for g in q.get("gold") or [] for i in names.resolve(g)}
        if not gold:
            continue
        judged += 1
        hits += any(str(names.ids[i]) in set(cut) for i in gold)
        hits_full += any(str(names.ids[i]) in set(full) for i in gold)
    return {
        "queries": len(texts),
        "repeat": args["repeat"],
        "load_s": round(load_s, 3),
        "retriever_init_s": round(init_s, 3),
        "retrieve_ms": harness.percentiles(timings["retrieve"]),
        "ranked_ids_ms": harness.percentiles(timings["ranked_ids"]),
        "hit_at_5": round(hits / judged, 4) if judged else None,
        "hit_at_5_full_ranking": round(hits_full / judged, 4) if judged else None,
        "top5_equal_to_full_ranking": same,
        "two_phase_queries": approximate,
        "judged_queries": judged,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "polars_threads": pl.thread_pool_size(),
        "skills": snap.nodes.height,
    }


def worker_edges(args: dict[str, Any]) -> dict[str, Any]:
    """How many semantic edges (src, dst) of one build are not in another's, and how many weights moved."""
    import polars as pl

    def semantic(store: str) -> pl.DataFrame:
        files = sorted(Path(store).glob("versions/*/edges.parquet"))
        edges = pl.read_parquet(files[-1], columns=["src", "dst", "relation", "weight"])
        return edges.filter(pl.col("relation") == "semantic").drop("relation")

    a, b = semantic(args["baseline"]), semantic(args["measured"])
    both = a.join(b, on=["src", "dst"], how="inner", suffix="_new")
    return {
        "baseline_edges": a.height,
        "edges": b.height,
        "only_baseline": a.height - both.height,
        "only_measured": b.height - both.height,
        "weight_changed": both.filter((pl.col("weight") - pl.col("weight_new")).abs() > 1e-12).height,
        "sources_changed": pl.concat(
            [a.join(b, on=["src", "dst"], how="anti")["src"], b.join(a, on=["src", "dst"], how="anti")["src"]]
        ).n_unique(),
    }


def run_worker(argv: list[str]) -> int:
    mode, args_json, result_path = argv
    args = json.loads(args_json)
    workers = {"build": worker_build, "query": worker_query, "edges": worker_edges}
    result = workers[mode](args)
    Path(result_path).write_text(json.dumps(result, indent=2))
    return 0


# =========================================================================================== parent


def spawn(mode: str, args: dict[str, Any], result: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a worker in a fresh interpreter; returns its result plus the child's own peak RSS, the peak of
    its whole process tree (the parser's pool workers included), and how busy other processes were."""
    result.unlink(missing_ok=True)
    # Other processes on the machine compete for the same CPUs: optionally wait for a quiet moment, and
    # record how busy it was just before.
    busy_before = harness.busy_cpus()
    deadline = time.monotonic() + WAIT_IDLE_S
    if busy_before is not None and busy_before > IDLE_CPUS and WAIT_IDLE_S > 0:
        say(f"waiting up to {WAIT_IDLE_S:.0f}s for other processes to go idle ({busy_before} CPUs busy)")
        while busy_before is not None and busy_before > IDLE_CPUS and time.monotonic() < deadline:
            busy_before = harness.busy_cpus(2.0)
    if busy_before is not None and busy_before > 0.25:
        say(f"note: {busy_before} CPU(s) busy with other processes before this {mode} measurement")
    cmd = [sys.executable, str(Path(__file__).resolve()), "_worker", mode, json.dumps(args), str(result)]
    cpu0 = harness.busy_cpu_seconds()
    # The tree sampler costs some CPU, so it runs only for builds (queries must have CPU 0 to themselves).
    child = harness.run_child(cmd, env=env, cwd=ROOT, tree=mode == "build")
    cpu1 = harness.busy_cpu_seconds()
    out = json.loads(result.read_text())
    # For a child with workers this is the largest single process of its tree (the kernel folds
    # waited-for descendants in as a max, not a sum); tree_peak_rss_bytes is the sum.
    out["peak_rss_bytes"] = child.peak_rss_bytes
    out["tree_peak_rss_bytes"] = child.tree_peak_rss_bytes
    out["cpu_user_s"] = round(child.cpu_user_s, 2)
    out["cpu_sys_s"] = round(child.cpu_sys_s, 2)
    # What came from the disk rather than the page cache (summed over the tree): a build that reads its
    # library cold is bound by this machine's disk, not by its own code.
    out["disk_read_bytes"] = child.read_bytes
    out["busy_cpus_before"] = busy_before
    if cpu0 is not None and cpu1 is not None:
        others = max(0.0, cpu1 - cpu0 - child.cpu_s)
        out["other_busy_cpus_during"] = round(others / child.wall_s, 2)
    return out


def latest_version(store: Path) -> str:
    versions = sorted(p.name for p in (store / "versions").iterdir() if (p / "manifest.json").is_file())
    return versions[-1]


def case_real(work: Path, repeat_build: int, repeat_query: int, profile: bool) -> dict[str, Any] | None:
    if not REAL_LIBRARY.is_dir():
        say(f"real library {REAL_LIBRARY} not found: skipping the real-library case")
        return None
    n_pkgs = sum(1 for _ in REAL_LIBRARY.rglob("SKILL.md"))
    say(f"real library: {n_pkgs} SKILL.md files under {REAL_LIBRARY}; building {repeat_build}x (all cores)")
    stores = work / "stores" / "real"
    build = spawn(
        "build",
        {
            "library": str(REAL_LIBRARY),
            "store_root": str(stores),
            "repeat": repeat_build,
            "warm": True,
            "profile": str(work / "profile-real.txt") if profile else None,
        },
        work / "result-real-build.json",
    )
    secs = [r["seconds"] for r in build["runs"]]
    say(f"real build: min {min(secs):.3f}s, median {statistics.median(secs):.3f}s over {len(secs)} runs")
    store = Path(build["runs"][0]["store"])
    query = None
    if REAL_QUERIES.is_file():
        say(f"real queries: {REAL_QUERIES.name}, {repeat_query} warm passes each, one core (CPU 0)")
        query = spawn(
            "query",
            {
                "store": str(store),
                "version": latest_version(store),
                "queries": str(REAL_QUERIES),
                "repeat": repeat_query,
            },
            work / "result-real-query.json",
            env=harness.ONE_CORE_ENV,
        )
        say(
            f"real query: retrieve p50 {query['retrieve_ms']['p50']:.3f} ms, "
            f"ranked_ids p50 {query['ranked_ids_ms']['p50']:.3f} ms, hit@5 {query['hit_at_5']}"
        )
    else:
        say(f"{REAL_QUERIES} not found: no query measurement for the real library")
    return {
        "case": "real",
        "library": str(REAL_LIBRARY),
        "skills": build["runs"][0]["counts"]["skills"],
        "build": {
            **build,
            "min_s": min(secs),
            "median_s": statistics.median(secs),
            "with_caches_median_s": statistics.median(r["with_caches_s"] for r in build["runs"]),
        },
        "query": query,
    }


def baseline_build(work: Path, n: int, lib: Path, baseline_src: Path) -> dict[str, Any]:
    """One build of `lib` with the `segos_pipeline` under `baseline_src` (PYTHONPATH comes first)."""
    say(f"synthetic {n}: baseline build with the code in {harness.shown(str(baseline_src))}")
    b = spawn(
        "build",
        {"library": str(lib), "store_root": str(work / "stores" / f"baseline-{n}"), "repeat": 1},
        work / f"result-baseline-{n}-build.json",
        env={"PYTHONPATH": str(baseline_src)},
    )
    run = b["runs"][0]
    say(
        f"baseline {n}: {run['seconds']:.2f}s, peak RSS {b['peak_rss_bytes'] / GIB:.2f} GiB; "
        f"stages {run['stages_s']}"
    )
    return b


def case_synthetic(
    work: Path,
    n: int,
    seed: int,
    n_queries: int,
    repeat_build: int,
    repeat_query: int,
    profile: bool,
    baseline_src: Path | None = None,
) -> dict[str, Any]:
    lib = harness.synthetic_library(work, n, seed, n_queries)
    summary = json.loads((lib / "synthetic.json").read_text())
    baseline = baseline_build(work, n, lib, baseline_src) if baseline_src else None
    say(f"synthetic {n}: building {repeat_build}x in a fresh process (all cores), measuring peak RSS")
    stores = work / "stores" / f"synthetic-{n}"
    builds = []
    for r in range(repeat_build):
        b = spawn(
            "build",
            {
                "library": str(lib),
                "store_root": str(stores),
                "repeat": 1,
                "profile": str(work / f"profile-synthetic-{n}.txt") if profile and r == 0 else None,
            },
            work / f"result-synthetic-{n}-build.json",
        )
        run = b["runs"][0]
        say(
            f"synthetic {n} build {r + 1}: {run['seconds']:.2f}s, "
            f"peak RSS {b['peak_rss_bytes'] / GIB:.2f} GiB; stages {run['stages_s']}"
        )
        builds.append(b)
    store = Path(builds[-1]["runs"][0]["store"])
    edge_diff = None
    if baseline is not None:
        edge_diff = spawn(
            "edges",
            {"baseline": baseline["runs"][0]["store"], "measured": str(store)},
            work / f"result-edges-{n}.json",
        )
        say(f"synthetic {n}: semantic edges against the baseline: {edge_diff}")
    say(f"synthetic {n}: {n_queries} queries x {repeat_query} warm passes, one core (CPU 0)")
    query = spawn(
        "query",
        {
            "store": str(store),
            "version": latest_version(store),
            "queries": str(lib / "queries.jsonl"),
            "repeat": repeat_query,
        },
        work / f"result-synthetic-{n}-query.json",
        env=harness.ONE_CORE_ENV,
    )
    say(
        f"synthetic {n} query: retrieve p50 {query['retrieve_ms']['p50']:.2f} ms, "
        f"ranked_ids p50 {query['ranked_ids_ms']['p50']:.2f} ms, hit@5 {query['hit_at_5']}"
    )
    secs = [b["runs"][0]["seconds"] for b in builds]
    return {
        "case": f"synthetic-{n}",
        "library": str(lib),
        "skills": n,
        "generator": summary,
        "build": {
            "runs": builds,
            "min_s": min(secs),
            "median_s": statistics.median(secs),
            "peak_rss_bytes": max(b["peak_rss_bytes"] for b in builds),
            "tree_peak_rss_bytes": max(b["tree_peak_rss_bytes"] or 0 for b in builds) or None,
        },
        "baseline": baseline,
        "edges_vs_baseline": edge_diff,
        "query": query,
    }


# ------------------------------------------------------------------------------------------ reporting


def _row(case: str, metric: str, value: float | None, unit: str, bar: float | None) -> dict[str, Any]:
    status = "—" if bar is None or value is None else ("PASS" if value <= bar else "FAIL")
    return {"case": case, "metric": metric, "value": value, "unit": unit, "bar": bar, "status": status}


def bar_rows(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for c in cases:
        name = c["case"] + f" ({c['skills']} skills)"
        b, q = c["build"], c.get("query")
        if c["case"] == "real":
            rows.append(_row(name, "build, median of runs (all cores)", b["median_s"], "s", REAL_BUILD_S))
            rows.append(_row(name, "build, min of runs (all cores)", b["min_s"], "s", REAL_BUILD_S))
            rows.append(
                _row(
                    name,
                    "build + retrieval caches (lexical index, skill vectors), median",
                    b.get("with_caches_median_s"),
                    "s",
                    REAL_BUILD_S,
                )
            )
            rows.append(_row(name, "build peak RSS, largest process", b["peak_rss_bytes"] / GIB, "GiB", None))
            tree = b.get("tree_peak_rss_bytes")
            rows.append(
                _row(name, "build peak RSS, process tree sum", tree / GIB if tree else None, "GiB", None)
            )
            q_bar = REAL_QUERY_P50_MS
        else:
            capped = c["skills"] <= SYN_BAR_MAX_SKILLS
            big = c["skills"] >= SYN_1M_SKILLS
            build_bar = SYN_BUILD_S if capped else (SYN_1M_BUILD_S if big else None)
            rss_bar = SYN_PEAK_RSS_BYTES if capped else (SYN_1M_PEAK_RSS_BYTES if big else None)
            rows.append(_row(name, "build (all cores)", b["median_s"], "s", build_bar))
            stages = b["runs"][0]["runs"][0]["stages_s"]
            rows.append(
                _row(name, "build without parse", b["median_s"] - stages.get("parse", 0.0), "s", None)
            )
            rows.append(
                _row(
                    name,
                    "store size of the version",
                    b["runs"][0]["runs"][0].get("store_bytes", 0) / GIB,
                    "GiB",
                    None,
                )
            )
            read = b["runs"][0].get("disk_read_bytes")  # page-cache misses: how cold the library was
            read_gib = read / GIB if read else None
            rows.append(_row(name, "read from disk during the build", read_gib, "GiB", None))
            base = c.get("baseline")
            if base:
                brun = base["runs"][0]
                rows.append(_row(name, "baseline build (all cores)", brun["seconds"], "s", None))
                rows.append(
                    _row(
                        name,
                        "baseline build without parse",
                        brun["seconds"] - brun["stages_s"].get("parse", 0.0),
                        "s",
                        None,
                    )
                )
                rows.append(
                    _row(
                        name,
                        "baseline build peak RSS, largest process",
                        base["peak_rss_bytes"] / GIB,
                        "GiB",
                        None,
                    )
                )
            if q:
                rows.append(
                    _row(
                        name,
                        "first Retriever() (makes the lexical index and skill vectors)",
                        q["retriever_init_s"],
                        "s",
                        None,
                    )
                )
            # The bar is checked on the process-tree sum (main process + parser workers): an upper bound,
            # so a PASS is unambiguous. The largest single process is the kernel's ru_maxrss.
            tree = b.get("tree_peak_rss_bytes")
            rows.append(
                _row(
                    name,
                    "build peak RSS, process tree sum",
                    tree / GIB if tree else None,
                    "GiB",
                    rss_bar / GIB if rss_bar else None,
                )
            )
            rows.append(_row(name, "build peak RSS, largest process", b["peak_rss_bytes"] / GIB, "GiB", None))
            q_bar = SYN_QUERY_P50_MS if capped or big else None
        if q:
            rows.append(_row(name, "retrieve() p50 (1 core)", q["retrieve_ms"]["p50"], "ms", q_bar))
            rows.append(_row(name, "retrieve() p95 (1 core)", q["retrieve_ms"]["p95"], "ms", None))
            rows.append(_row(name, "ranked_ids(q, 5) p50 (1 core)", q["ranked_ids_ms"]["p50"], "ms", q_bar))
            rows.append(_row(name, "ranked_ids(q, 5) p95 (1 core)", q["ranked_ids_ms"]["p95"], "ms", None))
    return rows


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def markdown(cases: list[dict[str, Any]], rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Speed benchmark",
        "",
        f"Generated {meta['date']} by `{meta['command']}` on {meta['cpus']} CPU(s), {meta['platform']}; "
        f"code at commit {meta['code'].get('commit', '?')}"
        + (f" with uncommitted {', '.join(meta['code']['dirty'])}." if meta["code"].get("dirty") else "."),
        "Builds use all cores (default threading); queries run pinned to CPU 0 with OMP/OpenBLAS/Polars "
        "threads = 1. Bars are upper bounds.",
        "Machine speed (a fixed Python loop, best of 3; lower is faster): "
        f"{meta.get('machine_speed_s', '?')} s before and {meta.get('machine_speed_after_s', '?')} s after; "
        f"load average (1/5/15 min) {_loads(meta.get('load_average_before'))} before and "
        f"{_loads(meta.get('load_average_after'))} after, {meta.get('memory_available_gib_before', '?')} GiB "
        "memory available before (other engineers share the machine).",
        "",
        "| case | metric | measured | bar | status |",
        "|---|---|---:|---:|:---:|",
    ]
    for r in rows:
        bar = f"≤ {_fmt(r['bar'])} {r['unit']}" if r["bar"] is not None else "—"
        lines.append(
            f"| {r['case']} | {r['metric']} | {_fmt(r['value'])} {r['unit']} | {bar} | {r['status']} |"
        )
    for c in cases:
        lines += ["", f"## {c['case']}", ""]
        runs = c["build"]["runs"]
        flat = [run for b in runs for run in b["runs"]] if "runs" in runs[0] else runs
        lines.append(
            "| build run | total s | " + " | ".join(flat[0]["stages_s"]) + " | peak RSS by stage (GiB) |"
        )
        lines.append("|---|---:|" + "---:|" * len(flat[0]["stages_s"]) + "---|")
        base = c.get("baseline")
        labelled = [*((f"baseline ({base['code']})", r) for r in (base["runs"] if base else []))]
        labelled += [(str(i), run) for i, run in enumerate(flat, start=1)]
        for label, run in labelled:
            peaks = ", ".join(f"{k} {v / GIB:.2f}" for k, v in run["peak_rss_by_stage_bytes"].items())
            stages = " | ".join(f"{run['stages_s'].get(k, 0.0):.2f}" for k in flat[0]["stages_s"])
            lines.append(f"| {label} | {run['seconds']:.2f} | {stages} | {peaks} |")
        diff = c.get("edges_vs_baseline")
        if diff:
            lines.append("")
            lines.append(
                f"Semantic edges against the baseline build: {diff['edges']} "
                f"(baseline {diff['baseline_edges']}); {diff['only_measured']} new, {diff['only_baseline']} "
                f"gone, {diff['weight_changed']} with another weight; {diff['sources_changed']} skills with "
                "another top-k."
            )
        spawned = [*(runs if "runs" in runs[0] else [c["build"]]), *([c["query"]] if c.get("query") else [])]

        def cpus(key: str, spawned: list[dict[str, Any]] = spawned) -> str:
            return ", ".join("?" if s.get(key) is None else f"{s[key]:.2f}" for s in spawned)

        lines.append("")
        lines.append(
            f"CPUs (of {os.cpu_count()}) busy with other processes, builds then queries: "
            f"just before {cpus('busy_cpus_before')}; on average during {cpus('other_busy_cpus_during')}."
        )
        sem = flat[0]["counts"]["semantic"]
        lines.append("")
        lines.append(
            f"Semantic graph: {sem['directed_edges']} edges, df cap {sem['df_cap']} "
            f"({sem['capped_tokens']} tokens above it), {sem['isolated']} isolated skills."
        )
        q = c.get("query")
        if q:
            lines.append(
                f"Queries: {q['queries']} x {q['repeat']} warm passes; snapshot load {q['load_s']} s, "
                f"Retriever() {q['retriever_init_s']} s; hit@5 {q['hit_at_5']} over {q['judged_queries']} "
                f"queries with gold; retrieve() p99 {q['retrieve_ms']['p99']} ms, "
                f"max {q['retrieve_ms']['max']} ms."
            )
            if "top5_equal_to_full_ranking" in q:
                lines.append(
                    f"Against the full ranking (no cut at the depth): top 5 equal for "
                    f"{q['top5_equal_to_full_ranking']} of {q['queries']} queries, hit@5 "
                    f"{q['hit_at_5_full_ranking']}; {q['two_phase_queries']} queries answered in two phases."
                )
        if "generator" in c:
            g = c["generator"]
            lines.append(
                f"Generator: {g['n_domains']} domains, {g['n_chains']} chains, vocabulary {g['vocabulary']}, "
                f"{g['n_script_files']} script files, {g['skill_md_chars'] / 1e6:.1f} M SKILL.md characters."
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_worker":
        return run_worker(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="344,100000", help="comma-separated: 344|real, or N synthetic skills")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out", help="libraries and stores")
    ap.add_argument("--seed", type=int, default=0, help="synthetic library seed")
    ap.add_argument("--queries", type=int, default=200, help="synthetic queries")
    ap.add_argument("--real-build-repeat", type=int, default=3)
    ap.add_argument("--real-query-repeat", type=int, default=20)
    ap.add_argument("--synthetic-build-repeat", type=int, default=1)
    ap.add_argument("--synthetic-query-repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also run one cProfile'd build per case")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="folder with another checkout's segos_pipeline: each synthetic case also builds once with it",
    )
    ap.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help=f"before each measurement wait up to this long until other processes use < {IDLE_CPUS} CPUs",
    )
    args = ap.parse_args(argv)
    global WAIT_IDLE_S
    WAIT_IDLE_S = args.wait_idle

    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    cases: list[dict[str, Any]] = []
    speed_before = harness.machine_speed_s()
    load_before, mem_before = list(os.getloadavg()), _available_gib()
    t0 = time.perf_counter()
    for token in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        if token in ("real", "344"):
            case = case_real(args.work, args.real_build_repeat, args.real_query_repeat, args.profile)
        else:
            case = case_synthetic(
                args.work,
                int(token),
                args.seed,
                args.queries,
                args.synthetic_build_repeat,
                args.synthetic_query_repeat,
                args.profile,
                args.baseline_src,
            )
        if case:
            cases.append(case)
    rows = bar_rows(cases)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "benchmarks/bench_speed.py", *map(harness.shown, argv)]),
        "cpus": os.cpu_count(),
        "platform": harness.platform_line(),
        "processor": harness.cpu_model(),
        "code": harness.code_state(),
        "seconds": round(time.perf_counter() - t0, 1),
        "machine_speed_s": speed_before,
        "machine_speed_after_s": harness.machine_speed_s(),
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "memory_available_gib_before": mem_before,
    }
    harness.write_results(
        args.out / "speed", {"meta": meta, "bars": rows, "cases": cases}, markdown(cases, rows, meta)
    )
    say(f"wrote {args.out / 'speed.json'} and {args.out / 'speed.md'} ({meta['seconds']} s)")
    print()
    print((args.out / "speed.md").read_text())
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


def _loads(values: list[float] | None) -> str:
    return "/".join(f"{v:.1f}" for v in values) if values else "?"


def _available_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return round(int(line.split()[1]) * 1024 / GIB, 1)
    return None


if __name__ == "__main__":
    raise SystemExit(main())
