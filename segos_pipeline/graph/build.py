"""Cold-start build: library folder → node table → semantic edges → operator → a committed version."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl
import scipy.sparse as sp

from ..config import SEMANTIC, BuildConfig, GraphConfig
from ..progress import Progress, Tick
from ..store.layout import REPORT
from ..store.parts import NewPart, split_rows
from ..store.snapshot import Snapshot, SnapshotStore
from ..text.lexicon import Signature
from ..text.token_rows import EncodedTokens, TokenMerger
from .edges import counts_by_relation
from .parsing import ParsedLibrary, parse_library
from .semantic_edges import SemanticStats, semantic_edges
from .transition import recorded_transition, transition_matrix


@dataclass
class GraphTables:
    """Everything a version holds besides its manifest."""

    nodes: pl.DataFrame
    # the token table in integer columns, which the store writes part by part without ever holding the
    # whole string table
    tokens: EncodedTokens
    edges: pl.DataFrame
    transition: sp.csr_matrix
    semantic: SemanticStats
    signature: Signature  # stored with the version


class DecodedParts(Sequence[NewPart]):
    """The store's parts of a node table and its encoded tokens, each decoded to strings only when the
    store writes it, so one part's string rows are held at a time."""

    def __init__(self, nodes: pl.DataFrame, tokens: EncodedTokens):
        self.nodes, self.tokens = nodes, tokens
        self.ranges = split_rows(nodes.height)

    def __len__(self) -> int:
        return len(self.ranges)

    def __getitem__(self, i: int) -> NewPart:  # type: ignore[override]  # no slices: the store iterates
        a, b = self.ranges[i]
        return NewPart(self.nodes[a:b], self.tokens.rows(a, b, local=True))


def library_fingerprint(nodes: pl.DataFrame) -> str:
    """sha256 over `id NUL content_hash LF` of every skill in id order (one string, hashed once)."""
    if nodes.height == 0:
        return hashlib.sha256().hexdigest()
    keys = nodes.select("id", "content_hash")  # not the whole table: a sort would copy every body
    lines = keys.sort("id").select(pl.concat_str("id", pl.lit("\0"), "content_hash", pl.lit("\n")))
    return hashlib.sha256(lines.to_series().str.join("").item().encode()).hexdigest()


def parse_stage(
    library: str | Path, config: BuildConfig, progress: Progress | None = None
) -> tuple[ParsedLibrary, EncodedTokens]:
    """Parse `library` and tokenise its skills: the first stage of every cold start (`segos build` and the
    Dagster cold start alike). The parse workers tokenise the chunks they parse, on every core, and their
    tables are merged here as they come back; out of id order, the sorted node table is tokenised instead
    (the same table: `tests/integration/test_build_scale.py`)."""
    say = progress or (lambda _msg: None)
    merged = TokenMerger()
    parsed = parse_library(
        library,
        config.parse,
        progress=lambda n, total: say(Tick("parse packages", n, total)),
        per_chunk=EncodedTokens.of_nodes,
        on_chunk=merged.add,  # while the workers parse on
    )
    say(f"parsed {parsed.nodes.height} skills; {parsed.report.height} problem(s) in the build report")
    tokens = parsed_tokens(parsed, merged) or tokenise(parsed.nodes, say)
    say(f"tokenised {parsed.nodes.height} skills into {tokens.height} (skill, field, token) rows")
    return parsed, tokens


def require_skills(parsed: ParsedLibrary, library: str | Path, allow_empty: bool) -> None:
    """A library without a single skill package is an error (nothing is committed) unless `allow_empty`:
    an empty version would become the latest, and a following service would serve nothing from it."""
    if parsed.nodes.height == 0 and not allow_empty:
        raise ValueError(
            f"no skill packages (folders with a SKILL.md) under {library}; nothing committed "
            "(--allow-empty commits an empty version)"
        )


def tokenise(nodes: pl.DataFrame, progress: Progress | None = None) -> EncodedTokens:
    say = progress or (lambda _msg: None)
    return EncodedTokens.tokenise(nodes, lambda n: say(Tick("tokenise skills", n, nodes.height)))


def semantic_stage(
    nodes: pl.DataFrame, tokens: EncodedTokens, config: BuildConfig, progress: Progress | None = None
) -> tuple[Signature, pl.DataFrame, SemanticStats]:
    """The skills' token signature and their semantic kNN edges (the second stage of a cold start)."""
    say = progress or (lambda _msg: None)
    signature = tokens.signature()
    edges, stats = semantic_edges(
        nodes["id"],
        signature.matrix,
        config.graph,
        progress=lambda i, n: say(Tick("similarity join blocks", i, n)),
    )
    say(
        f"semantic graph: {stats.directed_edges} edges, {stats.unordered_pairs} pairs, "
        f"{len(signature.vocab)} tokens"
    )
    return signature, edges, stats


def graph_tables(
    nodes: pl.DataFrame,
    config: BuildConfig,
    progress: Progress | None = None,
    tokens: EncodedTokens | None = None,
) -> GraphTables:
    """Tokens (unless given: the parse workers' own), semantic edges and operator of a node table (the pure
    core of a cold-start build)."""
    tokens = tokenise(nodes, progress) if tokens is None else tokens
    signature, edges, stats = semantic_stage(nodes, tokens, config, progress)
    transition = transition_matrix(edges, nodes["id"], config.transition)
    return GraphTables(nodes, tokens, edges, transition, stats, signature)


def library_record(root: Path, nodes: pl.DataFrame) -> dict[str, Any]:
    """A manifest's `library`: the root the skill ids are relative to, its fingerprint and size."""
    return {"root": str(root.resolve()), "fingerprint": library_fingerprint(nodes), "skills": nodes.height}


def graph_counts(
    nodes: pl.DataFrame, edges: pl.DataFrame, transition: sp.csr_matrix, semantic: SemanticStats | None = None
) -> dict[str, Any]:
    """What a manifest's `counts` says of the graph: skills, edges (by relation), the semantic graph's
    statistics when given, and the operator's entries."""
    return {
        "skills": nodes.height,
        "edges": edges.height,
        "edges_by_relation": counts_by_relation(edges),
        **({"semantic": semantic.as_dict()} if semantic is not None else {}),
        "transition_nnz": int(transition.nnz),
    }


def commit_cold_start(
    store: SnapshotStore,
    parsed: ParsedLibrary,
    tables: GraphTables,
    config: BuildConfig,
    timings: dict[str, float],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a cold-start version: the graph tables, the build report, and its manifest last."""
    severity = dict(parsed.report.group_by("severity").len().iter_rows()) if parsed.report.height else {}
    manifest = {
        "kind": "cold_start",
        "parent": None,
        "round": 0,
        "window": None,
        "library": library_record(parsed.root, tables.nodes),
        "config": config.to_dict(),
        "counts": {
            **graph_counts(tables.nodes, tables.edges, tables.transition, tables.semantic),
            "problems": parsed.report.height,
            "problems_by_severity": {k: int(v) for k, v in severity.items()},
        },
        "timings_s": {k: round(v, 4) for k, v in timings.items()},
        **(extra or {}),
    }
    return store.write_parts(
        parts=DecodedParts(tables.nodes, tables.tokens),
        signature=tables.signature,
        edges=tables.edges,
        transition=tables.transition,
        manifest=manifest,
        extra_tables={REPORT: parsed.report},
    )


def parsed_tokens(parsed: ParsedLibrary, merged: TokenMerger) -> EncodedTokens | None:
    """The token table of the chunks the parse workers tokenised (`merged` as they came); None when their
    chunks were not in id order (nested packages, or a folder name that is another's prefix followed by a
    character before "/"), and the table has to be tokenised from the sorted node table."""
    return merged.result() if parsed.in_order else None


def build_cold_start(
    library: str | Path,
    store: str | Path | SnapshotStore,
    config: BuildConfig | None = None,
    progress: Progress | None = None,
    allow_empty: bool = False,
) -> dict[str, Any]:
    """Parse `library`, build the cold-start graph and commit it as a new version; returns the manifest.

    A library without a single skill package is an error (nothing is committed) unless `allow_empty`: an
    empty version would become the latest, and a following service would serve nothing from it."""
    config = config or BuildConfig()
    store = store if isinstance(store, SnapshotStore) else SnapshotStore(store)
    say = progress or (lambda _msg: None)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    parsed, tokens = parse_stage(library, config, say)
    timings["parse"] = time.perf_counter() - t0
    require_skills(parsed, library, allow_empty)
    t1 = time.perf_counter()
    tables = graph_tables(parsed.nodes, config, say, tokens=tokens)
    timings["graph"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    manifest = commit_cold_start(store, parsed, tables, config, timings)
    timings["write"] = time.perf_counter() - t2
    say(f"committed {manifest['version']} in {time.perf_counter() - t0:.2f}s")
    return manifest


def commit_derived(
    store: SnapshotStore,
    parent: Snapshot,
    edges: pl.DataFrame,
    *,
    kind: str,
    nodes: pl.DataFrame | None = None,
    tokens: pl.DataFrame | None = None,
    extra: dict[str, Any] | None = None,
    extra_tables: dict[str, pl.DataFrame] | None = None,
    transition: sp.csr_matrix | None = None,
    signature: Signature | None = None,
) -> dict[str, Any]:
    """Commit a child of `parent` with a new edge table (and optionally new nodes/tokens).

    The operator is built here, once per version, with the parent's transition config, unless the caller
    already built it (`transition`: an evolution round's, of these edges and nodes); so is the signature
    of `tokens` (`signature`: `Signature.of` them, when the caller derived it faster). Node and token parts
    equal to the parent's are linked from it rather than written again.
    """
    nodes = parent.nodes if nodes is None else nodes
    tokens = parent.tokens if tokens is None else tokens
    if transition is None:
        transition = recorded_transition(edges, nodes["id"], parent.manifest)
    inherited = {k: parent.manifest[k] for k in ("library", "config") if k in parent.manifest}
    manifest = {
        "kind": kind,
        "parent": parent.version,
        "round": parent.round,
        "window": None,
        **inherited,
        **(extra or {}),
    }
    manifest["counts"] = {**manifest.get("counts", {}), **graph_counts(nodes, edges, transition)}
    return store.write(
        nodes=nodes,
        tokens=tokens,
        edges=edges,
        transition=transition,
        manifest=manifest,
        base=parent,
        extra_tables=extra_tables,
        signature=signature,
    )


def knn_variant(snapshot: Snapshot, knn_k: int) -> Snapshot:
    """The version with its cold-start `semantic` edges rebuilt for another k (every other relation kept),
    as an in-memory draft: what a different kNN graph would retrieve, without committing anything
    (SPEC §6.9: the graph must earn its place)."""
    config = snapshot.manifest.get("config", {})
    graph = GraphConfig(**{**config.get("graph", {}), "knn_k": knn_k})
    semantic, _ = semantic_edges(snapshot.nodes["id"], snapshot.signature().matrix, graph)
    edges = pl.concat([snapshot.edges.filter(pl.col("relation") != SEMANTIC), semantic]).sort(
        "src", "dst", "relation"
    )
    return Snapshot(
        version=f"{snapshot.version}+k{knn_k}",
        path=None,
        manifest={"config": {**config, "graph": asdict(graph)}},
        nodes=snapshot.nodes,
        token_table=snapshot.tokens,
        edges=edges,
        transition=recorded_transition(edges, snapshot.nodes["id"], snapshot.manifest),
    )
