"""Experience evidence: what a skill's past successful requests say about a new one (SPEC §8, "Experience").

A skill's experience is the set of requests it served on successful traces (its *witnesses*). A new
request asked in other words than the skill's text is often close to one of them, so they are evidence of
their own, in two channels, each built once per version:

- **lexical**: for each witness, the share of the query's idf mass (idf over the witnesses) that the witness
  holds; a skill gets the best share among its witnesses, counted above `experience_lexical_floor` only.
  A share, not a raw BM25 sum, so that it is comparable across queries and does not grow with the number of
  witnesses a skill has. Plus the **word vote**: each word of the query splits its idf among the skills
  that claim it, in proportion to their claims; a skill claims every word of its own text fully, and a word
  of its past requests by the share of them that hold it, once two or more do. A two-part request's words
  are seldom all in one past request, but each is in several requests of the skill that serves its part;
  and a skill without experience keeps its own words' share of the vote, so history alone does not take
  a word from it.
- **semantic** (when the query is embedded): a kernel vote. Everything known to answer requests (every
  witness, and every skill's own text as one witness of itself) is a neighbour of the query with weight
  exp((cos − best cos) / T); a skill's evidence is the share of the total weight of its own neighbours.
  A skill without experience competes with its own text, so a skill with experience gains only where its
  requests are closer to the query than the other skills' texts are: new and rarely used skills are not
  pushed aside by skills that merely have more history (the half-traced check of
  benchmarks/bench_learning.py).

A request of several sentences often asks for several things ("Will it rain tomorrow? Also suggest some
boots."), and its nearest neighbours answer its main part only: the vote of the whole request gives the
other part's skill next to nothing. Each sentence (`clauses`) also votes on its own, and a skill's semantic
evidence is its best vote, over the whole request and each of its sentences.

Both channels are zero for every skill of a version without experience: a cold start ranks as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..arrays import ranges
from ..config import RetrievalConfig
from ..text.tokens import tokenize
from .ann import InvertedLists, build_lists, unit_rows
from .postings import bm25_idf, gather
from .semantic import SemanticIndex
from .sets import value_at

if TYPE_CHECKING:
    from .lexical import LexicalIndex


@dataclass(frozen=True)
class ExperienceEvidence:
    """Per-query experience evidence over the skills that have any (sorted node indices)."""

    nodes: np.ndarray
    value: np.ndarray  # what is added to ρ: weighted lexical share and word vote, plus weighted semantic vote
    # Per witness: the share of the query's idf mass it holds, and its cosine to the query (0 where not
    # read): for explanations and the absolute relevance of a skill.
    shares: np.ndarray
    cosines: np.ndarray

    def at(self, node: int) -> float:
        return value_at(self.nodes, self.value, node)


@dataclass(frozen=True)
class CoUse:
    """The companions co-use completion raised in one ranking: of `anchor` (the best candidate), the sorted
    `nodes` whose score became their `lift`."""

    anchor: int
    nodes: np.ndarray
    lift: np.ndarray

    def of(self, node: int) -> float:
        return value_at(self.nodes, self.lift, node)


_NO_EVIDENCE = ExperienceEvidence(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0))


class ExperienceIndex:
    """The experience of one version, ready for queries: witnesses as token rows and (lazily) vectors."""

    def __init__(
        self,
        experience: pl.DataFrame,
        node_ids: np.ndarray,
        config: RetrievalConfig,
        semantic: SemanticIndex | None = None,
        lexical: LexicalIndex | None = None,
    ):
        """`lexical`: the version's lexical index, whose skill texts take part in the word vote (no word vote
        without it)."""
        self.config = config
        self.semantic = semantic
        position = {str(s): i for i, s in enumerate(node_ids.tolist())}
        table = experience.filter(pl.col("skill").is_in(list(position))).sort("skill", "text")
        self.texts: list[str] = table["text"].to_list()
        self.tasks = table["tasks"].to_numpy()
        self.skill = np.fromiter((position[s] for s in table["skill"].to_list()), np.int64, table.height)
        self.n = len(node_ids)
        self._by_skill = np.argsort(self.skill, kind="stable")
        self._start = np.searchsorted(self.skill[self._by_skill], np.arange(self.n + 1))
        # A request that several skills served is one text: tokenised and embedded once (a window's
        # witnesses repeat: 25,804 rows held 9,694 texts on 20k generated skills).
        distinct = pl.Series(self.texts, dtype=pl.String).unique(maintain_order=True)
        self._distinct: list[str] = distinct.to_list()
        where = {t: k for k, t in enumerate(self._distinct)}
        self._text_of = np.fromiter((where[t] for t in self.texts), np.int64, len(self.texts))
        vocab: dict[str, int] = {}
        # Tokens in order of first use, not a set's (hash-seeded) order: the same columns, so the same sums
        # and scores to the last bit, in every process.
        token_cols = [
            [vocab.setdefault(tok, len(vocab)) for tok in dict.fromkeys(tokenize(t))] for t in self._distinct
        ]
        rows, cols = [], []
        for r, k in enumerate(self._text_of.tolist()):
            rows.extend([r] * len(token_cols[k]))
            cols.extend(token_cols[k])
        self.vocab = vocab
        shape = (len(self.texts), len(vocab))
        data = np.ones(len(rows))
        matrix = sp.csc_matrix((data, (np.array(rows, int), np.array(cols, int))), shape=shape)
        df = np.diff(matrix.indptr)
        self.idf = bm25_idf(len(self.texts), df)
        self.unknown_idf = float(bm25_idf(len(self.texts), np.zeros(1))[0])
        # Tokens most witnesses hold ("can", "me", "find") add little to a share and most of its cost: like
        # the lexical seeds (SPEC §6.7) they are read only when nothing rarer is asked (`query_columns`).
        self._common = (df > config.seed_df_max * len(self.texts)) & (df >= config.seed_df_min)
        # Each token's postings (witness rows, ascending) as its own array: a query concatenates its few
        # tokens' arrays instead of computing their positions in the matrix.
        indptr, indices = matrix.indptr, matrix.indices.astype(np.int64)
        self._postings = [
            indices[a:b] for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist(), strict=True)
        ]
        self._df = df
        self._claims = (
            _word_claims(self.skill, matrix, self.n, vocab, lexical)
            if lexical is not None and config.experience_word_weight > 0
            else None
        )
        self.co_use, self.co_tasks = _co_use(self.skill, table, self.n, config.co_use_min_share)
        self._vectors: np.ndarray | None = None
        self._every = np.arange(len(self.texts))  # the rows a query reads while the witnesses are few
        self._lists: InvertedLists | None = None

    @property
    def vectors(self) -> np.ndarray:
        """Unit vectors of the witnesses, embedded on first use (once per version and process)."""
        if self._vectors is None:
            assert self.semantic is not None
            dim = self.semantic.matrix.shape[1]
            self._vectors = (
                unit_rows(self.semantic.backend.embed(self._distinct)).astype(np.float32)[self._text_of]
                if self.texts
                else np.zeros((0, dim), dtype=np.float32)
            )
        return self._vectors

    @cached_property
    def register_gap(self) -> float:
        """How much closer a request is to another request for the same skill than to that skill's own
        text (the `_GAP_QUANTILE` quantile over witnesses of skills with two or more, never below 0),
        added to the own texts' cosines in the vote. Requests are short and phrased alike, package texts
        are not, so without it a skill's witnesses sit nearer a new request than the right skill's text
        does whenever that skill has no experience of its own: new and rarely used skills would be pushed
        aside by history alone. Measured on the version's own experience (the first `_GAP_SKILLS` such
        skills), so it follows the embedding model and the library's register instead of a constant."""
        starts, ends = self._start[:-1], self._start[1:]
        several = np.flatnonzero(ends - starts >= 2)[:_GAP_SKILLS]
        if not len(several):
            return 0.0
        assert self.semantic is not None  # the vote that reads it runs on embedded queries only
        vectors, own = self.vectors, self.semantic.matrix
        gaps = []
        for node in several.tolist():
            rows = self._by_skill[starts[node] : ends[node]]
            v = vectors[rows]
            sims = v @ v.T
            np.fill_diagonal(sims, -np.inf)
            gaps.append(sims.max(axis=1) - v @ own[node])
        return max(float(np.quantile(np.concatenate(gaps), _GAP_QUANTILE)), 0.0)

    @cached_property
    def background(self) -> float:
        """The cosine a request finds among the texts of skills that did not serve it: the median, over up to
        `_BACKGROUND_WITNESSES` witnesses spread over the experience, of the best cosine to another skill's
        text. It is a neighbour of every query in the vote, answering for no skill, so that a query whose
        nearest neighbours are no closer than that (nothing in the library or its experience is about it)
        gives no skill a large share: the shares are relative, and the nearest of weak neighbours would
        otherwise take most of the vote. On the demo's held-out tasks a lease-redaction request gave 0.49 to
        release-notes-writer (its text at cosine 0.24) and ranked it first. It is a cosine to a skill's own
        text, so the vote lifts it by the register gap like the own texts (benchmarks/results/learning.md)."""
        assert self.semantic is not None  # the vote that reads it runs on embedded queries only
        rows = np.unique(np.linspace(0, len(self.texts) - 1, _BACKGROUND_WITNESSES).astype(np.int64))
        vectors, own = self.vectors[rows], self.semantic.matrix
        best = np.full(len(rows), -1.0)
        for start in range(0, own.shape[0], _BACKGROUND_CHUNK):  # bounded memory on a million skills
            sims = vectors @ own[start : start + _BACKGROUND_CHUNK].T
            mine = (self.skill[rows] >= start) & (self.skill[rows] < start + _BACKGROUND_CHUNK)
            sims[np.flatnonzero(mine), self.skill[rows][mine] - start] = -np.inf
            best = np.maximum(best, sims.max(axis=1))
        return float(np.median(best))

    def prepare(self) -> None:
        """Build now what the first embedded query would: the witnesses' vectors, their inverted lists when
        there are many, the register gap and the background (embedding 20k witnesses takes about half a
        second)."""
        if self.semantic is None:
            return
        if len(self.vectors) > _EXACT_WITNESSES and self._lists is None:
            self._lists = build_lists(self.vectors)
        _ = self.register_gap, self.background

    def witness_cosines(self, vectors: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(witness rows, their cosines to each of the k unit `vectors`: a (k, rows) matrix). Every
        witness while they are few; past `_EXACT_WITNESSES`, the rows of the inverted lists nearest each
        vector (ann.py), so that a query's cost stops growing with the experience. A witness far from a
        vector weighs exp(-Δcos / T) ≈ 0 in its vote, which is what the lists leave out. The vectors of a
        request and its sentences share the budget and are read together: each list once, each vector
        scored on every list read (another vector's lists only show it more of its neighbours)."""
        k = len(vectors)
        witnesses = self.vectors
        if len(witnesses) <= _EXACT_WITNESSES:
            # a matrix-vector product each: the few witnesses stay in cache, and a matrix product with a
            # few columns copies them first
            cos = np.empty((k, len(witnesses)))
            for j, v in enumerate(vectors):
                cos[j] = witnesses @ v
            return self._every, cos
        if self._lists is None:
            self._lists = build_lists(witnesses)
        # a request alone: one matrix-vector product a span, as it always was
        rows, cos = self._lists.scan(vectors[0] if k == 1 else np.stack(vectors), _SCAN_WITNESSES // k)
        return rows, np.ascontiguousarray(np.atleast_2d(cos), dtype=np.float64)

    def query_columns(self, query: str) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(the columns of the query's tokens that are read, their idf, the query's whole idf mass), None
        when the query has no token of the witnesses."""
        tokens = dict.fromkeys(tokenize(query))  # ordered: the same sums in every process
        vocab = self.vocab
        known = [vocab[t] for t in tokens if t in vocab]
        if not known:
            return None
        cols = np.array(known, dtype=np.int64)
        idf = self.idf[cols]
        total = float(idf.sum()) + self.unknown_idf * (len(tokens) - len(cols))
        common = self._common[cols]  # skipped unless all are common; they stay in `total`
        if 0 < np.count_nonzero(common) < len(cols):
            cols, idf = cols[~common], idf[~common]
        return cols, idf, total

    def shares(self, cols: np.ndarray, idf: np.ndarray, total: float) -> np.ndarray:
        """The share of the idf mass `total` each witness holds of the columns `cols` (weighing `idf`; all
        three from `query_columns`), 0 for the witnesses they do not touch. Over every witness: the sums
        already are, and one division over them costs less than finding the witnesses the query touches
        (often most of them)."""
        # each witness's idf mass, column after column from 0 (bincount adds in that order)
        rows = np.concatenate([self._postings[c] for c in cols.tolist()])
        held = np.bincount(rows, weights=np.repeat(idf, self._df[cols]), minlength=len(self.texts))
        held /= total
        return held

    def word_vote(self, cols: np.ndarray, idf: np.ndarray, total: float) -> np.ndarray:
        """Each skill's share of the idf mass `total` in the word vote of the columns `cols` (weighing `idf`):
        every word split among the skills that claim it (`_word_claims`), below `_MIN_VOTE` none."""
        claims = self._claims
        assert claims is not None
        skills, pos, lengths = gather(claims, cols)
        if not len(skills):  # (bincount of nothing gives integers)
            return np.zeros(self.n)
        vote = np.bincount(skills, weights=claims.data[pos] * np.repeat(idf, lengths), minlength=self.n)
        vote /= total
        # a word many skill texts hold gives each a crumb: no evidence, and no candidate to rank
        vote[vote < _MIN_VOTE] = 0.0
        return vote

    def evidence(
        self,
        query: str,
        query_vector: np.ndarray | None,
        nearest: tuple[np.ndarray, np.ndarray] | None = None,
        parts: Sequence[tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]] = (),
        meaning: float = 1.0,
    ) -> ExperienceEvidence:
        """Experience evidence of every skill for `query`; `query_vector` (unit) when it was embedded, with
        `nearest`, the skills whose own text is closest to it and their cosines; `parts`, the same (vector,
        nearest) of each of its sentences when it has several (`clauses`). `meaning`: how much the query's
        embedding counts for its length (`Retriever.length_weight`, 1 for a short request), which weighs the
        semantic vote as it weighs the query's own semantic evidence. The vote gives every skill whose own
        text is near the query a share too (that is what keeps a skill without experience in the race), so
        at full weight it would bring back the embedding that the cold start deliberately leaves out of a
        long task text: on SkillsBench dev, a round over the real trials of half the tasks (two experience
        rows) took the other half's recall@5 from .8475 to .8304, the vote alone moving them."""
        cfg = self.config
        if not len(self.texts) or (cfg.experience_weight <= 0 and cfg.experience_lexical_weight <= 0):
            return _NO_EVIDENCE
        # value = lexical weight · lexical + semantic weight · semantic, each term added only when it is
        # not all zeros (adding zeros changes no bit)
        value, shares = None, None
        if cfg.experience_lexical_weight > 0:
            columns = self.query_columns(query)
            if columns is not None:
                shares = self.shares(*columns)
                floor = cfg.experience_lexical_floor
                # only a share above the floor counts: the rest would add max(0, 0) to the skill's zero
                over = np.flatnonzero(shares > floor)
                lexical = np.zeros(self.n)
                np.maximum.at(lexical, self.skill[over], (shares[over] - floor) / (1.0 - floor))
                if self._claims is not None:
                    lexical += cfg.experience_word_weight * self.word_vote(*columns)
                value = cfg.experience_lexical_weight * lexical
        if shares is None:
            shares = np.zeros(len(self.texts))
        if query_vector is not None and nearest is not None and cfg.experience_weight > 0:
            rows, cos = self.witness_cosines([query_vector, *(v for v, _ in parts)])
            semantic = self.vote(rows, cos[0], *nearest)
            # the whole request's cosines: explanations and relevance read these
            if rows is self._every:
                cosines = cos[0]
            else:
                cosines = np.zeros(len(self.texts))
                cosines[rows] = cos[0]
            for j, (_, clause_nearest) in enumerate(parts, start=1):
                np.maximum(semantic, self.vote(rows, cos[j], *clause_nearest), out=semantic)
            semantic *= cfg.experience_weight * meaning
            value = semantic if value is None else value + semantic
        else:
            cosines = np.zeros(len(self.texts))
        if value is None:
            return ExperienceEvidence(_NO_EVIDENCE.nodes, _NO_EVIDENCE.value, shares, cosines)
        nodes = np.flatnonzero(value > 0)
        return ExperienceEvidence(nodes, value[nodes], shares, cosines)

    def vote(
        self, rows: np.ndarray, cos: np.ndarray, own_nodes: np.ndarray, own_cos: np.ndarray
    ) -> np.ndarray:
        """The semantic kernel vote over all n skills of one embedded text: its witnesses `rows` at cosines
        `cos`, and the skills whose own text is nearest it (`own_nodes` at `own_cos`)."""
        t = self.config.experience_temperature
        own_cos = own_cos + self.register_gap
        # The nothing-neighbour: what a request finds among skills it has nothing to do with. It is a cosine
        # to a skill's own text, so it is lifted by the register gap like the own texts it stands for;
        # unlifted, a request about nothing in the library gave most of its vote to the nearest own text.
        nothing = self.background + self.register_gap
        top = max(float(cos.max()) if len(cos) else -1.0, float(own_cos.max()) if len(own_cos) else -1.0)
        kw, ko = cos - top, own_cos - top
        kw /= t
        ko /= t
        np.exp(kw, out=kw)
        np.exp(ko, out=ko)
        total = float(kw.sum() + ko.sum()) + float(np.exp((nothing - top) / t))
        skill = self.skill if rows is self._every else self.skill[rows]
        semantic = np.bincount(skill, weights=kw, minlength=self.n)
        semantic /= total
        semantic[own_nodes] += ko / total
        semantic[semantic < _MIN_VOTE] = 0.0
        return semantic

    def companions(self, anchor: int, score: float) -> tuple[np.ndarray, np.ndarray]:
        """(sorted nodes, lift) of the skills that come along with `anchor` scored `score`: its co-use
        share times the score times `co_use_weight`."""
        m = self.co_use
        lo, hi = int(m.indptr[anchor]), int(m.indptr[anchor + 1])
        if lo == hi:  # most skills have no companion
            return _NO_EVIDENCE.nodes, _NO_EVIDENCE.value
        return m.indices[lo:hi].astype(np.int64), m.data[lo:hi] * (score * self.config.co_use_weight)

    def used_with(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """(nodes, tasks) of the skills `node` was used with on most of its tasks (its companions), most
        shared tasks first."""
        m = self.co_tasks
        lo, hi = int(m.indptr[node]), int(m.indptr[node + 1])
        nodes, tasks = m.indices[lo:hi].astype(np.int64), m.data[lo:hi]
        order = np.lexsort((nodes, -tasks))
        return nodes[order], tasks[order]

    def explain(self, node: int, evidence: ExperienceEvidence) -> tuple[int, str] | None:
        """(distinct successful tasks, the closest witnessing request) of a skill, None without experience."""
        rows = self.witnesses_of(node)
        if not len(rows):
            return None
        if len(evidence.shares):
            close = evidence.shares[rows] + np.maximum(evidence.cosines[rows], 0.0)
        else:
            close = np.zeros(len(rows))
        best = rows[np.lexsort((rows, -close))[0]]
        return int(self.tasks[rows].sum()), self.texts[best]

    def witnesses_of(self, node: int) -> np.ndarray:
        return self._by_skill[self._start[node] : self._start[node + 1]]

    def closest(
        self, nodes: np.ndarray, evidence: ExperienceEvidence, cosine_weight: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(share, cosine, meaning) of the given skills' closest witnesses to the query (0 without
        experience). `meaning` is the best witness's cosine, times `cosine_weight` when that same witness
        shares a word with the query (`Relevance`): a word the skill's own text shares with the query
        ("bake" in a Dockerfile's "bake secrets") must not weigh a witness's unrelated cosine."""
        words, cosine, meaning = np.zeros(len(nodes)), np.zeros(len(nodes)), np.zeros(len(nodes))
        if not len(evidence.shares) or not len(nodes):
            return words, cosine, meaning
        starts, ends = self._start[nodes], self._start[nodes + 1]
        has = np.flatnonzero(ends > starts)
        if not len(has):
            return words, cosine, meaning
        # Every witness of the skills that have any, skill after skill, and the first of each skill's run: a
        # max per run is the max of its witnesses, whatever their order.
        rows = self._by_skill[ranges(starts[has], ends[has])]
        first = np.concatenate(([0], np.cumsum(ends[has] - starts[has])[:-1]))
        shares, cosines = evidence.shares[rows], evidence.cosines[rows]
        words[has] = np.maximum.reduceat(shares, first)
        cosine[has] = np.maximum.reduceat(cosines, first)
        meaning[has] = np.maximum.reduceat(np.where(shares > 0, cosine_weight * cosines, cosines), first)
        return words, cosine, meaning


# Witnesses a query reads: all of them up to `_EXACT_WITNESSES`, else the nearest lists' rows up to about
# `_SCAN_WITNESSES`. The vote's weight falls by e^-2 for every 0.1 of cosine below the best neighbour, so
# only the nearest few witnesses count, which the nearest lists hold. Reading 4,096 rows cost a
# query more than the whole experience evidence may (evolved/cold ≤ 1.5); 1,024 rows fit in it and changed
# very few top-5s and none of their hits (benchmarks/results/learning.md; figures: docs/benchmarks.md,
# "Design measurements quoted from the code"). A request and its k - 1 sentences share the budget (about
# `_SCAN_WITNESSES` / k rows each, read together): reading it for each sentence cost a request of several
# sentences most of its evolved time, and the shared read ranked as well on the completeness proxy.
_EXACT_WITNESSES = 2_048
_SCAN_WITNESSES = 1_024
# Skills whose witnesses measure the register gap: enough for a stable quantile, cheap once per version.
_GAP_SKILLS = 2_048
# Above the median: the gap must cover most requests, not half, or a skill without experience loses to a
# traced skill's nearer request. On MetaTool dev with every trace of half the tools (the do-no-harm check's
# setting), the other half's requests lost .010 / .013 hit@5 with the median and .006 / .010 with this,
# while one round over 800 traces still lifted other requests .747 → .843 (.845 with the median).
_GAP_QUANTILE = 0.55
# Witnesses whose best cosine to other skills' texts measures the background, and the skill texts read at
# once: bounded time and memory at a million skills, once per version.
_BACKGROUND_WITNESSES = 256
_BACKGROUND_CHUNK = 65_536
# A vote below this share of the neighbourhood's weight is no evidence: it keeps the candidate set to the
# query's neighbourhood (exp(-0.35 / 0.05) ≈ 1e-3 of the best neighbour's weight).
_MIN_VOTE = 1e-3


def clauses(query: str) -> list[str]:
    """The sentences of a request that asks for several things, each voting on its own in the experience
    (none for a request of one sentence, or of more than `_MAX_CLAUSES`: a long task text is one need
    described at length, and each sentence costs a semantic search). A sentence ends at . ? ! or ; before
    a space; one of fewer than two tokens ("Thanks!") asks for nothing."""
    split = _SENTENCE_END.split(query.strip())
    if len(split) < 2:  # one sentence: nothing to tokenise
        return []
    parts = []
    for part in split:
        if len(tokenize(part)) >= 2:
            parts.append(part)
            if len(parts) > _MAX_CLAUSES:  # one need described at length: the rest need not be read
                return []
    return parts if len(parts) >= 2 else []


_SENTENCE_END = re.compile(r"(?<=[.?!;])\s+")
_MAX_CLAUSES = 4


def experience_index(
    experience: pl.DataFrame,
    node_ids: np.ndarray,
    config: RetrievalConfig,
    semantic: SemanticIndex | None,
    lexical: LexicalIndex | None = None,
) -> ExperienceIndex | None:
    """The index of a version's experience (None when it has none: nothing to add to any ranking)."""
    if experience.height == 0:
        return None
    return ExperienceIndex(experience, node_ids, config, semantic, lexical)


# A word of a skill's past requests is its claim when at least this many of them hold it: one request is an
# anecdote. On MetaTool dev with every trace of half the tools, the other half's requests lost .0083 /
# .0153 hit@5 (each half in turn) when one request made a claim, .0083 / .0096 with two
# (benchmarks/results/learning.md, "The word vote").
_MIN_CLAIM_WITNESSES = 2
# A skill's share of a word's vote below this is no claim, and a word that more than a hundred skill texts
# hold is not read at all. At 100k generated skills the texts of thousands hold a common word: reading them
# all made the evolved p50 1.69× cold, against 1.45× without them (interleaved; no dev number moved).
_MIN_CLAIM_SHARE = 0.01


def _word_claims(
    skill: np.ndarray, witnesses: sp.csc_matrix, n: int, vocab: dict[str, int], lexical: LexicalIndex
) -> sp.csc_matrix:
    """Every skill's claim on each word of the experience's vocabulary (n × tokens), as its share of that
    word's vote (each column sums to 1): 1 for a word of its own text; else the share of its witnesses
    holding the word (`witnesses`: witness × token, 0/1), when at least `_MIN_CLAIM_WITNESSES` do.

    A skill's revised text tried by the description editor (`RowPatch`) is not seen here: its new words
    get no share of the vote, so a revision is judged without that part of its gain."""
    # the words of each skill's own text: the lexical index's columns of the experience's tokens. A word
    # that more than 1 / `_MIN_CLAIM_SHARE` skill texts hold leaves every claim on it below that share, so
    # it is left out from the start: at 100k skills the common words' columns were 4.75M entries.
    columns = np.fromiter((lexical.vocab.index.get(t, -1) for t in vocab), np.int64, len(vocab))
    known = np.flatnonzero(columns >= 0)
    crowded = np.diff(lexical.matrix.indptr)[columns[known]] * _MIN_CLAIM_SHARE > 1
    common, known = known[crowded], known[~crowded]
    rows = len(skill)
    per_skill = sp.csr_matrix((np.ones(rows), (skill, np.arange(rows))), shape=(n, rows))
    held = (per_skill @ witnesses).tocsr()  # witnesses of each skill holding each word
    held.data[(held.data < _MIN_CLAIM_WITNESSES) | np.isin(held.indices, common)] = 0.0
    held.eliminate_zeros()
    held.data /= np.repeat(np.bincount(skill, minlength=n), np.diff(held.indptr))
    text = lexical.matrix[:, columns[known]].tocoo()
    stored = text.data > 0
    own = sp.csr_matrix(
        (np.ones(int(stored.sum())), (text.row[stored], known[text.col[stored]])), shape=(n, len(vocab))
    )
    claims = held.maximum(own).tocsc()
    claims.sort_indices()
    claims.data /= np.repeat(np.asarray(claims.sum(axis=0)).ravel(), np.diff(claims.indptr))
    claims.data[claims.data < _MIN_CLAIM_SHARE] = 0.0
    claims.eliminate_zeros()
    return claims


# A request that more skills than this served is a common one ("help me with this"), not a workflow: it is
# no co-use evidence, which also bounds the pairs one text makes.
_CO_USE_MAX_SKILLS = 16


def _co_use(
    skill: np.ndarray, table: pl.DataFrame, n: int, min_share: float
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(share, tasks) over skill pairs: tasks[u, v] the successful tasks on which u and v served the same
    request (the skills a trace used all witness its requests), share[u, v] = tasks[u, v] over u's tasks,
    kept where it is at least `min_share` (v comes along with u on most of u's tasks)."""
    rows = pl.DataFrame({"skill": skill, "text": table["text"], "tasks": table["tasks"]})
    shared = rows.filter(pl.len().over("text").is_between(2, _CO_USE_MAX_SKILLS))
    pairs = (
        shared.join(shared, on="text", suffix="_v")
        .filter(pl.col("skill") != pl.col("skill_v"))
        .group_by("skill", "skill_v")
        .agg(pl.min_horizontal("tasks", "tasks_v").sum().alias("tasks"))
        .join(rows.group_by("skill").agg(pl.col("tasks").sum().alias("all")), on="skill")
        .filter(pl.col("tasks") >= min_share * pl.col("all"))
    )
    u, v = pairs["skill"].to_numpy(), pairs["skill_v"].to_numpy()
    tasks = pairs["tasks"].to_numpy().astype(np.float64)
    share = tasks / pairs["all"].to_numpy()
    out = sp.csr_matrix((share, (u, v)), shape=(n, n)), sp.csr_matrix((tasks, (u, v)), shape=(n, n))
    for m in out:
        m.sort_indices()
    return out
