"""The L3 stage before and after "L3 proportional to its candidates", in the same process.

    .venv/bin/python benchmarks/bench_l3.py [--library benchmarks/out/synthetic-100000] [--traces 2000]
        [--legacy-rev 32a5f4b] [--shared ../shared/data] [--skip-synthetic] [--skip-real] [--repeat 1]

For each case a round is prepared once (attempt selection, reconstruction, L1, L2), then its L3 stage
runs with the code of `--legacy-rev` (extracted from git by `harness.extract_baseline`: a fresh lexical
index for the round's graph, the whole library re-tokenised and a second index for verification) and with
this checkout's `l3_stage`, alternating, on copies of the same state. It reports wall time, lexical
indexes built and skills tokenised by each, and whether both give the same revisions, node table and
token table.

Cases: the demo window 2026-11-27; the real SkillsBench dev trials over the real library and API-Bank
level-3 over its generated library (when `--shared` has them); a generated library of N skills with
SIMULATED traces (labelled; their numbers are not real ones). Writes benchmarks/results/l3.{json,md}.
Timings on a shared, loaded machine are noisy: compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import harness
import polars as pl

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.config import EvolutionConfig, retrieval_for
from segos_pipeline.evolution import round as round_module
from segos_pipeline.evolution.adapters import iter_records, write_library
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import RoundState, draft_snapshot, l1_stage, l2_stage, prepare_round
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR
from segos_pipeline.retrieval import lexical
from segos_pipeline.text import token_rows

ROOT = Path(__file__).resolve().parent.parent


def legacy_descriptions(rev: str) -> types.ModuleType:
    """`segos_pipeline/evolution/descriptions.py` as of `rev`, importable beside today's modules."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = harness.extract_baseline(rev, Path(tmp)).folder
        src = (tree / "segos_pipeline" / "evolution" / "descriptions.py").read_text()
    name = "segos_pipeline.evolution._legacy_descriptions"
    module = types.ModuleType(name)
    module.__package__ = "segos_pipeline.evolution"
    sys.modules[name] = module
    exec(compile(src, f"{rev}:descriptions.py", "exec"), module.__dict__)
    return module


def legacy_l3(
    legacy: types.ModuleType,
) -> Callable[[RoundState, EvolutionConfig, RetrievalConfig], RoundState]:
    """`l3_stage` as of the legacy revision (its body, over the legacy `description_update`)."""

    def stage(state: RoundState, config: EvolutionConfig, retrieval: RetrievalConfig) -> RoundState:
        t = time.perf_counter()
        parent, edges = state.parent, state.edges
        draft = Retriever(draft_snapshot(parent, state.nodes, state.tokens, edges), retrieval)

        def rebuild(new_nodes: pl.DataFrame, new_tokens: pl.DataFrame) -> Retriever:
            return Retriever(draft_snapshot(parent, new_nodes, new_tokens, edges), retrieval)

        l3 = legacy.description_update(draft, state.selected, config, retrieval.top_n, None, rebuild)
        state.nodes, state.tokens, state.revisions = l3.nodes, l3.tokens, l3.revisions
        state.counters["l3"] = l3.counters
        state.timings["l3"] = time.perf_counter() - t
        return state

    return stage


@contextmanager
def counting() -> Iterator[dict[str, int]]:
    """Counts lexical indexes built and node rows tokenised while the block runs (wraps, never
    changes, the two functions)."""
    counts = {"lexical_indexes_built": 0, "skills_tokenised": 0}
    init, table = lexical.LexicalIndex.__init__, token_rows.token_table

    def counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["lexical_indexes_built"] += 1
        init(self, *args, **kwargs)

    def counted_table(nodes: pl.DataFrame) -> pl.DataFrame:
        counts["skills_tokenised"] += nodes.height
        return table(nodes)

    held = (m for m in list(sys.modules.values()) if getattr(m, "token_table", None) is table)
    modules = [token_rows, *held]
    lexical.LexicalIndex.__init__ = counted_init  # type: ignore[method-assign]
    for m in modules:
        m.token_table = counted_table  # type: ignore[attr-defined]
    try:
        yield counts
    finally:
        lexical.LexicalIndex.__init__ = init  # type: ignore[method-assign]
        for m in modules:
            m.token_table = table  # type: ignore[attr-defined]


def compare(
    state: RoundState,
    config: EvolutionConfig,
    retrieval: RetrievalConfig,
    legacy: types.ModuleType,
    repeat: int,
) -> dict[str, Any]:
    stages = {"legacy": legacy_l3(legacy), "now": round_module.l3_stage}
    runs: dict[str, list[dict[str, Any]]] = {"legacy": [], "now": []}
    results: dict[str, RoundState] = {}
    for r in range(repeat):
        for label in ("legacy", "now") if r % 2 == 0 else ("now", "legacy"):
            copy = replace(state, counters=dict(state.counters), timings={})
            with counting() as counts:
                t = time.perf_counter()
                out = stages[label](copy, config, retrieval)
                seconds = time.perf_counter() - t
            runs[label].append({"seconds": round(seconds, 2), **counts})
            results[label] = out
            print(f"  {label}: {seconds:.2f} s {counts}", file=sys.stderr, flush=True)
    a, b = results["legacy"], results["now"]
    return {
        "legacy": runs["legacy"],
        "now": runs["now"],
        "l3_counters": b.counters["l3"],
        "legacy_l3_counters": a.counters["l3"],
        "identical": {
            "revisions": a.revisions.equals(b.revisions),
            # on the legacy counters' keys: today's add `editor_over_budget`
            "counters": all(b.counters["l3"].get(k) == v for k, v in a.counters["l3"].items()),
            "nodes": a.nodes.equals(b.nodes),
            "tokens": a.tokens.equals(b.tokens),
        },
        "committed": b.revisions.filter(pl.col("committed"))["skill"].to_list()[:20],
    }


def prepared(
    store: SnapshotStore, traces: pl.DataFrame, top_n: int | None = None
) -> tuple[RoundState, EvolutionConfig, RetrievalConfig]:
    parent, config = store.load(), EvolutionConfig()
    retrieval = retrieval_for(parent.manifest)
    if top_n is not None:  # a smaller bundle: more used skills fall outside it, so more L3 candidates
        retrieval = retrieval.with_overrides(top_n=top_n)
    state = prepare_round(parent, traces, config, retrieval)
    return l2_stage(l1_stage(state, config), config), config, retrieval


def case_demo(tmp: Path, legacy: types.ModuleType, repeat: int) -> dict[str, Any]:
    store = SnapshotStore(tmp / "demo")
    build_cold_start(DEFAULT_LIBRARY, store)
    TraceStore(store).ingest(iter_records(DEMO_DIR / "traces" / "2026-11-27.jsonl", "native"))
    state, config, retrieval = prepared(store, TraceStore(store).load("2026-11-27"))
    return {"skills": state.nodes.height, **compare(state, config, retrieval, legacy, repeat)}


def case_skillsbench(
    shared: Path, tmp: Path, legacy: types.ModuleType, repeat: int, top_n: int | None = None
) -> dict[str, Any]:
    store = SnapshotStore(tmp / f"skillsbench-{top_n}")
    build_cold_start(shared / "skills", store)
    records = iter_records(
        shared / "traces" / "skillsbench-trials" / "dev.jsonl",
        "skillsbench-trials",
        queries=shared / "eval" / "skillsbench-dev.jsonl",
    )
    TraceStore(store).ingest(records, window="dev")
    state, config, retrieval = prepared(store, TraceStore(store).load("dev"), top_n)
    return {"skills": state.nodes.height, **compare(state, config, retrieval, legacy, repeat)}


def case_apibank(
    shared: Path, tmp: Path, legacy: types.ModuleType, repeat: int, top_n: int | None = None
) -> dict[str, Any]:
    source = shared / "traces" / "apibank" / "level-3.json"
    library = tmp / f"apibank-library-{top_n}"
    write_library(source, "apibank", library)
    store = SnapshotStore(tmp / f"apibank-{top_n}")
    build_cold_start(library, store)
    TraceStore(store).ingest(iter_records(source, "apibank"), window="l3")
    state, config, retrieval = prepared(store, TraceStore(store).load("l3"), top_n)
    return {"skills": state.nodes.height, **compare(state, config, retrieval, legacy, repeat)}


def case_synthetic(
    library: Path, store_dir: Path | None, n_traces: int, legacy: types.ModuleType, repeat: int
) -> dict[str, Any]:
    from segos_pipeline.evaluation.replay import load_queries
    from segos_pipeline.evaluation.simulate import SimulationConfig, simulate
    from segos_pipeline.evolution.traces import trace_frame

    store = SnapshotStore(store_dir or library.parent / f"store-{library.name}")
    if store.latest() is None:
        t = time.perf_counter()
        build_cold_start(library, store)
        print(f"  built {library} in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    parent = store.load()
    t = time.perf_counter()
    tasks = load_queries(library / "queries.jsonl").queries
    records = simulate(Retriever(parent), tasks, SimulationConfig(traces=n_traces, seed=0))
    simulate_s = time.perf_counter() - t
    state, config, retrieval = prepared(store, trace_frame(records))
    return {
        "label": "SIMULATED traces",
        "skills": state.nodes.height,
        "traces": n_traces,
        "simulate_s": round(simulate_s, 1),
        "round_before_l3_s": {k: round(v, 2) for k, v in state.timings.items()},
        **compare(state, config, retrieval, legacy, repeat),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# L3 stage: before (legacy) and after, same process",
        "",
        f"legacy = `{result['legacy_rev']}`; now = this checkout. Seconds are wall time of `l3_stage` on a "
        "shared 2-core machine under load (compare within a row).",
        "",
        "| case | skills | legacy s | now s | indexes built (legacy / now) | skills tokenised (legacy / now) "
        "| committed | identical revisions / nodes / tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c in result["cases"].items():
        leg, now = c["legacy"], c["now"]
        same = c["identical"]
        lines.append(
            f"| {name} | {c['skills']} | {', '.join(str(r['seconds']) for r in leg)} | "
            f"{', '.join(str(r['seconds']) for r in now)} | "
            f"{leg[0]['lexical_indexes_built']} / {now[0]['lexical_indexes_built']} | "
            f"{leg[0]['skills_tokenised']} / {now[0]['skills_tokenised']} | "
            f"{c['l3_counters']['committed']} | "
            f"{same['revisions']} / {same['nodes']} / {same['tokens']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", type=Path, default=ROOT / "benchmarks" / "out" / "synthetic-100000")
    ap.add_argument(
        "--store", type=Path, default=None, help="its built store (default: store-<library name>)"
    )
    ap.add_argument("--traces", type=int, default=2000)
    ap.add_argument("--legacy-rev", default="32a5f4b")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()
    legacy = legacy_descriptions(args.legacy_rev)
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_real:
            print("demo window 2026-11-27 ...", file=sys.stderr)
            cases["demo 2026-11-27"] = case_demo(Path(tmp), legacy, args.repeat)
            if (args.shared / "skills").is_dir():
                print("real SkillsBench dev trials ...", file=sys.stderr)
                cases["SkillsBench dev trials (real)"] = case_skillsbench(
                    args.shared, Path(tmp), legacy, args.repeat
                )
                print("real API-Bank level-3 ...", file=sys.stderr)
                cases["API-Bank level-3 (real)"] = case_apibank(args.shared, Path(tmp), legacy, args.repeat)
                # top_n = 1: the same real traces with more candidates, so revisions are committed
                print("real traces, top_n = 1 ...", file=sys.stderr)
                cases["SkillsBench dev trials (real), top_n = 1"] = case_skillsbench(
                    args.shared, Path(tmp), legacy, args.repeat, 1
                )
                cases["API-Bank level-3 (real), top_n = 1"] = case_apibank(
                    args.shared, Path(tmp), legacy, args.repeat, 1
                )
    if not args.skip_synthetic:
        print(f"synthetic {args.library.name}, {args.traces} SIMULATED traces ...", file=sys.stderr)
        cases[f"{args.library.name}, SIMULATED traces"] = case_synthetic(
            args.library, args.store, args.traces, legacy, args.repeat
        )
    result = {"legacy_rev": args.legacy_rev, "cases": cases}
    suffix = (
        ""
        if not (args.skip_real or args.skip_synthetic)
        else "-real"
        if args.skip_synthetic
        else "-synthetic"
    )
    md = markdown(result)
    harness.write_results(args.out / f"l3{suffix}", result, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
