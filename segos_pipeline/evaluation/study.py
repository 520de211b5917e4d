"""The offline replay study (SPEC §10): does the graph help, does evolution help, and by how much.

One run measures, on the same library, queries, k and budgets:

- baselines: flat BM25 (`bm25s` over name + description + body), lexical seeds without propagation,
  forward-only PPR, and reverse-aware PPR on the cold start (`ppr`, the reference of every comparison);
- every evolved version given (`version:<id>`), as committed (protocol "as given": we do not know which
  tasks their traces covered);
- when traces are given, the 2³ factorial over L1/L2/L3 (`factorial:static` … `factorial:L1+L2+L3`), each
  cell evolved in memory from the same traces with `evolve_round` and replayed from a draft snapshot, under
  two protocols, always both:
  * deployment: evolve on the traces of the query tasks T, re-measure T;
  * transfer: split the tasks deterministically into halves A and B, evolve on A's traces and measure B,
    then the other way round (2-fold cross-fitting), so every query is measured by a graph that never saw
    its task and the comparison with the baselines stays paired over all queries;
- a multi-round curve (rounds 1..R of the full L1+L2+L3 round on the same trace source, both protocols);
- the overlay test: the induced navigation edges added to the cold start's semantic backbone, counting
  merged components and newly connected nodes (zero on both: the typed layer adds no reach);
- leakage buckets: every metric by how much of the gold skills' signature text the query repeats;
- paired bootstrap intervals (over queries, fixed seed) for each method's difference from `ppr`.

Simulated traces (`simulate=N`) are regenerated against each round's parent from the tasks of the
evolution side only (never the measured half in transfer) and are labelled SIMULATED everywhere.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ..config import SEMANTIC, TRAVERSABLE, EvolutionConfig, RetrievalConfig, retrieval_for
from ..evolution.adapters import FORMATS, iter_records
from ..evolution.adapters.common import Rejected
from ..evolution.ingest import TraceStore
from ..evolution.round import RoundState, draft_snapshot, evolve_round
from ..evolution.traces import TRACE_SCHEMA, TraceRecord, resolve_skills, trace_frame
from ..graph.build import knn_variant
from ..graph.transition import edge_indices
from ..retrieval.ranker import Retriever, render_skill
from ..store.snapshot import Snapshot, SnapshotStore
from ..text.lexicon import SIGNATURE_FIELDS
from ..text.names import SkillNames
from ..text.tokens import token_set, tokenize
from .metrics import (
    LEAKAGE_BUCKETS,
    LEAKAGE_THRESHOLDS,
    QueryMetrics,
    aggregate,
    format_ci,
    leakage_bucket,
    pair_corecovery,
    paired_bootstrap,
    percentile,
    query_metrics,
    rank_by_score,
)
from .replay import EvalQuery, QueryFile, gold_sets
from .simulate import SimulationConfig, simulate

STUDY_FORMAT = 1
REFERENCE = "ppr"
CORE = ("hit", "recall", "comp", "mrr")
# Per-query values that the bootstrap compares (mrr's per-query value is the reciprocal rank).
PER_QUERY = {"hit": "hit", "recall": "recall", "comp": "comp", "mrr": "rr"}
# The 2³ factorial, static first and the full round last (the order tables and charts use).
CELLS: tuple[tuple[bool, bool, bool], ...] = (
    (False, False, False),
    (True, False, False),
    (False, True, False),
    (False, False, True),
    (True, True, False),
    (True, False, True),
    (False, True, True),
    (True, True, True),
)
FULL = (True, True, True)
Progress = Callable[[str], None]


def cell_name(cell: tuple[bool, bool, bool]) -> str:
    parts = [layer for layer, on in zip(("L1", "L2", "L3"), cell, strict=True) if on]
    return "+".join(parts) or "static"


# ------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class StudyConfig:
    k: int = 5
    rounds: int = 3  # multi-round curve length (0 disables it)
    n_boot: int = 2000
    level: float = 0.95
    seed: int = 0  # bootstrap resamples, the task split's tie-break and the simulator all derive from it
    simulate: int = 0  # simulated traces added to the evolution source per evolution (0: none)
    factorial: bool = True
    graph_ablation: bool = True  # seeds only vs propagation over k ∈ GRAPH_KS (SPEC §6.9)
    # Unit of the transfer split: "task" (task ids) or "gold" (tasks with the same gold set stay together).
    split_by: str = "task"
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)


# ------------------------------------------------------------------------------------------ queries


@dataclass
class StudyQuery:
    index: int
    task: str  # the query's task id (`line-N` when the file gives none): the unit of the transfer split
    query: str
    gold_names: list[str]
    gold: list[set[str]]
    pairs: list[tuple[set[str], set[str]]]  # gold dependency pairs, empty when the file gives none
    overlap: float  # leakage measure (see `metrics.overlap_fraction`)
    bucket: str

    def eval_query(self) -> EvalQuery:
        return EvalQuery(self.query, self.gold_names, self.task)


def _gold_pairs(q: EvalQuery) -> list[tuple[str, str]]:
    """Explicit `pairs: [[a, b], ...]`, or consecutive gold names when the line says `gold_ordered: true`
    (a plan: each step depends on the previous one)."""
    raw = q.extra.get("pairs")
    if isinstance(raw, list):
        return [
            (p[0], p[1])
            for p in raw
            if isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
        ]
    if q.extra.get("gold_ordered") is True:
        return list(zip(q.gold, q.gold[1:], strict=False))
    return []


def signature_sets(snapshot: Snapshot) -> dict[str, set[str]]:
    """Skill id → its signature tokens (the structured fields, no body): the text a query can echo."""
    ids = snapshot.nodes["id"]
    sig = (
        snapshot.tokens.filter(pl.col("field").is_in(SIGNATURE_FIELDS))
        .group_by("node")
        .agg(pl.col("token").unique())
    )
    return {str(ids[int(node)]): set(tokens) for node, tokens in sig.iter_rows()}


def prepare_queries(
    queries: Sequence[EvalQuery], snapshot: Snapshot, names: SkillNames
) -> tuple[list[StudyQuery], list[str]]:
    """Resolve gold names and pairs once (the node set never changes across versions) and bucket each
    query by its overlap with its gold skills' signature text."""
    sigs = signature_sets(snapshot)
    out, unknown = [], set()
    for i, q in enumerate(queries):
        gold, missing = gold_sets(names, q.gold)
        unknown.update(missing)
        pairs = []
        for a, b in _gold_pairs(q):
            (sa, sb), miss = gold_sets(names, [a, b])
            unknown.update(miss)
            pairs.append((sa, sb))
        qtok = token_set(q.query)
        # A duplicated gold name is as leaky as its most echoed package; unknown names have no text.
        per_item = [
            max(len(sigs.get(s, set()) & qtok) / max(len(sigs.get(s, set())), 1) for s in item)
            for item in gold
            if item
        ]
        overlap = sum(per_item) / len(per_item) if per_item else 0.0
        task = q.task or f"line-{q.line or i + 1}"
        out.append(StudyQuery(i, task, q.query, list(q.gold), gold, pairs, overlap, leakage_bucket(overlap)))
    return out, sorted(unknown)


def split_tasks(
    tasks: Sequence[str], seed: int = 0, groups: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """Two disjoint halves of the distinct task ids, by a hash of the id (stable across runs, machines and
    query-file order; not tuned to the data). The first half gets the odd task when the count is odd.

    With `groups` (task → group key), a group never straddles the halves: groups are taken in hash order
    and fill the first half up to half the tasks, so templated variants of one task (API-Bank's "weather in
    London" / "weather in Paris") cannot leak from the evolution side into the measured side.
    """
    distinct = sorted(set(tasks))
    key_of = groups or {t: t for t in distinct}
    members: dict[str, list[str]] = {}
    for t in distinct:
        members.setdefault(key_of.get(t, t), []).append(t)
    order = sorted(members, key=lambda g: (hashlib.sha256(f"{seed}:{g}".encode()).hexdigest(), g))
    target = (len(distinct) + 1) // 2
    half_a: list[str] = []
    half_b: list[str] = []
    for g in order:
        (half_a if len(half_a) < target else half_b).extend(members[g])
    return sorted(half_a), sorted(half_b)


# ---------------------------------------------------------------------------------------- rankers


class Ranker(Protocol):
    def ranked_ids(self, query: str, k: int) -> list[str]: ...


class BM25Ranker:
    """Flat BM25 (`bm25s`) over each skill's name + description + body, English stopwords removed."""

    def __init__(self, nodes: pl.DataFrame):
        import bm25s  # imported here: only the study needs it, and it is slow to import

        self._bm25s = bm25s
        corpus = [
            f"{n} {d or ''} {b or ''}" for n, d, b in nodes.select("name", "description", "body").iter_rows()
        ]
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
        self.ids = nodes["id"].to_list()

    def ranked_ids(self, query: str, k: int) -> list[str]:
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if not tokens:
            return []
        # Full score vector + our own tie rule, not bm25s' top-k, so ties order the same way every run.
        return [self.ids[i] for i in rank_by_score(self.model.get_scores(tokens), k)]


# The naive probe of SPEC §8 ("Experience"): flat BM25 over each skill's text with the requests of the
# successful traces that used it appended. It learns the traced requests' words, and starves the skills
# without traces; the study measures both beside segos.
PROBE = "bm25+traces"
PROBE_LABEL = (
    "flat BM25 over each skill's text with its successful traces' requests appended (the naive probe)"
)


def with_requests(nodes: pl.DataFrame, frame: pl.DataFrame, success: float) -> pl.DataFrame:
    """The node table with each skill's body followed by the requests of the successful traces of `frame`
    (the trace contract's `queries`, `used`, `reward`) that used it."""
    asked = (
        frame.filter(pl.col("reward") >= success)
        .select(pl.col("queries").list.eval(pl.element().struct.field("text")).alias("text"), "used")
        .explode("used")
        .explode("text")
        .drop_nulls()
        .group_by("used")
        .agg(pl.col("text").sort().str.join(" "))
    )
    return (
        nodes.join(asked, left_on="id", right_on="used", how="left", maintain_order="left")
        .with_columns(
            body=pl.concat_str([pl.col("body").fill_null(""), pl.col("text").fill_null("")], separator=" ")
        )
        .drop("text")
    )


def traced_skills(frame: pl.DataFrame, success: float) -> set[str]:
    """The skills used on a successful trace of `frame`."""
    used = frame.filter(pl.col("reward") >= success)["used"].explode().drop_nulls()
    return set(used.to_list())


def gold_traced(q: StudyQuery, traced: set[str]) -> str:
    """ "traced" when every gold skill of the query was used on a successful trace of the evolution side,
    "untraced" when none was, "mixed" otherwise (a gold name may match several skills: any counts)."""
    hits = [bool(g & traced) for g in q.gold]
    return "traced" if all(hits) else "untraced" if not any(hits) else "mixed"


# ---------------------------------------------------------------------------------------- measuring


@dataclass
class QueryResult:
    metrics: QueryMetrics
    latency_ms: float
    chars: int  # characters of the hydrated bundle of the top k under the retrieval budgets
    pair: float | None  # dependency-pair co-recovery (None without gold pairs)
    ranked: list[str]


class Hydration:
    """Bundle characters of a ranked list, with the retriever's hydration rule (per-skill and global
    budgets, a skill that does not fit is cut), without rendering text per query."""

    def __init__(self, nodes: pl.DataFrame, config: RetrievalConfig):
        self.config = config
        self.index = {sid: i for i, sid in enumerate(nodes["id"].to_list())}
        self.lengths = np.array([len(render_skill(row)) for row in nodes.iter_rows(named=True)], dtype=int)

    def chars(self, ranked: Sequence[str]) -> int:
        total = 0
        for sid in ranked:
            budget = min(self.config.per_skill_chars, self.config.total_chars - total)
            if budget <= 0:
                break
            total += min(int(self.lengths[self.index[sid]]), budget)  # `clip` keeps exactly `budget`
        return total


def measure(ranker: Ranker, hydration: Hydration, queries: Sequence[StudyQuery], k: int) -> list[QueryResult]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        ranked = ranker.ranked_ids(q.query, k)
        latency = (time.perf_counter() - t0) * 1000
        out.append(
            QueryResult(
                query_metrics(ranked, q.gold, k),
                latency,
                hydration.chars(ranked[:k]),
                pair_corecovery(ranked, q.pairs, k),
                ranked[:k],
            )
        )
    return out


def measure_snapshot(
    snapshot: Snapshot, queries: Sequence[StudyQuery], k: int, retrieval: RetrievalConfig
) -> list[QueryResult]:
    return measure(Retriever(snapshot, retrieval), Hydration(snapshot.nodes, retrieval), queries, k)


def summarize(results: Sequence[QueryResult]) -> dict[str, Any]:
    """The replay contract's numbers plus bundle characters and pair co-recovery."""
    pairs = [r.pair for r in results if r.pair is not None]
    lat = [r.latency_ms for r in results]
    chars = [r.chars for r in results]
    return {
        **aggregate([r.metrics for r in results]),
        "latency_ms": {"p50": percentile(lat, 50), "p95": percentile(lat, 95)},
        "bundle_chars": float(np.mean(chars)) if chars else 0.0,
        "bundle_chars_p95": percentile(chars, 95),
        "pair_corecovery": float(np.mean(pairs)) if pairs else None,
        "n_pair_queries": len(pairs),
    }


def per_query_values(results: Sequence[QueryResult], key: str) -> np.ndarray:
    return np.array([getattr(r.metrics, PER_QUERY[key]) for r in results], dtype=float)


def compare(
    results: Sequence[QueryResult], reference: Sequence[QueryResult], config: StudyConfig
) -> dict[str, Any]:
    """Paired bootstrap of results − reference for each core metric (and pair co-recovery on the queries
    that have gold pairs)."""
    out: dict[str, Any] = {}
    for key in CORE:
        out[key] = paired_bootstrap(
            per_query_values(results, key),
            per_query_values(reference, key),
            config.n_boot,
            config.seed,
            config.level,
        )
    keep = [i for i, r in enumerate(reference) if r.pair is not None]
    if keep:
        out["pair_corecovery"] = paired_bootstrap(
            [results[i].pair or 0.0 for i in keep],
            [reference[i].pair or 0.0 for i in keep],
            config.n_boot,
            config.seed,
            config.level,
        )
    return out


def buckets(results: Sequence[QueryResult], queries: Sequence[StudyQuery]) -> dict[str, Any]:
    out = {}
    for b in LEAKAGE_BUCKETS:
        part = [r for r, q in zip(results, queries, strict=True) if q.bucket == b]
        agg = aggregate([r.metrics for r in part])
        pairs = [r.pair for r in part if r.pair is not None]
        out[b] = {
            "n": agg["n"],
            # an empty bucket has no score (None), not a score of 0
            **{key: agg[key] if agg["n"] else None for key in CORE},
            "mean_best_rank": agg["mean_best_rank"],
            "pair_corecovery": float(np.mean(pairs)) if pairs else None,
        }
    return out


# ------------------------------------------------------------------------------------ graph ablation

GRAPH_KS = (1, 2, 3, 5)  # cold-start kNN sizes compared (SPEC §6.9)
LENGTH_BUCKETS = (("short", 0, 20), ("medium", 21, 80), ("long", 81, None))  # query tokens, fixed up front
GOLD_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3+", 3, None))  # gold skills per query


def _in(value: int, lo: int, hi: int | None) -> bool:
    return value >= lo and (hi is None or value <= hi)


def _bucketed(
    results: Sequence[QueryResult], values: Sequence[int], spec: Sequence[tuple[str, int, int | None]]
) -> dict[str, Any]:
    out = {}
    for name, lo, hi in spec:
        agg = aggregate([r.metrics for r, v in zip(results, values, strict=True) if _in(v, lo, hi)])
        out[name] = {"n": agg["n"], **{key: agg[key] if agg["n"] else None for key in CORE}}
    return out


def graph_ablation(
    base: Snapshot, queries: Sequence[StudyQuery], k: int, retrieval: RetrievalConfig, hydration: Hydration
) -> dict[str, Any]:
    """Seeds alone against propagation over cold-start kNN graphs of k ∈ GRAPH_KS (the base version's
    semantic edges rebuilt per k, traced relations kept), overall and per query length and per number of
    gold skills: where, if anywhere, the graph helps (SPEC §6.9)."""
    lengths = [len(tokenize(q.query)) for q in queries]
    n_gold = [len(q.gold) for q in queries]
    runs: list[tuple[str, str, Ranker]] = [
        (
            "seeds_only",
            "lexical (+ semantic) seeds, no propagation",
            Retriever(base, retrieval.with_overrides(propagate=False)),
        )
    ]
    runs += [
        (
            f"ppr_k{kk}",
            f"reverse-aware PPR over the k = {kk} kNN graph",
            Retriever(knn_variant(base, kk), retrieval),
        )
        for kk in GRAPH_KS
    ]
    methods = []
    reference: list[QueryResult] | None = None
    for name, label, ranker in runs:
        results = measure(ranker, hydration, queries, k)
        reference = reference or results
        summary = summarize(results)
        entry = {
            "method": name,
            "label": label,
            **{key: summary[key] for key in (*CORE, "n")},
            "by_length": _bucketed(results, lengths, LENGTH_BUCKETS),
            "by_gold": _bucketed(results, n_gold, GOLD_BUCKETS),
            "vs_seeds_only": {
                key: float(np.mean(per_query_values(results, key) - per_query_values(reference, key)))
                for key in CORE
            },
        }
        methods.append(entry)
    best = max(methods[1:], key=lambda m: (m["recall"], m["comp"], m["hit"]))
    return {
        "version_graph": base.manifest.get("config", {}).get("graph", {}).get("knn_k"),
        "buckets": {
            "length_tokens": {name: [lo, hi] for name, lo, hi in LENGTH_BUCKETS},
            "gold": {name: [lo, hi] for name, lo, hi in GOLD_BUCKETS},
        },
        "methods": methods,
        "best_propagation": best["method"],
        "propagation_helps": bool(best["recall"] > methods[0]["recall"] or best["comp"] > methods[0]["comp"]),
    }


# ------------------------------------------------------------------------------------------ overlay


def overlay_test(node_ids: pl.Series, backbone: pl.DataFrame, evolved: pl.DataFrame) -> dict[str, Any]:
    """Add the evolved graph's induced navigation edges (workflow, dependency, alternative; `avoid` is
    never traversed, so it cannot add reach) to the backbone's semantic edges, undirected.

    - merged_components: connected components before minus after;
    - newly_connected_nodes: nodes with no semantic edge that gain an induced one;
    - nodes_gaining_reach: nodes whose component grew (they can now reach a node they could not);
    - induced_pairs_within_component: induced pairs whose ends were already connected (no new reach).
    """
    n = len(node_ids)
    sem = edge_indices(backbone.filter(pl.col("relation") == SEMANTIC), node_ids)
    induced_rel = [r for r in TRAVERSABLE if r != SEMANTIC]
    ind = edge_indices(evolved.filter(pl.col("relation").is_in(induced_rel)), node_ids)

    def adjacency(u: np.ndarray, v: np.ndarray) -> sp.csr_matrix:
        data = np.ones(len(u), dtype=np.int8)
        return sp.csr_matrix((data, (u, v)), shape=(n, n))

    su, sv = sem["u"].to_numpy(), sem["v"].to_numpy()
    iu, iv = ind["u"].to_numpy(), ind["v"].to_numpy()
    before = adjacency(su, sv)
    after = adjacency(np.concatenate([su, iu]), np.concatenate([sv, iv]))
    c_before, lab_before = connected_components(before, directed=False)
    c_after, lab_after = connected_components(after, directed=False)
    size_before = np.bincount(lab_before, minlength=c_before)[lab_before]
    size_after = np.bincount(lab_after, minlength=c_after)[lab_after]
    sem_degree = np.asarray((before + before.T).astype(bool).sum(axis=1)).ravel()
    touched = np.zeros(n, dtype=bool)
    touched[iu] = True
    touched[iv] = True
    pairs = {(min(a, b), max(a, b)) for a, b in zip(iu.tolist(), iv.tolist(), strict=True)}
    return {
        "induced_edges": len(iu),
        "induced_pairs": len(pairs),
        "induced_by_relation": {r: int(evolved.filter(pl.col("relation") == r).height) for r in induced_rel},
        "components_before": int(c_before),
        "components_after": int(c_after),
        "merged_components": int(c_before - c_after),
        "newly_connected_nodes": int(((sem_degree == 0) & touched).sum()),
        "nodes_gaining_reach": int((size_after > size_before).sum()),
        "induced_pairs_within_component": int(sum(lab_before[a] == lab_before[b] for a, b in pairs)),
    }


# ------------------------------------------------------------------------------------------- traces


@dataclass
class TraceInputs:
    """Traces read from files and ingested windows (skill ids resolved), plus simulated volume."""

    frame: pl.DataFrame
    simulate: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.frame.is_empty() and self.simulate <= 0


def parse_trace_spec(spec: str) -> tuple[Path, str]:
    """`PATH[:FORMAT]`; a suffix that is not a known format is part of the path (paths may hold ':')."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail in FORMATS and head:
        return Path(head), tail
    return Path(spec), "native"


def load_traces(
    specs: Sequence[str],
    windows: Sequence[str],
    store: SnapshotStore,
    base: Snapshot,
    queries_path: Path | None,
    n_simulate: int = 0,
) -> TraceInputs:
    """Read every `PATH[:FORMAT]` source (skill names resolved against the base version, rejected inputs
    counted, never fatal) and every already-ingested window of the store."""
    names = SkillNames(base.nodes)
    frames, sources = [], []
    for spec in specs:
        path, fmt = parse_trace_spec(spec)
        accepted: list[TraceRecord] = []
        rejected: list[str] = []
        for item in iter_records(path, fmt, queries=queries_path):
            if isinstance(item, Rejected):
                rejected.append(item.reason)
            else:
                accepted.append(resolve_skills(item, names))
        frame = trace_frame(accepted) if accepted else pl.DataFrame(schema=TRACE_SCHEMA)
        frames.append(frame)
        sources.append(
            {
                "source": str(path),
                "format": fmt,
                "accepted": frame.height,
                "rejected": len(rejected),
                "simulated": int(frame["simulated"].sum()) if frame.height else 0,
            }
        )
    trace_store = TraceStore(store)
    for w in windows:
        frame = trace_store.load(w)
        frames.append(frame)
        sources.append(
            {
                "source": f"window {w}",
                "format": "ingested",
                "accepted": frame.height,
                "rejected": 0,
                "simulated": int(frame["simulated"].sum()),
            }
        )
    frame = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=TRACE_SCHEMA)
    if frame.height:
        frame = frame.unique(subset="trace_id", keep="first", maintain_order=True)
    if n_simulate > 0:
        sources.append(
            {"source": "simulator (SIMULATED)", "format": "simulated", "per_evolution": n_simulate}
        )
    return TraceInputs(frame, n_simulate, sources)


def _task_of(task_id: str, known: set[str]) -> str | None:
    """The query task a trace belongs to: its task id, or `task` of a simulated instance `task@n`."""
    if task_id in known:
        return task_id
    head = task_id.rsplit("@", 1)[0]
    return head if head in known else None


class TraceSource:
    """The traces one evolution sees: the real ones of the given tasks, plus simulated traffic generated
    against the parent (a fresh seed per round and fold, so every round sees new simulated traffic)."""

    def __init__(self, inputs: TraceInputs, queries: Sequence[StudyQuery], config: StudyConfig):
        self.inputs, self.queries, self.config = inputs, list(queries), config
        known = {q.task for q in queries}
        ids = inputs.frame["task_id"].to_list() if inputs.frame.height else []
        self.task_col = pl.Series("_task", [_task_of(t, known) for t in ids], dtype=pl.String)
        self.unmatched = int(self.task_col.null_count())

    def frame(self, parent: Snapshot, tasks: set[str], salt: int) -> pl.DataFrame:
        parts = []
        if self.inputs.frame.height:
            keep = self.task_col.is_in(list(tasks)).fill_null(False)
            parts.append(self.inputs.frame.filter(keep))
        if self.inputs.simulate > 0:
            tasks_q = [q.eval_query() for q in self.queries if q.task in tasks]
            if tasks_q:
                sim = simulate(
                    Retriever(parent, self.config.retrieval),
                    tasks_q,
                    SimulationConfig(traces=self.inputs.simulate, seed=self.config.seed * 1000 + salt),
                )
                parts.append(trace_frame(sim))
        return pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=TRACE_SCHEMA)


def _trace_counts(frame: pl.DataFrame) -> dict[str, int]:
    sim = int(frame["simulated"].sum()) if frame.height else 0
    return {"traces": frame.height, "real": frame.height - sim, "simulated": sim}


# ------------------------------------------------------------------------------------------ evolving


def _draft(parent: Snapshot, state: RoundState, label: str) -> Snapshot:
    snap = draft_snapshot(parent, state.nodes, state.tokens, state.edges, state.experience)
    snap.version = label
    snap.manifest = {**snap.manifest, "round": state.round}  # so a next round numbers itself right
    return snap


def _layer_config(base: EvolutionConfig, cell: tuple[bool, bool, bool]) -> EvolutionConfig:
    return base.with_overrides(l1_topology=cell[0], l2_weights=cell[1], l3_descriptions=cell[2])


def _counters_summary(state: RoundState) -> dict[str, Any]:
    c = state.counters
    return {
        "traces": c.get("traces", {}),
        "induced": {r: v.get("induced", 0) for r, v in c.get("l1", {}).items() if isinstance(v, dict)},
        "l2": {k: v for k, v in c.get("l2", {}).items() if isinstance(v, int | float)},
        "descriptions_committed": c.get("l3", {}).get("committed", 0),
    }


@dataclass
class Evolved:
    snapshot: Snapshot
    counters: dict[str, Any]
    traces: dict[str, int]


def evolve_cells(
    parent: Snapshot,
    traces: pl.DataFrame,
    config: StudyConfig,
    cells: Sequence[tuple[bool, bool, bool]],
    label: str,
) -> dict[str, Evolved]:
    """One in-memory round per factorial cell from the same traces (the static cell is the parent)."""
    out = {}
    counts = _trace_counts(traces)
    for cell in cells:
        name = cell_name(cell)
        if not any(cell):
            out[name] = Evolved(parent, {}, counts)
            continue
        state = evolve_round(parent, traces, _layer_config(config.evolution, cell), config.retrieval)
        out[name] = Evolved(_draft(parent, state, f"{label}:{name}"), _counters_summary(state), counts)
    return out


# --------------------------------------------------------------------------------------------- runs


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
        overlay.append(
            {
                "graph": f"version:{snap.version}",
                **overlay_test(base_snap.nodes["id"], base_snap.edges, snap.edges),
            }
        )
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
        source = TraceSource(traces, prepared, config)
        all_tasks = {q.task for q in prepared}
        if config.split_by not in ("task", "gold"):
            raise ValueError(f"split_by must be 'task' or 'gold', got {config.split_by!r}")
        groups = (
            {q.task: "|".join(sorted(q.gold_names)) for q in prepared} if config.split_by == "gold" else None
        )
        half_a, half_b = split_tasks([q.task for q in prepared], config.seed, groups)
        sim_label = (
            " [SIMULATED traces included]"
            if traces.simulate > 0 or int(traces.frame["simulated"].sum() if traces.frame.height else 0)
            else ""
        )
        result["traces"] = {
            "sources": traces.sources,
            "read": traces.frame.height,
            "real": traces.frame.height - int(traces.frame["simulated"].sum() if traces.frame.height else 0),
            "simulated_in_files": int(traces.frame["simulated"].sum()) if traces.frame.height else 0,
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
                overlay.append(
                    {
                        "graph": f"factorial:{name} (deployment)",
                        **overlay_test(base_snap.nodes["id"], base_snap.edges, ev.snapshot.edges),
                    }
                )
        success = config.evolution.success_threshold
        say(f"deployment: measuring {PROBE}")
        deployment.append(
            MethodRun(
                PROBE,
                "probe",
                "deployment",
                f"{PROBE_LABEL}, on the traces of the measured tasks (deployment){sim_label}",
                measure(BM25Ranker(with_requests(base_snap.nodes, dep_frame, success)), hyd, prepared, k),
                simulated=_simulated(_trace_counts(dep_frame)),
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
            fold_traces[f"fold{fold}"] = _trace_counts(frame)
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
            fold_snaps.append((train_set, test_set, cells[cell_name(FULL)].snapshot))
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
            (f"factorial:{cell_name(FULL)}", PROBE),
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
        dep_snap = dep_cells[cell_name(FULL)].snapshot
        dep_res = next(r for r in deployment if r.method == f"factorial:{cell_name(FULL)}").results
        tr_res = next(r for r in transfer if r.method == f"factorial:{cell_name(FULL)}").results
        for r in range(1, config.rounds + 1):
            if r > 1:
                say(f"round {r}: deployment{sim_label}")
                frame = source.frame(dep_snap, all_tasks, salt=100 * r + 1)
                dep_snap = evolve_cells(dep_snap, frame, config, [FULL], f"deployment-r{r}")[
                    cell_name(FULL)
                ].snapshot
                dep_res = measure_snapshot(dep_snap, prepared, k, rconf)
                say(f"round {r}: transfer (2 folds){sim_label}")
                stitched: list[QueryResult | None] = [None] * len(prepared)
                new_folds = []
                for fold, (train_set, test_set, snap) in enumerate(fold_snaps, start=1):
                    frame = source.frame(snap, train_set, salt=100 * r + 10 * fold + 1)
                    snap = evolve_cells(snap, frame, config, [FULL], f"transfer{fold}-r{r}")[
                        cell_name(FULL)
                    ].snapshot
                    test_q = [q for q in prepared if q.task in test_set]
                    for q, res in zip(test_q, measure_snapshot(snap, test_q, k, rconf), strict=True):
                        stitched[q.index] = res
                    new_folds.append((train_set, test_set, snap))
                fold_snaps = new_folds
                tr_res = [x for x in stitched if x is not None]
            ov = overlay_test(base_snap.nodes["id"], base_snap.edges, dep_snap.edges)
            if r > 1:
                overlay.append({"graph": f"round {r} (deployment)", **ov})
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


# ----------------------------------------------------------------------------------------- findings


def _verdict(c: dict[str, Any]) -> str:
    if c["lo"] > 0:
        return "better"
    if c["hi"] < 0:
        return "worse"
    return "no clear difference"


def findings(result: dict[str, Any]) -> list[str]:
    """Plain sentences on where the graph or evolution helps and, above all, where it does not.

    A difference counts only when its bootstrap interval excludes zero; everything else is reported as
    no clear difference, never as a gain.
    """
    out: list[str] = []
    k = result["k"]
    by = {m["method"]: m for m in result["methods"]}
    level = int(result["bootstrap"]["level"] * 100)

    def line(method: str, what: str, sign: int = -1) -> None:
        """`what` is how `method` relates to ppr; sign −1 reports ppr − method (so + means PPR wins)."""
        m = by.get(method)
        if m is None or "vs_ppr" not in m:
            return
        parts = []
        verdicts = set()
        for key in ("hit", "recall", "comp", "mrr"):
            c = m["vs_ppr"][key]
            flipped = {"diff": -c["diff"], "lo": -c["hi"], "hi": -c["lo"]} if sign < 0 else c
            verdicts.add(_verdict(flipped))
            parts.append(f"{key} {format_ci(flipped)}")
        if verdicts == {"no clear difference"}:
            head = f"{what}: no clear difference at k={k} on any metric"
        elif verdicts <= {"better", "no clear difference"}:
            head = f"{what}: PPR is better on some metrics at k={k}" if sign < 0 else f"{what}: better"
        elif verdicts <= {"worse", "no clear difference"}:
            head = f"{what}: PPR is WORSE on some metrics at k={k}" if sign < 0 else f"{what}: WORSE"
        else:
            head = f"{what}: mixed"
        out.append(f"{head} ({level}% CI of the difference: {'; '.join(parts)}).")

    line("bm25", "Graph retrieval (ppr) vs flat BM25")
    line("lexical", "Graph propagation (ppr) vs lexical seeds alone")
    line("forward_ppr", "Reverse-aware (ppr) vs forward-only propagation")
    for m in result["methods"]:
        if m["kind"] == "version":
            c = m["vs_ppr"]["recall"]
            out.append(
                f"{m['method']} vs the cold start: recall@{k} {format_ci(c)} ({_verdict(c)}), "
                f"hit@{k} {format_ci(m['vs_ppr']['hit'])} ({_verdict(m['vs_ppr']['hit'])})."
            )

    for proto in ("deployment", "transfer"):
        cells = [
            m
            for m in result["protocols"][proto]["methods"]
            if m["kind"] == "factorial" and m["method"] != "factorial:static"
        ]
        if not cells:
            continue
        sim = " (evolution source includes SIMULATED traces)" if cells[0].get("simulated") else ""
        helped = [m["method"] for m in cells if _verdict(m["vs_ppr"]["recall"]) == "better"]
        hurt = [m["method"] for m in cells if _verdict(m["vs_ppr"]["recall"]) == "worse"]
        flat = [m["method"] for m in cells if _verdict(m["vs_ppr"]["recall"]) == "no clear difference"]
        msg = f"Evolution, {proto} protocol{sim}: recall@{k} vs the static graph is "
        bits = []
        if helped:
            bits.append(f"better for {', '.join(helped)}")
        if flat:
            bits.append(f"not clearly different for {', '.join(flat)}")
        if hurt:
            bits.append(f"WORSE for {', '.join(hurt)}")
        out.append(msg + "; ".join(bits) + ".")
    dep = {m["method"]: m for m in result["protocols"]["deployment"]["methods"]}
    tr = {m["method"]: m for m in result["protocols"]["transfer"]["methods"]}
    full = f"factorial:{cell_name(FULL)}"
    if full in dep and full in tr:
        gap = dep[full]["recall"] - tr[full]["recall"]
        gain_t = tr[full]["recall"] - by[REFERENCE]["recall"]
        out.append(
            f"The full round's recall@{k} is {dep[full]['recall']:.3f} when re-measuring the traced tasks "
            f"and {tr[full]['recall']:.3f} on unseen tasks (gap {gap:+.3f}); on unseen tasks the gain over "
            f"the static graph is {gain_t:+.3f}."
            + (" The deployment gain does not carry over to unseen tasks." if gap > 0.01 else "")
        )

    for proto, rows in (result.get("rounds") or {}).items():
        if len(rows) < 3:
            continue
        rec = [r["recall"] for r in rows]
        curve = ", ".join(f"{x:.3f}" for x in rec)
        best = int(np.argmax(rec))
        if best == 0 and max(rec[1:]) < rec[0] - 1e-9:
            out.append(
                f"Multi-round ({proto}): no round beats the static graph on recall@{k} "
                f"(rounds 0..{len(rec) - 1}: {curve})."
            )
        elif rec[-1] < max(rec) - 1e-9 and best < len(rec) - 1:
            out.append(
                f"Multi-round ({proto}): recall@{k} peaks at round {best} and then falls "
                f"(rounds 0..{len(rec) - 1}: {curve}): more rounds on the same source REVERSE the gain."
            )
        elif abs(rec[-1] - rec[1]) < 0.01:
            out.append(f"Multi-round ({proto}): recall@{k} plateaus after round 1 (rounds 0..: {curve}).")
        else:
            out.append(f"Multi-round ({proto}): recall@{k} keeps moving (rounds 0..: {curve}).")

    # Identical overlay numbers (e.g. every cell with L1 induces the same edges) are said once.
    groups: dict[tuple[int, int, int, int], list[str]] = {}
    for ov in result.get("overlay", []):
        key = (
            ov["induced_pairs"],
            ov["merged_components"],
            ov["newly_connected_nodes"],
            ov["induced_pairs_within_component"],
        )
        groups.setdefault(key, []).append(ov["graph"])
    for (pairs, merged, newly, within), graphs in groups.items():
        who = ", ".join(graphs)
        if merged == 0 and newly == 0:
            out.append(
                f"Overlay ({who}): {pairs} induced pair(s) merge no component and connect no isolated "
                "skill: the typed layer adds no reach over the semantic backbone (it only re-weights "
                "paths that already exist)."
            )
        else:
            out.append(
                f"Overlay ({who}): {pairs} induced pair(s) merge {merged} component(s) and connect "
                f"{newly} previously isolated skill(s); {within} pair(s) join skills that were already "
                "connected."
            )

    counts = result["leakage"]["counts"]
    ref_b = by[REFERENCE]["buckets"]
    filled = [b for b in LEAKAGE_BUCKETS if counts[b]]
    if len(filled) >= 2:
        lo_b, hi_b = filled[0], filled[-1]
        out.append(
            f"Leakage: ppr recall@{k} is {ref_b[lo_b]['recall']:.3f} on {lo_b}-overlap queries "
            f"(n={counts[lo_b]}) and {ref_b[hi_b]['recall']:.3f} on {hi_b}-overlap queries "
            f"(n={counts[hi_b]})."
        )
        for other in ("bm25", "lexical"):
            ob = by[other]["buckets"]
            out.append(
                f"Leakage: ppr's recall@{k} advantage over {other} by bucket is "
                + ", ".join(
                    f"{b} {ref_b[b]['recall'] - ob[b]['recall']:+.3f} (n={counts[b]})" for b in filled
                )
                + "."
            )
        for proto in ("deployment", "transfer"):
            cell = {m["method"]: m for m in result["protocols"][proto]["methods"]}.get(full)
            if cell is None:
                continue
            gains = {b: cell["buckets"][b]["recall"] - ref_b[b]["recall"] for b in filled}
            out.append(
                f"Leakage, {proto}: the full round's recall gain over static by bucket is "
                + ", ".join(f"{b} {g:+.3f} (n={counts[b]})" for b, g in gains.items())
                + "."
            )
    else:
        out.append(
            "Leakage: every query falls in one overlap bucket "
            f"({', '.join(f'{b}={n}' for b, n in counts.items())}), so the buckets cannot separate echoed "
            "from paraphrased queries on this set."
        )
    return out


# --------------------------------------------------------------------------------- Dagster headline


def headline_numbers(
    snapshot: Snapshot,
    base: Snapshot,
    queries: QueryFile,
    k: int = 5,
    retrieval: RetrievalConfig | None = None,
) -> dict[str, float]:
    """Flat `eval.<method>.<metric>@k` numbers for one version next to the baselines on its cold start
    (bm25, lexical, ppr), cheap enough to attach to every version as orchestrator metadata."""
    rconf = retrieval or retrieval_for(base.manifest)
    prepared, _ = prepare_queries(queries.queries, base, SkillNames(base.nodes))
    if not prepared:
        return {}
    hyd = Hydration(base.nodes, rconf)
    rows = {
        "bm25": measure(BM25Ranker(base.nodes), hyd, prepared, k),
        "lexical": measure(Retriever(base, rconf.with_overrides(propagate=False)), hyd, prepared, k),
        "ppr": measure(Retriever(base, rconf), hyd, prepared, k),
        "version": measure_snapshot(snapshot, prepared, k, rconf),
    }
    out: dict[str, float] = {}
    for name, res in rows.items():
        s = summarize(res)
        for key in CORE:
            out[f"eval.{name}.{key}@{k}" if key != "mrr" else f"eval.{name}.mrr"] = round(float(s[key]), 4)
    out[f"eval.version_minus_ppr.recall@{k}"] = round(
        out[f"eval.version.recall@{k}"] - out[f"eval.ppr.recall@{k}"], 4
    )
    return out


def config_dict(config: StudyConfig) -> dict[str, Any]:
    return asdict(config)
