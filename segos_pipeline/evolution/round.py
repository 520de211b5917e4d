"""One evolution round: version N + a window of traces → version N+1 (SPEC §8, §9).

Fixed order: attempt selection → retrieval reconstruction → L1 topology → L2 weights → L3 descriptions
→ commit. The node set never changes. The new manifest records parent, window, configs and every rule's
counters; every description revision is stored with the version, and so are the round's traces: a window
read from the store's files is referenced by hash (`window_files`) with what the round added to each
selected trace, in bucket files the engine wrote (`round-NNNNN.parquet`, `engines/round_parts.py`) and the
commit moves into the version; a table given in memory is stored whole (`traces.parquet`).

A round on the served version becomes the served version once committed when its held-out check passed
(`counters.experience.gate.passed`; a round without experience has no check that could fail) and
`EvolutionConfig.auto_promote` is on; a round on any other version (an old window re-run) never moves the
pointer (`store/served.py`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import EngineConfig, EvolutionConfig, RetrievalConfig, retrieval_for
from ..graph.build import commit_derived
from ..graph.transition import recorded_transition
from ..progress import Progress
from ..retrieval.lexical import LexicalIndex
from ..retrieval.ranker import Retriever
from ..retrieval.round_traces import ROUND_TRACES
from ..store.layout import EXPERIENCE, REVISIONS, WINDOW_FILES, window_refs
from ..store.served import advance
from ..store.snapshot import Snapshot, SnapshotStore
from ..text.lexicon import Signature
from ..text.token_rows import EncodedTokens
from .descriptions import REVISION_SCHEMA, description_update
from .editor import Editor
from .engines import Engine, TraceInput, make_engine
from .engines.round_parts import RoundParts, bucket_count, buckets_of_table, round_scratch
from .engines.store_window import store_window
from .evidence import WindowEvidence
from .experience import gate, held_out_pairs, merged_experience
from .ingest import TraceStore
from .topology import topology_update
from .weights import weight_update


def draft_snapshot(
    parent: Snapshot,
    nodes: pl.DataFrame,
    tokens: pl.DataFrame,
    edges: pl.DataFrame,
    experience: pl.DataFrame | None = None,
    transition: sp.csr_matrix | None = None,
) -> Snapshot:
    """An in-memory version (not committed) for replaying queries inside a round (with the parent's
    experience unless given; `transition`: the operator of `edges` when the caller has it)."""
    if transition is None:
        transition = recorded_transition(edges, parent.nodes["id"], parent.manifest)
    return Snapshot(
        version=f"{parent.version}+draft",
        path=None,
        manifest={"config": parent.manifest.get("config", {})},
        nodes=nodes,
        token_table=tokens,
        edges=edges,
        transition=transition,
        experience_table=parent.experience if experience is None else experience,
    )


@dataclass
class RoundState:
    """What flows between the stages of one round; after L3 it holds the tables of the next version."""

    parent: Snapshot
    round: int
    # The round's traces after attempt selection and retrieval reconstruction, when the window came as a
    # table in memory; None when it was read from files (`files`), which the version then references.
    selected: pl.DataFrame | None
    evidence: WindowEvidence  # the window's summed evidence (what L1, L2, L3 and experience read)
    edges: pl.DataFrame
    nodes: pl.DataFrame
    tokens: pl.DataFrame
    revisions: pl.DataFrame
    counters: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)  # which engine computed the evidence, its metrics
    files: list[Path] | None = None  # the window's Parquet files, when it was read from files
    window_refs: list[dict[str, Any]] | None = None  # those files as hashed by an engine that read a URI
    round_parts: RoundParts | None = None  # the version's round bucket files, written by the engine
    experience: pl.DataFrame | None = None  # the next version's experience (None: the parent's, unchanged)
    # What a stage built that a later one needs again, kept so that it is built once (pure speed): the
    # operator of an edge table, the lexical index of a token table (the parent's and the latest revised
    # one), and the integer rows of the latest revised table (its signature), each with the table it was
    # built from, matched by identity: a stage that changes a table makes a new one.
    built_operator: tuple[pl.DataFrame, sp.csr_matrix] | None = None
    built_lexical: list[tuple[pl.DataFrame, LexicalIndex]] = field(default_factory=list)
    built_rows: tuple[pl.DataFrame, EncodedTokens] | None = None

    def transition(self) -> sp.csr_matrix:
        """The transition operator of the round's current edges over the parent's nodes (a round never
        changes the node set), with the parent's γ: what the committed version stores (built on first use)."""
        if self.built_operator is None or self.built_operator[0] is not self.edges:
            operator = recorded_transition(self.edges, self.parent.nodes["id"], self.parent.manifest)
            self.built_operator = (self.edges, operator)
        return self.built_operator[1]

    def lexical_of(self, tokens: pl.DataFrame) -> LexicalIndex | None:
        """The lexical index a stage built of exactly this token table, if any."""
        return next((index for table, index in self.built_lexical if table is tokens), None)

    def signature_of(self, tokens: pl.DataFrame) -> Signature | None:
        """The signature of this token table when a stage holds its integer rows (a revised table)."""
        if self.built_rows is None or self.built_rows[0] is not tokens:
            return None
        return self.built_rows[1].signature()

    @property
    def added(self) -> pl.DataFrame:
        """Per selected trace what the round adds to the window (outcome, reconstructed retrieval), whole
        and in trace-id order: for small rounds and tests (a large round's stays in its bucket files)."""
        if self.round_parts is not None:
            return self.round_parts.read()
        return self.evidence.added


def prepare_round(
    parent: Snapshot,
    traces: TraceInput,
    config: EvolutionConfig,
    retrieval: RetrievalConfig,
    engine: Engine | None = None,
    progress: Progress | None = None,
) -> RoundState:
    """Attempt selection, retrieval reconstruction against the parent, and the window's evidence, run by
    `engine` (local by default) per partition of the window and summed."""
    engine = engine or make_engine()
    result = engine.window_evidence(parent, traces, config, retrieval, progress)
    ev = result.evidence
    state = RoundState(
        parent=parent,
        round=parent.round + 1,
        selected=result.selected,
        evidence=ev,
        edges=parent.edges,
        nodes=parent.nodes,
        tokens=parent.tokens,
        revisions=pl.DataFrame(schema=REVISION_SCHEMA),
        timings={
            k: result.timings[k]
            for k in ("read", "select_and_reconstruct", "evidence")
            if k in result.timings
        },
        engine=result.metrics,
        files=result.files,
        window_refs=result.window_refs,
        round_parts=result.round_parts,
    )
    state.counters["traces"] = dict(ev.counts)
    return state


def l1_stage(state: RoundState, config: EvolutionConfig) -> RoundState:
    """L1 topology update (in place on `state`; a no-op when the layer is switched off)."""
    t = time.perf_counter()
    if config.l1_topology:
        ev = state.evidence
        l1 = topology_update(
            state.edges, state.parent.nodes, ev.workflow, ev.ordered, ev.couse, config, state.round
        )
        state.edges = l1.edges
        state.counters["l1"] = l1.counters
    state.timings["l1"] = time.perf_counter() - t
    return state


def l2_stage(state: RoundState, config: EvolutionConfig) -> RoundState:
    """L2 edge-weight update (in place on `state`)."""
    t = time.perf_counter()
    if config.l2_weights:
        ev = state.evidence
        l2 = weight_update(state.edges, ev.workflow, ev.ordered, ev.couse, ev.unused, config, state.round)
        state.edges = l2.edges
        state.counters["l2"] = l2.counters
    state.timings["l2"] = time.perf_counter() - t
    return state


def l3_stage(
    state: RoundState,
    config: EvolutionConfig,
    retrieval: RetrievalConfig,
    editor: Editor | None = None,
    progress: Progress | None = None,
) -> RoundState:
    """L3 description update on the round's graph (in place on `state`).

    The round builds one lexical index at most (a further one only when its verification reverts a
    revision): the round's graph shares the parent's nodes and tokens, so its retriever takes the
    parent's index from the store's cache (a parent without one gets it built and cached once, for every
    round from it), and the verification pass builds one over the revised token table, only when a
    revision passed both gates.
    """
    t = time.perf_counter()
    if config.l3_descriptions:
        parent, edges = state.parent, state.edges
        draft = draft_snapshot(parent, state.nodes, state.tokens, edges, transition=state.transition())
        if state.nodes is parent.nodes and state.tokens is parent.tokens and parent.path is not None:
            # The same text as the stored parent: its derived caches (keyed by content) hold for the draft.
            draft = replace(draft, path=parent.path, manifest=parent.manifest, _cache={})
        retriever = Retriever(draft, retrieval)
        state.built_lexical.append((state.tokens, retriever.lexical))

        encoded: list[EncodedTokens] = []  # the round's token rows, coded once, on the first rebuild
        latest: list[tuple[LexicalIndex, EncodedTokens]] = []  # the last rebuild's index and rows

        def rebuild(new_nodes: pl.DataFrame, fresh: pl.DataFrame, changed: np.ndarray) -> Retriever:
            # Only the text changed: the draft with the revised text keeps its edges and operator. Its
            # lexical index is built from the round's integer token rows with the revised skills' rows
            # (`fresh`) spliced in: the index the revised table gives, without coding the library's
            # strings again.
            if not encoded:  # the round's index holds this table's vocabulary: not sorted again
                vocab = retriever.lexical.vocab.tokens
                encoded.append(EncodedTokens.of_table(state.tokens, state.nodes.height, vocab=vocab))
            rows = encoded[0].revised(fresh)
            lexical = LexicalIndex.of(rows, retrieval)
            latest[:] = [(lexical, rows)]  # a set reverted on verification is let go
            revised = replace(
                draft,
                version=f"{parent.version}+revised",
                path=None,
                manifest={"config": parent.manifest.get("config", {})},
                nodes=new_nodes,
                token_table=None,
                _cache={},
            )
            return Retriever(revised, retrieval, lexical=lexical)

        l3 = description_update(retriever, state.evidence, config, retrieval.top_n, editor, rebuild, progress)
        if l3.tokens is not state.tokens and latest:
            # revisions were kept: the last rebuild was of exactly that set (every earlier one reverted
            # some), so its index is the gate's and its rows give the commit's signature
            lexical, rows = latest[0]
            state.built_lexical.append((l3.tokens, lexical))
            state.built_rows = (l3.tokens, rows)
        state.nodes, state.tokens, state.revisions = l3.nodes, l3.tokens, l3.revisions
        state.counters["l3"] = l3.counters
    state.timings["l3"] = time.perf_counter() - t
    return state


def experience_stage(state: RoundState, config: EvolutionConfig, retrieval: RetrievalConfig) -> RoundState:
    """The round's experience (SPEC §8), checked on the held-out traces before it is kept (in place)."""
    t = time.perf_counter()
    if config.experience and config.l3_descriptions:
        parent, ev = state.parent, state.evidence
        learned = merged_experience(
            parent.experience, ev.experience, state.nodes["id"], state.round, config.experience_per_skill
        )
        # The parent's text and the round's (L3's revisions applied) were both indexed by L3: reused.
        before = Retriever(parent, retrieval, lexical=state.lexical_of(parent.tokens))
        draft = draft_snapshot(parent, state.nodes, state.tokens, state.edges, learned, state.transition())
        lexical = state.lexical_of(state.tokens)
        if lexical is None and state.tokens is parent.tokens:
            lexical = before.lexical
        after = Retriever(draft, retrieval, lexical=lexical)
        depth = max(_GATE_DEPTH, retrieval.top_n)
        pairs = held_out_pairs(ev.holdout, config.experience_gate_traces)
        checked = gate(
            pairs,
            lambda text: before.ranked_ids(text, depth),
            lambda text: after.ranked_ids(text, depth),
            depth,
            retrieval.top_n,
        )
        state.experience = learned if checked.passed else parent.experience
        state.counters["experience"] = {
            "witnesses_in_window": ev.experience.height,
            "held_out_rows": ev.holdout.height,
            "rows_before": parent.experience.height,
            "rows_after": state.experience.height,
            "skills_with_experience": state.experience["skill"].n_unique(),
            "committed": checked.passed,
            "gate": checked.as_dict(),
        }
    state.timings["experience"] = time.perf_counter() - t
    return state


# Held-out used skills are looked for among this many ranked skills (reciprocal rank 0 below it).
_GATE_DEPTH = 20


def commit_round(
    store: SnapshotStore,
    state: RoundState,
    window: str,
    config: EvolutionConfig,
    retrieval: RetrievalConfig,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Commit the round as a child of its parent; the manifest records window, configs and counters."""
    parent_config = state.parent.manifest.get("config", {})
    total = sum(state.timings.values())
    parts: RoundParts | None = None
    if state.selected is not None:
        traces: dict[str, Any] = {ROUND_TRACES: state.selected}
        refs: dict[str, Any] = {}
    else:
        parts = state.round_parts
        if parts is None:  # an engine that returned the table whole: bucketed here, alike
            buckets = bucket_count(state.evidence.counts["in_window"])
            parts = buckets_of_table(round_scratch(state.parent), state.evidence.added, buckets)
        # the store's writer puts each bucket file into the version (linked, or copied file to file)
        traces = dict(parts.placed())
        if state.window_refs is not None:
            refs = {WINDOW_FILES: state.window_refs}
        else:
            assert state.files is not None, "a round without its traces in memory was read from files"
            refs = {WINDOW_FILES: window_refs(store.root, state.files)}
    manifest = commit_derived(
        store,
        state.parent,
        state.edges,
        kind="evolved",
        nodes=state.nodes,
        tokens=state.tokens,
        extra={
            "round": state.round,
            "window": window,
            "config": {**parent_config, "evolution": asdict(config), "retrieval": asdict(retrieval)},
            "counters": state.counters,
            "timings_s": {**{k: round(v, 4) for k, v in state.timings.items()}, "total": round(total, 4)},
            "engine": state.engine,
            **refs,
            **(extra or {}),
        },
        extra_tables={
            **traces,
            REVISIONS: state.revisions,
            **({EXPERIENCE: state.experience} if state.experience is not None else {}),
        },
        transition=state.transition(),
        signature=state.signature_of(state.tokens),
    )
    if parts is not None:
        parts.remove()  # in the version now; a failed commit leaves them to the round's end
    serve_if_kept(store, manifest, config)
    return manifest


def serve_if_kept(store: SnapshotStore, manifest: dict[str, Any], config: EvolutionConfig) -> bool:
    """Serve a committed round when it extends the served version and its held-out check passed (unless
    `auto_promote` is off); True when the served pointer moved to it."""
    gate_result = manifest.get("counters", {}).get("experience", {}).get("gate", {})
    if not config.auto_promote or not gate_result.get("passed", True):
        return False
    reason = f"round {manifest.get('round')} on window {manifest.get('window')}: held-out check passed"
    return advance(store, manifest, reason)


def evolve_round(
    parent: Snapshot,
    traces: TraceInput,
    config: EvolutionConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    editor: Editor | None = None,
    progress: Progress | None = None,
    engine: Engine | None = None,
) -> RoundState:
    """The pure core of a round (no store writes): tables of the next version and the counters."""
    config = config or EvolutionConfig()
    retrieval = retrieval or retrieval_for(parent.manifest)
    say = progress or (lambda _msg: None)
    state = prepare_round(parent, traces, config, retrieval, engine, progress)
    t = state.counters["traces"]
    say(
        f"round {state.round}: {t['selected']} of {t['in_window']} traces kept, "
        f"{t['retrieval_reconstructed']} with reconstructed retrieval"
    )
    l1_stage(state, config)
    if "l1" in state.counters:
        say(
            "L1: "
            + ", ".join(f"{r} +{c['induced']}" for r, c in state.counters["l1"].items() if "induced" in c)
        )
    l2_stage(state, config)
    if "l2" in state.counters:
        c = state.counters["l2"]
        say(f"L2: {c['edges_reinforced']} reinforced, {c['semantic_edges_attenuated']} semantic halved")
    l3_stage(state, config, retrieval, editor, progress)
    if "l3" in state.counters:
        c = state.counters["l3"]
        say(f"L3: {c['committed']} description(s) committed of {c['examined']} examined")
    experience_stage(state, config, retrieval)
    if "experience" in state.counters:
        c = state.counters["experience"]
        g = c["gate"]
        verdict = "kept" if c["committed"] else "NOT kept (held-out ranks worse)"
        say(
            f"experience: {c['rows_after']} request(s) on {c['skills_with_experience']} skill(s), {verdict}; "
            f"held-out MRR {g['mrr_before']:.3f} -> {g['mrr_after']:.3f} over {g['pairs']} pair(s)"
        )
    return state


def evolve(
    store: SnapshotStore | str,
    window: str,
    from_version: str | None = None,
    config: EvolutionConfig | None = None,
    retrieval: RetrievalConfig | None = None,
    editor: Editor | None = None,
    progress: Progress | None = None,
    traces: TraceInput | None = None,
    engine: Engine | EngineConfig | None = None,
) -> dict[str, Any]:
    """Make version N+1 from version N (`from_version`, default latest) and the window's traces.

    Every engine reads the window's Parquet files itself (the local one partition by partition), so the
    window never has to fit in this process; the files read are the ones the version references.
    """
    store = store if isinstance(store, SnapshotStore) else SnapshotStore(store)
    config = config or EvolutionConfig()
    engine = make_engine(engine) if isinstance(engine, EngineConfig | None) else engine
    parent = store.load(from_version)
    retrieval = retrieval or retrieval_for(parent.manifest)
    if traces is None and store.local_root is None:  # a store at a URI (`RemoteStore`)
        traces = store_window(store, window)  # listed only: an engine that reads URIs reads it there
    elif traces is None:
        traces = window_files(TraceStore(store), window)
    state = evolve_round(parent, traces, config, retrieval, editor, progress, engine)
    return commit_round(store, state, window, config, retrieval)


def window_files(trace_store: TraceStore, window: str) -> list[Path]:
    """The Parquet files of a window as they are now (a later ingest into it adds files the round and the
    version it commits do not see), each part checked against its hash: a damaged one is refused by name."""
    files = trace_store.checked_files(window)
    if not files:
        trace_store.scan(window)  # raises the store's own "no traces ingested for window" error
    return files
