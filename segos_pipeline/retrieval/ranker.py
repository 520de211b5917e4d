"""Bundle retrieval over a loaded snapshot (SPEC §6).

lexical seeds → reverse-aware PPR → rerank ρ = s* + μ·m → top-N with avoid-pair pruning → hydration under
per-skill and global character budgets. Everything that does not depend on the query (lexical matrix,
operator and its push rows, avoid adjacency) is built once in `Retriever.__init__`.

Query cost follows the query, not the library: lexical evidence is read from the postings of the query's
tokens (lexical.py), and PPR runs by local push (push.py) with residual threshold ε, whose work is at most
1/(α·ε) edges however large the seeds' component is (an evolved graph joins most of a library into one).
Scores are held over the skills with evidence; the dense arrays a Ranking exposes are filled only there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import AVOID, RetrievalConfig, TransitionConfig, retrieval_for
from ..graph.transition import edge_indices, transition_matrix
from ..store.snapshot import Snapshot
from ..text.excerpts import clip
from ..text.names import SkillNames
from .bundle import Bundle, BundleSkill, hydrate_texts, render_skill
from .experience import CoUse, ExperienceEvidence, ExperienceIndex, clauses, experience_index
from .incidence import Incidence
from .lexical import Evidence, LexicalIndex, index_for
from .packages import Folders
from .push import PushOperator, PushResult
from .semantic import SemanticIndex, semantic_index
from .sets import scattered, top_k, union_positions, value_at
from .why import headline, learned, reasons


@dataclass(frozen=True)
class Relevance:
    """How well some skills (in the order asked) match a query in absolute terms, comparable across
    queries (the evidence that ranks them is normalised per query, so the best of nothing scores like the
    best of a real match).

    `words`: the share of the query's word weight that the skill's text, or its closest witnessing
    request, holds (`Evidence.words`). `cosine`: the embedding similarity of the text or closest
    witness to the query (None when the query was not embedded). `value`: the larger of the words share and
    `relevance_cosine_weight` × a text's cosine, the cosine counting alone (unweighted) for a text (the
    skill's, or a witnessing request's) that shares no word with the query, at most 1."""

    words: np.ndarray
    cosine: np.ndarray | None
    value: np.ndarray


@dataclass(frozen=True)
class Members:
    """What a bundle holds (`Retriever.members`): node indices in rank order, avoid-pruned ids, their
    relevance, and whether nothing reached the floor `floor`."""

    chosen: list[int]
    pruned: list[dict[str, str]]
    relevance: Relevance
    no_match: bool
    floor: float


@dataclass(frozen=True)
class RowPatch:
    """Skills re-scored as if their text had changed, without rebuilding anything: lexical rows
    ({node: {column: value}}, see `LexicalIndex.row_patch`) and semantic vectors ({node: vector})."""

    lexical: dict[int, dict[int, float]] = field(default_factory=dict)
    vectors: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass(eq=False)
class Ranking:
    """The ranking of one query: ρ over its candidates, the skills with seed or graph mass (sorted indices
    into the node table; nothing else is ever ranked). Held over those skills only; the dense views over
    all n skills are made on first use.

    A ranking cut at a depth (`Retriever.rank(query, depth=k)`) holds the candidates that may rank among
    the k best (`complete` is False): `top(j)` for j ≤ k is the ranking's, `order` only its head."""

    n: int
    candidates: np.ndarray
    scores: np.ndarray  # ρ of each candidate
    seeds: np.ndarray
    graph_nodes: np.ndarray  # s* where it is positive (nodes, mass)
    graph_mass: np.ndarray
    evidence: Evidence  # lexical
    semantic_nodes: np.ndarray | None = None  # None: the query was not embedded
    semantic_z: np.ndarray | None = None
    experience: ExperienceEvidence | None = None  # None: the version has no experience
    co_use: CoUse | None = None  # None: no companion of the best candidate was raised
    query_vector: np.ndarray | None = None  # unit; None: the query was not embedded
    query: str = ""
    fusion: float = 0.0  # λ of m = (1 − λ)·lexical + λ·semantic (semantic only when the query was embedded)

    @property
    def complete(self) -> bool:
        return self.evidence.complete

    def top(self, n: int) -> np.ndarray:
        return self.candidates[top_k(self.scores, np.arange(len(self.candidates)), n)]

    @cached_property
    def order(self) -> np.ndarray:
        """Every candidate, best first (a full sort: for rank lookups, not for bundles)."""
        c = self.candidates
        return c[np.lexsort((c, -self.scores))]

    def position(self, node: int) -> int | None:
        """1-based position of `node` in this ranking (None when it has no evidence)."""
        hits = np.flatnonzero(self.order == node)
        return int(hits[0]) + 1 if len(hits) else None

    def score_of(self, node: int) -> float:
        """ρ of one skill (0 when it is no candidate)."""
        return value_at(self.candidates, self.scores, node)

    def graph_of(self, node: int) -> float:
        """s* of one skill."""
        return value_at(self.graph_nodes, self.graph_mass, node)

    def experience_of(self, node: int) -> float:
        """What experience added to ρ of one skill."""
        return self.experience.at(node) if self.experience is not None else 0.0

    def co_use_of(self, node: int) -> float:
        """The score co-use completion gave one skill (0 when its own evidence was more)."""
        return self.co_use.of(node) if self.co_use is not None else 0.0

    def semantic_of(self, node: int) -> float:
        """z of one skill (0 when the query was not embedded)."""
        if self.semantic_nodes is None or self.semantic_z is None:
            return 0.0
        return value_at(self.semantic_nodes, self.semantic_z, node)

    def own_of(self, node: int) -> float:
        """m of one skill: its own text's evidence, lexical and semantic fused as in its score."""
        lexical = self.evidence.at(node)
        if self.semantic_nodes is None:
            return lexical
        return (1.0 - self.fusion) * lexical + self.fusion * self.semantic_of(node)


_CARDS = 4_096  # hydrated skills kept per Retriever (each at most per_skill_chars characters)


class Retriever:
    """Answers many queries against one snapshot; construction does all query-independent work."""

    def __init__(
        self, snapshot: Snapshot, config: RetrievalConfig | None = None, lexical: LexicalIndex | None = None
    ):
        """`lexical`: the version's lexical index when the caller already has it (built for `config`)."""
        self.snapshot = snapshot
        self.config = config or retrieval_for(snapshot.manifest)
        nodes = snapshot.nodes
        self.n = nodes.height
        self.ids = nodes["id"].to_numpy()
        self._nodes = nodes
        self.lexical = lexical if lexical is not None else index_for(snapshot, self.config)
        self.semantic: SemanticIndex | None = semantic_index(snapshot, self.config)
        self.experience: ExperienceIndex | None = experience_index(
            snapshot.experience, self.ids, self.config, self.semantic, self.lexical
        )
        if self.config.reverse:
            operator = snapshot.transition
        else:
            gamma = snapshot.manifest.get("config", {}).get("transition", {}).get("gamma")
            tconf = TransitionConfig(gamma=gamma) if gamma else TransitionConfig()
            operator = transition_matrix(snapshot.edges, nodes["id"], tconf, reverse=False)
        self.operator = operator.tocsr()
        self._push = PushOperator(self.operator)
        self.avoid = self._avoid_matrix(snapshot.edges)
        self._cards: dict[int, tuple[dict[str, Any], str]] = {}
        self.folders = Folders(snapshot.manifest)  # members' package folders, looked at once a second

    # ------------------------------------------------------------------------------------------- setup

    def _avoid_matrix(self, edges: pl.DataFrame) -> sp.csr_matrix:
        e = edge_indices(edges.filter(pl.col("relation") == AVOID), self._nodes["id"])
        u, v = e["u"].to_numpy(), e["v"].to_numpy()
        data = np.ones(2 * len(u), dtype=np.int8)
        m = sp.csr_matrix((data, (np.concatenate([u, v]), np.concatenate([v, u]))), shape=(self.n, self.n))
        m.sum_duplicates()
        return m

    def _card(self, i: int) -> tuple[dict[str, Any], str]:
        """A skill's bundle fields and its rendered text clipped to the per-skill budget, kept for the
        skills that bundles keep returning (rendering and a table lookup per skill and query otherwise)."""
        card = self._cards.get(i)
        if card is None:
            row = self._nodes.row(i, named=True)
            fields = {k: row[k] for k in ("id", "name", "source_path", "capability")}
            card = (fields, clip(render_skill(row), self.config.per_skill_chars))
            if len(self._cards) >= _CARDS:
                self._cards.clear()  # bounded, refilled by use; clear() is safe under concurrent readers
            self._cards[i] = card
        return card

    # ---------------------------------------------------------------------------------------- ranking

    def ppr(self, seeds: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Personalized PageRank from `seeds` (p ∝ weights), dense over all nodes."""
        return scattered(self.n, *self.graph_mass(seeds, weights))

    def graph_mass(self, seeds: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """PPR from `seeds` (p ∝ weights) on the nodes that get mass: (sorted node indices, mass), by local
        push (SPEC §6.2), within an L1 distance of the exact vector that the push reports (at most
        1/(α·ε) edges read)."""
        pushed = self.push(seeds, weights)
        return pushed.nodes, pushed.mass

    def push(self, seeds: np.ndarray, weights: np.ndarray) -> PushResult:
        """The local push from `seeds` at the configured α and ε, with its residual and work."""
        if len(seeds) == 0:
            return PushResult(seeds[:0], np.zeros(0), 0.0, 0, 0, 0)
        return self._push.ppr(seeds, weights, self.config.alpha, self.config.ppr_epsilon)

    def embeds(self, evidence: Evidence, lam: float) -> bool:
        """Whether the query is embedded: when its embedding weighs in the fusion (λ), and, on a version with
        experience, whenever it is no task text. The witnesses' vote needs the embedding even where the
        query's words cover the skills' texts well (λ ≈ 0): that coverage counts only the words some skill
        text holds, and a request's other words are often exactly what past requests hold. On MetaTool
        dev this lifted other requests .812 → .818, the untraced tools' requests .765 → .769 and the traced
        tools' .813 → .821 (benchmarks/results/learning.md)."""
        floor = self.config.semantic_min_weight
        return lam >= floor or (self.experience is not None and self.length_weight(evidence) >= floor)

    def fusion_weight(self, evidence: Evidence) -> float:
        """λ of m = (1 − λ)·lexical + λ·semantic (see RetrievalConfig): large for short queries whose own
        words match no skill well, small for long task texts and for queries naming a skill's rare words."""
        return self.length_weight(evidence) * (1.0 - evidence.coverage)

    def length_weight(self, evidence: Evidence) -> float:
        """The part of λ that falls with the query's length: below `semantic_min_weight`, a task text."""
        cfg = self.config
        scale = cfg.semantic_length_scale
        return min(1.0, cfg.semantic_weight / (1.0 + (evidence.n_query_tokens / scale) ** 2))

    def revision_patch(self, node: int, revised: pl.DataFrame, node_tokens: pl.DataFrame) -> RowPatch:
        """The patch that scores `node` as its revised one-row node table (and its token rows) would be."""
        vectors = {node: self.semantic.vector_of(revised)} if self.semantic is not None else {}
        return RowPatch({node: self.lexical.row_patch(node_tokens)}, vectors)

    def rank(self, query: str, patch: RowPatch | None = None, depth: int | None = None) -> Ranking:
        """All skills with evidence for `query`, ranked by ρ = s* + μ·m (ties to the smaller id).

        m fuses lexical and (when configured) semantic evidence. `patch` re-scores some skills as if their
        text had changed, to try a description revision without rebuilding anything. `depth` cuts the
        ranking at that many skills: only the skills that may rank among them are scored (see
        `LexicalIndex.evidence`), which is what a bundle or a top-k needs.
        """
        cfg = self.config
        patch = patch or RowPatch()
        cut = None if patch.lexical or patch.vectors else depth
        ev = self.lexical.evidence(query, patch.lexical, max(cut, cfg.seed_k) if cut else None)
        lam, sem_nodes, sem_z, q_vec, nearest = 0.0, None, None, None, None
        parts: list[tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]] = []
        if self.semantic is not None and query.strip() and self.embeds(ev, lam := self.fusion_weight(ev)):
            # the request and the sentences that vote in the experience (`clauses`), in one embedding call
            sentences = clauses(query) if self.experience is not None and cfg.experience_weight > 0 else []
            vectors = self.semantic.query_vectors([query, *sentences])
            q_vec = vectors[0]
            near = cfg.semantic_candidates if self.experience is not None else 0
            sem_nodes, sem_z, near_nodes, near_cos = self.semantic.evidence_and_nearest(
                q_vec, patch.vectors, near
            )
            nearest = (near_nodes, near_cos)
            each = self.semantic.nearest_each(vectors[1:], patch.vectors, near)
            parts = list(zip(vectors[1:], each, strict=True))
            ev = self.lexical.extend(ev, sem_nodes)
        nodes, m = _fused(ev, sem_nodes, sem_z, lam)
        local = top_k(m, np.arange(len(nodes)), cfg.seed_k)  # ties to the smaller id: nodes are sorted
        seeds = np.sort(nodes[local])
        weights = m[np.searchsorted(nodes, seeds)]
        g_nodes, g_mass = self.graph_mass(seeds, weights) if cfg.propagate else (seeds[:0], np.zeros(0))
        xp = None
        if self.experience is not None:
            xp = self.experience.evidence(query, q_vec, nearest, parts, self.length_weight(ev))
        if not ev.complete:  # candidates outside a cut get their evidence (a complete one holds them all)
            reached = g_nodes if xp is None else union_positions(g_nodes, xp.nodes)[0]
            extended = self.lexical.extend(ev, reached)
            if extended is not ev:
                ev = extended
                nodes, m = _fused(ev, sem_nodes, sem_z, lam)
        cand, at_m, at_g = union_positions(nodes, g_nodes)  # never rank a skill with no evidence at all
        scores = scattered(len(cand), at_g, g_mass) + cfg.rerank_mu * scattered(len(cand), at_m, m)
        if xp is not None and len(xp.nodes):
            cand, at_c, at_x = union_positions(cand, xp.nodes)
            scores = scattered(len(cand), at_c, scores)
            scores[at_x] += xp.value
        co_use = None
        if self.experience is not None and self.config.co_use_weight > 0 and len(cand):
            cand, scores, co_use = self._complete(cand, scores)
        return Ranking(
            self.n, cand, scores, seeds, g_nodes, g_mass, ev, sem_nodes, sem_z, xp, co_use, q_vec, query, lam
        )

    def _complete(self, cand: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, CoUse | None]:
        """Co-use completion (SPEC §8): the best candidate's companions score at least their lift.

        A lift is below the anchor's own score, and a max rather than a sum: a companion passes a skill only
        when what the traces say about it for this query is more than that skill's own evidence. A companion
        outside a ranking cut at some depth enters at its lift: its own ρ, unknown there, is below the cut's
        last score, so the lift decides whether it enters either way."""
        assert self.experience is not None
        best = int(np.argmax(scores))  # the first of equal scores: cand is sorted, ties go to the smaller id
        nodes, lift = self.experience.companions(int(cand[best]), float(scores[best]))
        if not len(nodes):
            return cand, scores, None
        cand, at_c, at_l = union_positions(cand, nodes)
        scores = scattered(len(cand), at_c, scores)
        raised = lift > scores[at_l]
        scores[at_l] = np.maximum(scores[at_l], lift)
        return cand, scores, CoUse(int(cand[at_c[best]]), nodes[raised], lift[raised])

    def select(self, ranking: Ranking, top_n: int) -> tuple[list[int], list[dict[str, str]]]:
        """The top-N after avoid pruning: a candidate whose avoid partner is already chosen is dropped,
        and nothing is backfilled from below the top-N (a bundle may be smaller)."""
        chosen: list[int] = []
        pruned = []
        indptr, indices = self.avoid.indptr, self.avoid.indices
        for i in ranking.top(top_n):
            partners = set(indices[indptr[i] : indptr[i + 1]].tolist())
            clash = [j for j in chosen if j in partners]
            if clash:
                pruned.append({"id": str(self.ids[i]), "avoided_with": str(self.ids[clash[0]])})
            else:
                chosen.append(int(i))
        return chosen, pruned

    def members(self, ranking: Ranking, top_n: int, min_score: float | None = None) -> Members:
        """The top-N after avoid pruning (`select`) with their relevance, or none at all when not one of
        them reaches the relevance floor (`min_score`, else the configured one). The floor judges the
        bundle, not each member: a dependency an execution needs may share no word with the request."""
        floor = self.config.min_score if min_score is None else float(min_score)
        chosen, pruned = self.select(ranking, top_n)
        nodes = np.array(chosen, dtype=np.int64)
        relevance = self.relevance(ranking, nodes, floor)
        best = float(relevance.value.max()) if len(nodes) else 0.0
        # Words alone cannot tell one matching word of a real request from one of an off-topic one: a query
        # judged without its embedding (no backend, or a long task text) meets the configured floor with a
        # word in common; an explicit floor holds as given.
        reached = best > 0 if relevance.cosine is None and min_score is None else best >= floor
        if floor > 0 and not reached:
            empty = np.zeros(0)
            return Members([], [], Relevance(empty, None, empty), True, floor)
        return Members(chosen, pruned, relevance, False, floor)

    def relevance(self, ranking: Ranking, nodes: np.ndarray, floor: float = 0.0) -> Relevance:
        """The absolute relevance of the given skills to the ranked query (see `Relevance`). A query that
        was ranked without its embedding because its words matched a skill's fully (a short one) is embedded
        here when those words leave every skill below `floor`; a long task text stays decided by its words
        (embedding it would cost more than the rest of the query)."""
        own = words = ranking.evidence.words(nodes)
        xp = ranking.experience
        weight = self.config.relevance_cosine_weight
        witnessed = None  # the closest witnesses' (share, cosine, meaning)
        if self.experience is not None and xp is not None:
            witnessed = self.experience.closest(nodes, xp, weight)
            words = np.maximum(words, witnessed[0])
        q = ranking.query_vector
        if (
            q is None
            and self.semantic is not None
            and len(nodes)
            and float(words.max()) < floor
            and self.length_weight(ranking.evidence) >= self.config.semantic_min_weight
        ):
            q = self.semantic.query_vector(ranking.query)
        if q is None or self.semantic is None:
            return Relevance(words, None, words)
        cosine = (self.semantic.matrix[nodes] @ q).astype(np.float64)
        # An embedding finds some similarity in anything (nonsense scores 0.2-0.4 against real skills), so
        # a cosine counts in full only where the text it measures (the skill's, or a witness's) also shares
        # a word with the query: each source's words weigh its own cosine only.
        meaning = np.where(own > 0, weight * cosine, cosine)
        if witnessed is not None:
            cosine = np.maximum(cosine, witnessed[1])
            meaning = np.maximum(meaning, witnessed[2])
        return Relevance(words, cosine, np.clip(np.maximum(words, meaning), 0.0, 1.0))

    def rank_of(self, query: str, node: int, patch: RowPatch | None = None) -> int | None:
        """1-based position of `node` in the ranking of `query` (None when it has no evidence)."""
        return self.rank(query, patch).position(node)

    def reasons(self, ranking: Ranking, node: int, link: set[str]) -> list[dict[str, Any]]:
        """Every reason `node` ranks where it does for the ranked query, strongest first (why.py): what it
        learned from traces, its own evidence, its edges to the skills in `link` (bundle members, seeds)."""
        lexical = ranking.evidence.at(node)
        from_traces = learned(
            self.experience,
            ranking.experience,
            ranking.co_use,
            node,
            self.config.rerank_mu * ranking.own_of(node),
            self.ids,
        )
        seed = bool(np.any(ranking.seeds == node))
        sid = str(self.ids[node])
        return reasons(sid, seed, lexical, ranking.graph_of(node), link, self.incidence.of(node), from_traces)

    def ranked_ids(self, query: str, k: int, min_score: float | None = None) -> list[str]:
        """The first k skills after avoid pruning and the relevance floor, without hydration (what replay
        measures)."""
        return [str(self.ids[i]) for i in self.members(self.rank(query, depth=k), k, min_score).chosen]

    # -------------------------------------------------------------------------------------- bundles

    def retrieve(
        self,
        query: str,
        top_n: int | None = None,
        hydrate: bool = True,
        max_chars: int | None = None,
        min_score: float | None = None,
    ) -> Bundle:
        """The bundle for `query`: the top-N after avoid pruning, hydrated under the per-skill budget and
        the global one (`max_chars`, else the configured one), each member with why it is there; empty,
        with `no_match`, when none of them reaches the relevance floor (`min_score`, else the configured
        one)."""
        cfg = self.config
        top_n = top_n or cfg.top_n
        ranking = self.rank(query, depth=top_n)
        picked = self.members(ranking, top_n, min_score)
        chosen, pruned, relevance = picked.chosen, picked.pruned, picked.relevance
        seeds = set(ranking.seeds.tolist())
        cards = [self._card(i) for i in chosen]
        if hydrate:
            total = cfg.total_chars if max_chars is None else max_chars
            kept, over = hydrate_texts([(c[0]["id"], c[1]) for c in cards], cfg.per_skill_chars, total)
        else:
            kept, over = [(pos, "") for pos in range(len(cards))], []
        # nothing relevant has no seeds either: they would point an agent at the best of nothing
        seed_ids = [] if picked.no_match else [str(self.ids[i]) for i in ranking.seeds]
        link = {cards[pos][0]["id"] for pos, _ in kept} | set(seed_ids)
        skills = []
        for rank, (pos, text) in enumerate(kept, start=1):
            i, row = chosen[pos], cards[pos][0]
            why = self.reasons(ranking, i, link)
            where = self.folders.of(i, row["source_path"])
            skills.append(
                BundleSkill(
                    id=row["id"],
                    name=row["name"],
                    rank=rank,
                    score=ranking.score_of(i),
                    chars=len(text),
                    seed=i in seeds,
                    lexical=ranking.evidence.at(i),
                    graph=ranking.graph_of(i),
                    semantic=ranking.semantic_of(i),
                    relevance=float(relevance.value[pos]),
                    words=float(relevance.words[pos]),
                    cosine=None if relevance.cosine is None else float(relevance.cosine[pos]),
                    experience=ranking.experience_of(i),
                    co_use=ranking.co_use_of(i),
                    source_path=row["source_path"],
                    capability=row["capability"] or "",
                    text=text,
                    why=headline(why),
                    reasons=why,
                    folder=where.path,
                    folder_error=where.problem,
                )
            )
        total = sum(s.chars for s in skills)
        return Bundle(
            self.snapshot.version, query, skills, total, pruned, over, seed_ids, picked.no_match, picked.floor
        )

    def prepare(self) -> None:
        """Build now what the first bundle would otherwise build inside a request (a server loads versions
        on a background thread and calls this there): the incidence, the name suggestions and the
        experience's vectors."""
        _ = self.incidence, self.names.suggestions
        if self.experience is not None:
            self.experience.prepare()

    @cached_property
    def names(self) -> SkillNames:
        """Skill references resolved by id or name (built on first use: ranking never needs them, and an
        evolution round builds several retrievers over one library)."""
        return SkillNames(self._nodes)

    @cached_property
    def incidence(self) -> Incidence:
        """Every edge touching each skill (why a bundle member is there; a served version's neighbours),
        built on first use."""
        return Incidence(self.snapshot.edges, self._nodes["id"], self.names.ids)


def _fused(
    ev: Evidence, sem_nodes: np.ndarray | None, sem_z: np.ndarray | None, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """m = (1 − λ)·lexical + λ·semantic on the skills with either, those with m > 0 only."""
    if sem_nodes is None or sem_z is None:
        nodes, m = ev.nodes, ev.node_evidence
    else:
        nodes, at_lexical, at_semantic = union_positions(ev.nodes, sem_nodes)
        lexical = scattered(len(nodes), at_lexical, ev.node_evidence)
        m = (1.0 - lam) * lexical + lam * scattered(len(nodes), at_semantic, sem_z)
    has = m > 0
    return nodes[has], m[has]


def warm_caches(
    snapshot: Snapshot, config: RetrievalConfig | None = None, progress: Callable[[str], None] | None = None
) -> None:
    """Build and store a version's derived caches (lexical index, skill vectors) right after it is
    committed, so the first process that answers a query does not pay for them."""
    t0 = time.perf_counter()
    config = config or retrieval_for(snapshot.manifest)
    index_for(snapshot, config)
    semantic = semantic_index(snapshot, config)
    if progress:
        embedded = f", {semantic.vectors.embedded} skill(s) embedded" if semantic is not None else ""
        progress(f"retrieval caches ready in {time.perf_counter() - t0:.2f}s{embedded}")
