"""One whole study run (`segos eval`): baselines, versions, both protocols, rounds, as one JSON dict."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...retrieval.ranker import Retriever
from ...store.snapshot import Snapshot, SnapshotStore
from ...text.names import SkillNames
from ..metrics import LEAKAGE_BUCKETS, LEAKAGE_THRESHOLDS
from ..replay import QueryFile
from .ablation import GRAPH_KS, graph_ablation
from .config import CELLS, CORE, FULL, REFERENCE, StudyConfig, cell_name
from .evolving import evolve_cells
from .findings import findings
from .measuring import Hydration, QueryResult, buckets, compare, measure, measure_snapshot, summarize
from .overlay import overlay_test
from .queries import StudyQuery, prepare_queries, split_tasks
from .rankers import PROBE, PROBE_LABEL, BM25Ranker, Ranker, gold_traced, traced_skills, with_requests
from .traces import TraceInputs, TraceSource, trace_counts

STUDY_FORMAT = 1
Progress = Callable[[str], None]


@dataclass
class MethodRun:
    method: str
    kind: str  # baseline | version | factorial
    protocol: str  # "-" (no traces involved) | "as given" | "deployment" | "transfer"
    label: str
    results: list[QueryResult]
    simulated: bool = False  # evolved from a trace source that includes SIMULATED traces
    extra: dict[str, Any] = field(default_factory=dict)


def method_entry(
    run: MethodRun, reference: MethodRun | None, queries: Sequence[StudyQuery], config: StudyConfig
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "method": run.method,
        "kind": run.kind,
        "protocol": run.protocol,
        "label": run.label,
        "simulated": run.simulated,
        **summarize(run.results),
    }
    if reference is not None and run.method != reference.method:
        entry["vs_ppr"] = compare(run.results, reference.results, config)
    entry["buckets"] = buckets(run.results, queries)
    entry.update(run.extra)
    return entry


def resolve_base(store: SnapshotStore, base: str | None, versions: Sequence[str]) -> str:
    """The version the baselines run on: `base`, else the root ancestor of the first version given,
    else the newest cold start of the store (else its newest version)."""
    if base:
        return store.resolve(base)
    if versions:
        vid = store.resolve(versions[0])
        seen = {vid}
        while (parent := store.manifest(vid).get("parent")) and parent not in seen:
            vid = store.resolve(parent)
            seen.add(vid)
        return vid
    colds = [m["version"] for m in store.list_versions() if m.get("kind") == "cold_start"]
    return colds[-1] if colds else store.latest()


def _simulated(frame_counts: dict[str, int]) -> bool:
    return frame_counts.get("simulated", 0) > 0


def run_study(
    store: SnapshotStore | str | Path,
    queries: QueryFile,
    *,
    base: str | None = None,
    versions: Sequence[str] = (),
    traces: TraceInputs | None = None,
    config: StudyConfig | None = None,
    progress: Progress | None = None,
    queries_path: str | Path | None = None,
) -> dict[str, Any]:
    """The whole study as one JSON-able dict (the `report.json` of `segos eval`)."""
    config = config or StudyConfig()
    if config.k < 1:
        raise ValueError("k must be at least 1")
    store = store if isinstance(store, SnapshotStore) else SnapshotStore(store)
    say = progress or (lambda _msg: None)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    k, rconf = config.k, config.retrieval

    base_snap = store.load(resolve_base(store, base, versions))
    names = SkillNames(base_snap.nodes)
    prepared, unknown_gold = prepare_queries(queries.queries, base_snap, names)
    if not prepared:
        raise ValueError("no usable queries: every line was skipped")
    say(f"base {base_snap.version}: {base_snap.nodes.height} skills, {len(prepared)} queries, k={k}")

    # ---- methods that involve no traces
    t = time.perf_counter()
    hyd = Hydration(base_snap.nodes, rconf)
    baselines: list[tuple[str, str, Ranker]] = [
        ("bm25", "flat BM25 (bm25s) over name + description + body", BM25Ranker(base_snap.nodes)),
        (
            "lexical",
            "lexical seeds, no graph propagation",
            Retriever(base_snap, rconf.with_overrides(propagate=False)),
        ),
        (
            "forward_ppr",
            "forward-only PPR (cold start)",
            Retriever(base_snap, rconf.with_overrides(reverse=False)),
        ),
        (REFERENCE, "reverse-aware PPR (cold start)", Retriever(base_snap, rconf)),
    ]
    runs: list[MethodRun] = []
    for name, label, ranker in baselines:
        say(f"measuring {name}")
        runs.append(MethodRun(name, "baseline", "-", label, measure(ranker, hyd, prepared, k)))
    reference = runs[-1]
    overlay: list[dict[str, Any]] = []

    def overlay_of(graph: str, snap: Snapshot) -> dict[str, Any]:
        return {"graph": graph, **overlay_test(base_snap.nodes["id"], base_snap.edges, snap.edges)}

    for v in versions:
        snap = store.load(v)
        say(f"measuring version {snap.version}")
        tcounts = snap.manifest.get("counters", {}).get("traces", {})
        runs.append(
            MethodRun(
                f"version:{snap.version}",
                "version",
                "as given",
                f"committed version (round {snap.round}, window {snap.manifest.get('window')})",
                measure_snapshot(snap, prepared, k, rconf),
                simulated=_simulated(tcounts),
                extra={"version": snap.version, "round": snap.round, "window": snap.manifest.get("window")},
            )
        )
        overlay.append(overlay_of(f"version:{snap.version}", snap))
    timings["baselines_and_versions"] = time.perf_counter() - t
    graph = None
    if config.graph_ablation:
        t = time.perf_counter()
        say(f"graph ablation: seeds only against propagation with k = {', '.join(map(str, GRAPH_KS))}")
        graph = graph_ablation(base_snap, prepared, k, rconf, hyd)
        timings["graph_ablation"] = time.perf_counter() - t

    result: dict[str, Any] = {
        "segos_eval": STUDY_FORMAT,
        "store": str(store.root),
        "base_version": base_snap.version,
        "library": base_snap.manifest.get("library", {}),
        "skills": base_snap.nodes.height,
        "k": k,
        "queries": {
            "path": str(queries_path) if queries_path else None,
            "n": len(prepared),
            "skipped": queries.skipped,
            "unknown_gold": unknown_gold,
            "with_pairs": sum(1 for q in prepared if q.pairs),
        },
        "bootstrap": {
            "n_boot": config.n_boot,
            "level": config.level,
            "seed": config.seed,
            "reference": REFERENCE,
        },
        "leakage": {
            "measure": "mean over the query's gold skills of the share of the skill's signature tokens "
            "(name, domain, tooling, capability, description, examples, I/O, entrypoints; stemmed, "
            "stopwords removed) that the query contains",
            "thresholds": list(LEAKAGE_THRESHOLDS),
            "counts": {b: sum(q.bucket == b for q in prepared) for b in LEAKAGE_BUCKETS},
            "overlap": {
                "min": min(q.overlap for q in prepared),
                "median": float(np.median([q.overlap for q in prepared])),
                "max": max(q.overlap for q in prepared),
            },
        },
        "traces": None,
    }

    deployment: list[MethodRun] = []
    transfer: list[MethodRun] = []
    rounds: dict[str, list[dict[str, Any]]] = {}
    if traces is not None and not traces.empty and config.factorial:
        full = cell_name(FULL)
        source = TraceSource(traces, prepared, config)
        all_tasks = {q.task for q in prepared}
        if config.split_by not in ("task", "gold"):
            raise ValueError(f"split_by must be 'task' or 'gold', got {config.split_by!r}")
        groups = (
            {q.task: "|".join(sorted(q.gold_names)) for q in prepared} if config.split_by == "gold" else None
        )
        half_a, half_b = split_tasks([q.task for q in prepared], config.seed, groups)
        given = trace_counts(traces.frame)
        sim_label = " [SIMULATED traces included]" if traces.simulate > 0 or given["simulated"] else ""
        result["traces"] = {
            "sources": traces.sources,
            "read": given["traces"],
            "real": given["real"],
            "simulated_in_files": given["simulated"],
            "simulated_per_evolution": traces.simulate,
            "unmatched_to_query_tasks": source.unmatched,
            "includes_simulated": bool(sim_label),
            "label": "includes SIMULATED traces" if sim_label else "real traces only",
        }

        # ---- deployment: evolve on T, measure T
        t = time.perf_counter()
        say(f"deployment: evolving the 2³ factorial on the traces of {len(all_tasks)} tasks{sim_label}")
        dep_frame = source.frame(base_snap, all_tasks, salt=1)
        dep_cells = evolve_cells(base_snap, dep_frame, config, CELLS, "deployment")
        for cell in CELLS:
            name = cell_name(cell)
            ev = dep_cells[name]
            say(f"deployment: measuring factorial:{name}")
            deployment.append(
                MethodRun(
                    f"factorial:{name}",
                    "factorial",
                    "deployment",
                    f"{name} evolved on the traces of the measured tasks (deployment){sim_label}",
                    reference.results if not any(cell) else measure_snapshot(ev.snapshot, prepared, k, rconf),
                    simulated=_simulated(ev.traces),
                    extra={"evolved_from": ev.traces, "counters": ev.counters},
                )
            )
            if cell[0]:
                overlay.append(overlay_of(f"factorial:{name} (deployment)", ev.snapshot))
        success = config.evolution.success_threshold
        say(f"deployment: measuring {PROBE}")
        deployment.append(
            MethodRun(
                PROBE,
                "probe",
                "deployment",
                f"{PROBE_LABEL}, on the traces of the measured tasks (deployment){sim_label}",
                measure(BM25Ranker(with_requests(base_snap.nodes, dep_frame, success)), hyd, prepared, k),
                simulated=_simulated(trace_counts(dep_frame)),
            )
        )
        timings["deployment"] = time.perf_counter() - t

        # ---- transfer: evolve on one half, measure the other, both ways
        t = time.perf_counter()
        fold_results: dict[str, list[QueryResult | None]] = {
            cell_name(c): [None] * len(prepared) for c in CELLS
        }
        fold_traces: dict[str, dict[str, int]] = {}
        probe_results: list[QueryResult | None] = [None] * len(prepared)
        traced_of: list[str] = [""] * len(prepared)
        fold_snaps: list[tuple[set[str], set[str], Snapshot]] = []
        for fold, (train, test) in enumerate(((half_a, half_b), (half_b, half_a)), start=1):
            train_set, test_set = set(train), set(test)
            test_q = [q for q in prepared if q.task in test_set]
            say(
                f"transfer fold {fold}: evolving on {len(train)} tasks, "
                f"measuring {len(test_q)} queries{sim_label}"
            )
            frame = source.frame(base_snap, train_set, salt=10 * fold + 1)
            fold_traces[f"fold{fold}"] = trace_counts(frame)
            cells = evolve_cells(base_snap, frame, config, CELLS, f"transfer{fold}")
            for cell in CELLS:
                name = cell_name(cell)
                res = (
                    measure_snapshot(cells[name].snapshot, test_q, k, rconf)
                    if any(cell)
                    else [reference.results[q.index] for q in test_q]
                )
                for q, r in zip(test_q, res, strict=True):
                    fold_results[name][q.index] = r
            fold_snaps.append((train_set, test_set, cells[full].snapshot))
            probe = BM25Ranker(with_requests(base_snap.nodes, frame, success))
            traced = traced_skills(frame, success)
            for q, r in zip(test_q, measure(probe, hyd, test_q, k), strict=True):
                probe_results[q.index] = r
                traced_of[q.index] = gold_traced(q, traced)
        for cell in CELLS:
            name = cell_name(cell)
            transfer.append(
                MethodRun(
                    f"factorial:{name}",
                    "factorial",
                    "transfer",
                    f"{name} evolved on the other half of the tasks (transfer){sim_label}",
                    [r for r in fold_results[name] if r is not None],
                    simulated=sim_label != "",
                    extra={"evolved_from": fold_traces},
                )
            )
        transfer.append(
            MethodRun(
                PROBE,
                "probe",
                "transfer",
                f"{PROBE_LABEL}, on the other half of the tasks (transfer){sim_label}",
                [r for r in probe_results if r is not None],
                simulated=sim_label != "",
            )
        )
        result["learning"] = learning_split(
            traced_of,
            {m.method: m.results for m in (reference, *transfer)},
            (f"factorial:{full}", PROBE),
        )
        timings["transfer"] = time.perf_counter() - t
        result["transfer_split"] = {
            "seed": config.seed,
            "by": config.split_by,
            "half_a": half_a,
            "half_b": half_b,
        }

        # ---- multi-round curve (round 1 is the factorial's full cell)
        t = time.perf_counter()
        rounds = {"deployment": [], "transfer": []}
        static = {**summarize(reference.results), "round": 0}
        rounds["deployment"].append(_round_row(static, None))
        rounds["transfer"].append(_round_row(static, None))
        dep_snap = dep_cells[full].snapshot
        dep_res = next(r for r in deployment if r.method == f"factorial:{full}").results
        tr_res = next(r for r in transfer if r.method == f"factorial:{full}").results
        for r in range(1, config.rounds + 1):
            if r > 1:
                say(f"round {r}: deployment{sim_label}")
                frame = source.frame(dep_snap, all_tasks, salt=100 * r + 1)
                dep_snap = evolve_cells(dep_snap, frame, config, [FULL], f"deployment-r{r}")[full].snapshot
                dep_res = measure_snapshot(dep_snap, prepared, k, rconf)
                say(f"round {r}: transfer (2 folds){sim_label}")
                stitched: list[QueryResult | None] = [None] * len(prepared)
                new_folds = []
                for fold, (train_set, test_set, snap) in enumerate(fold_snaps, start=1):
                    frame = source.frame(snap, train_set, salt=100 * r + 10 * fold + 1)
                    snap = evolve_cells(snap, frame, config, [FULL], f"transfer{fold}-r{r}")[full].snapshot
                    test_q = [q for q in prepared if q.task in test_set]
                    for q, res in zip(test_q, measure_snapshot(snap, test_q, k, rconf), strict=True):
                        stitched[q.index] = res
                    new_folds.append((train_set, test_set, snap))
                fold_snaps = new_folds
                tr_res = [x for x in stitched if x is not None]
            ov = overlay_of(f"round {r} (deployment)", dep_snap)
            if r > 1:
                overlay.append(ov)
            rounds["deployment"].append(
                _round_row(
                    {**summarize(dep_res), "round": r}, compare(dep_res, reference.results, config), ov
                )
            )
            rounds["transfer"].append(
                _round_row({**summarize(tr_res), "round": r}, compare(tr_res, reference.results, config))
            )
        timings["rounds"] = time.perf_counter() - t

    # ---- assemble
    base_entries = [method_entry(r, reference, prepared, config) for r in runs]
    dep_entries = [method_entry(r, reference, prepared, config) for r in deployment]
    tr_entries = [method_entry(r, reference, prepared, config) for r in transfer]
    result["methods"] = base_entries + dep_entries
    result["protocols"] = {
        "deployment": {
            "description": "evolve on the traces of the query tasks T, re-measure T (what a deployment sees "
            "on the tasks it was traced on; inflated by construction)",
            "methods": base_entries + dep_entries,
        },
        "transfer": {
            "description": "split the tasks into two halves by a hash of the task id; evolve on one half's "
            "traces, measure the other half, both ways, pooled over all queries (what a new task sees)",
            "methods": base_entries + tr_entries,
        },
    }
    if not deployment:
        note = "no traces given: no factorial, protocols or rounds (pass --traces/--window/--simulate)"
        result["protocols"]["deployment"]["note"] = note
        result["protocols"]["transfer"]["note"] = note
    result["rounds"] = rounds
    result["overlay"] = overlay
    result["graph"] = graph
    result["per_query"] = {
        "task": [q.task for q in prepared],
        "overlap": [round(q.overlap, 4) for q in prepared],
        "bucket": [q.bucket for q in prepared],
        "methods": {
            f"{r.method}{'' if r.protocol in ('-', 'as given') else f' ({r.protocol})'}": {
                "hit": [r2.metrics.hit for r2 in r.results],
                "recall": [round(r2.metrics.recall, 4) for r2 in r.results],
                "best_rank": [r2.metrics.best_rank for r2 in r.results],
            }
            for r in runs + deployment + transfer
        },
    }
    timings["total"] = time.perf_counter() - t_all
    result["timings_s"] = {key: round(v, 3) for key, v in timings.items()}
    result["findings"] = findings(result)
    say(f"study done in {timings['total']:.1f}s")
    return result


def learning_split(
    traced_of: Sequence[str], results: dict[str, list[QueryResult]], evolved: Sequence[str]
) -> dict[str, Any]:
    """Transfer results split by whether the query's gold skills had traces on the evolution side: what a
    round learned for the skills it saw, and what it cost the skills it did not (SPEC §8: new and rarely
    used skills must not be starved), for the cold start and each of `evolved`."""
    groups = ("traced", "untraced", "mixed")
    out: dict[str, Any] = {
        "by": "whether the query's gold skills were used on successful traces of the other half (transfer)",
        "counts": {g: sum(t == g for t in traced_of) for g in groups},
        "methods": {},
    }
    for method in (REFERENCE, *evolved):
        res = results.get(method)
        if res is None:
            continue
        out["methods"][method] = {
            g: summarize([r for r, t in zip(res, traced_of, strict=True) if t == g])
            for g in groups
            if out["counts"][g]
        }
    return out


def _round_row(
    summary: dict[str, Any], vs: dict[str, Any] | None, overlay: dict[str, Any] | None = None
) -> dict[str, Any]:
    row = {
        "round": summary["round"],
        **{key: summary[key] for key in CORE},
        "mean_best_rank": summary["mean_best_rank"],
        "pair_corecovery": summary["pair_corecovery"],
    }
    if vs is not None:
        row["vs_static"] = vs
    if overlay is not None:
        row["overlay"] = {
            key: overlay[key] for key in ("induced_pairs", "merged_components", "newly_connected_nodes")
        }
    return row
