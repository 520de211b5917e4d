"""Per-field BM25 lexical evidence (SPEC §6 steps 1 and 7), precomputed as one sparse matrix.

Each field is scored on its own: for a (skill, token),
    Σ_f w_f · tf_f·(k1+1) / (tf_f + k1·(1 − b + b·len_f/avglen_f)),  times idf(t),
with avglen_f the mean length of field f over the skills that have it. Saturating per field (and not once
over the summed counts, as BM25F does) keeps a long body that matches dozens of common words from
outrunning a skill whose name and description match the one rare decisive term. A query's score is then
a weighted sum of the matrix columns of its distinct tokens: each token counts 1 + ln(its count in the
query), so a term a task text repeats weighs more without drowning the rest. Query tokens that more than
`seed_df_max` of the library holds carry no evidence (all are kept when none pass). Everything is built
once per (version, config); a query touches only its own tokens' columns.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..arrays import unique
from ..config import RetrievalConfig
from ..store.cache import cache_root, read_entry, write_entry
from ..text.lexicon import CODED_FIELDS, position_index
from ..text.token_rows import NAME, EncodedTokens, TokenRows, field_codes, sorted_rows
from ..text.tokens import tokenize
from .postings import bm25_idf, column_sums, gather, high_tier, sums_at
from .sets import contains, merged_columns, scattered, top_k, union_positions, value_at

if TYPE_CHECKING:
    from ..store.snapshot import Snapshot

# 3: per-field saturation (SPEC §6.7) replaces BM25F; averages over skills with the field. 4: fields summed in
# field order per (skill, token), whatever the chunking.
_CACHE_FORMAT = 4


@dataclass(frozen=True)
class Evidence:
    """Per-query lexical evidence, held over the skills that have any (sorted indices into the node
    table); every other skill has none."""

    n: int
    nodes: np.ndarray  # skills with a positive score or a name match, sorted
    node_score: np.ndarray  # raw per-field BM25 score of each of `nodes`
    node_name_match: np.ndarray  # bool: every token of the skill's name occurs in the query
    node_evidence: np.ndarray  # m_i(q): score / max score, plus the name bonus
    n_query_tokens: int
    # The largest share of the query's idf mass that one skill matches (0 when nothing matches): how far
    # the query's own words find a skill. A paraphrase scores low, a query that names a skill's rare
    # terms high; semantic fusion leans on the embedding when it is low.
    coverage: float = 0.0
    # A query answered to a depth (`LexicalIndex.evidence(..., depth=k)`) holds only the skills that may
    # rank among its k best (and every named one): `complete` is False, and every skill outside `nodes`
    # scores below the k-th best. `LexicalIndex.extend` adds given skills with their exact evidence, which
    # needs the query's columns, their weights and the best raw score.
    complete: bool = True
    approximate: bool = False  # a two-phase answer: see `LexicalIndex.evidence`
    cols: np.ndarray | None = None
    weights: np.ndarray | None = None
    top: float = 0.0
    # The idf mass of the query's words each of `nodes` holds, and the idf mass of all its distinct words
    # (a word no skill has weighing as much as the rarest): `words` is their ratio.
    node_matched: np.ndarray | None = None
    words_total: float = 0.0

    def at(self, node: int) -> float:
        """m_i(q) of one skill (a binary search, not the dense view)."""
        return value_at(self.nodes, self.node_evidence, node)

    def words(self, nodes: np.ndarray) -> np.ndarray:
        """The share of the query's word weight that each of the given skills' text holds: absolute, unlike
        m_i(q), which is normalised per query. Words the library does not know count against it, so a query
        made of them ("xyzzy quux") holds nothing anywhere. The query's most common words (see
        `query_columns`) are held by nobody."""
        if self.node_matched is None or self.words_total <= 0 or not len(self.nodes):
            return np.zeros(len(nodes))
        at = np.minimum(np.searchsorted(self.nodes, nodes), len(self.nodes) - 1)
        return np.where(self.nodes[at] == nodes, self.node_matched[at], 0.0) / self.words_total


# Two-phase queries (RetrievalConfig.lexical_postings_budget): columns with at least this many postings
# are read in phase one through their highest-valued share only; the phase-one best (at least
# _CANDIDATES skills) are then scored exactly over every column.
_TIER_MIN_POSTINGS = 2_048
_TIER_SHARE = 1 / 64
_CANDIDATES = 512


# A query answered to a depth keeps every skill when it has no more than this many with evidence.
_KEEP_ALL = 1_024


class Vocabulary:
    """Token ↔ column of one index: the sorted distinct tokens, and a dictionary of them for queries."""

    def __init__(self, tokens: pl.Series):
        self.tokens = tokens
        self.index: dict[str, int] = position_index(tokens)

    def __len__(self) -> int:
        return len(self.tokens)


class LexicalIndex:
    def __init__(self, tokens: pl.DataFrame, n_nodes: int, config: RetrievalConfig | None = None):
        """The index of a whole string token table held in memory (a draft's, or a small version's)."""
        self._build(EncodedTokens.of_table(tokens, n_nodes), config)

    @classmethod
    def of(cls, encoded: EncodedTokens, config: RetrievalConfig | None = None) -> LexicalIndex:
        """The index of a token table given as integer rows a node range at a time."""
        index = cls.__new__(cls)
        index._build(encoded, config)
        return index

    def _build(self, encoded: EncodedTokens, config: RetrievalConfig | None) -> None:
        # Integer arithmetic a chunk at a time: field lengths and df are bincounts, each chunk's matrix is
        # assembled from its sorted rows (text/token_rows.py), then the chunks are stacked; no group-by, no
        # join, no global sort.
        self.config = config = config or RetrievalConfig()
        self.n = n = encoded.n_nodes
        self.vocab = vocab = Vocabulary(encoded.vocab)
        chunks = encoded.chunks
        n_cols, n_fields = len(vocab), len(CODED_FIELDS)
        lengths = np.zeros((n, n_fields))
        self.df = np.zeros(n_cols, dtype=np.int64)
        for c in chunks:
            k = c.stop - c.start
            keys = (c.node - c.start) * n_fields + c.field
            lengths[c.start : c.stop] += np.bincount(keys, weights=c.tf, minlength=k * n_fields).reshape(
                k, n_fields
            )
            self.df += np.bincount(c.col[c.first], minlength=n_cols)
        held = (lengths > 0).sum(axis=0)
        # Mean over the skills that have the field: a field most skills lack (inputs, examples) would
        # otherwise get a tiny average, and every skill that has it a harsh length penalty.
        avg = lengths.sum(axis=0) / np.maximum(held, 1)
        self.avg: dict[str, float] = {
            f: float(a) for f, a, h in zip(CODED_FIELDS, avg, held, strict=True) if h and f
        }
        matrices, names = [], []
        for c in chunks:
            matrices.append(self._matrix_of(c, lengths[c.node, c.field]))
            names.append(c.csr(None, n_cols, np.flatnonzero(c.field == NAME)))
        matrix = sp.vstack(matrices, format="csr") if matrices else sp.csr_matrix((n, n_cols))
        matrix.data *= bm25_idf(n, self.df)[matrix.indices]
        self.matrix = matrix.tocsc()
        name_rows = sp.vstack(names, format="csr") if names else sp.csr_matrix((n, n_cols))
        self.name_len = np.diff(name_rows.indptr).astype(np.int64)
        self.name_matrix = name_rows.tocsc()

    def _matrix_of(self, rows: TokenRows, flen: np.ndarray) -> sp.csr_matrix:
        """Per-field BM25 (SPEC §6.7, before idf) of token rows with this index's average field lengths,
        the fields of a skill's token summed; rows of a field without a weight (or without an average in
        this index) are left out."""
        k1, b = self.config.bm25_k1, self.config.bm25_b
        weights = self.config.field_weights
        scored = np.array([f in weights and f in self.avg for f in CODED_FIELDS])
        fw = np.array([weights[f] if ok else 0.0 for f, ok in zip(CODED_FIELDS, scored, strict=True)])
        mean = np.array([self.avg[f] if ok else 1.0 for f, ok in zip(CODED_FIELDS, scored, strict=True)])
        if not scored[rows.field].all():
            keep = scored[rows.field]
            rows, flen = rows.where(keep), flen[keep]
        norm = 1 - b + b * flen / np.maximum(mean[rows.field], 1e-12)
        values = fw[rows.field] * rows.tf * (k1 + 1) / (rows.tf + k1 * norm)
        return rows.csr(values, len(self.vocab))

    def idf(self, token: str) -> float:
        """The BM25 idf of a token in this version (a token no skill has gets the highest idf)."""
        col = self.vocab.index.get(token)
        return float(bm25_idf(self.n, np.asarray(self.df[col] if col is not None else 0)))

    def row_patch(self, node_tokens: pl.DataFrame) -> dict[int, float]:
        """{token column: value} of one skill re-scored from new token rows (field, token, tf).

        Used to try a description revision without rebuilding the index: idf and average lengths stay
        those of the version (the exact index is rebuilt once the round's revisions are chosen). Tokens
        outside the vocabulary cannot match any query token of the index and are left out.
        """
        # One skill's rows against the vocabulary's dict: a join or `is_in` costs time in the whole
        # vocabulary on every call, and L3 makes one call per revision it tries.
        index = self.vocab.index
        tokens = node_tokens["token"].to_list()
        known = node_tokens.filter(pl.Series([t in index for t in tokens], dtype=pl.Boolean))
        col = np.fromiter((index[t] for t in known["token"].to_list()), dtype=np.int64, count=known.height)
        coded = known.select(node=pl.lit(0, dtype=pl.Int64), col=pl.Series(col), field=field_codes(), tf="tf")
        rows = sorted_rows(coded, 0, 1)
        flen = np.bincount(rows.field, weights=rows.tf, minlength=len(CODED_FIELDS))[rows.field]
        m = self._matrix_of(rows, flen)
        m.data *= bm25_idf(self.n, self.df)[m.indices]
        return dict(zip(m.indices.tolist(), m.data.tolist(), strict=True))

    def query_columns(self, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        """(columns, weights, known, n_tokens, n_unknown) of a query: its distinct known tokens that may
        carry evidence, each weighted 1 + ln(count); all its distinct known tokens; its token count; its
        distinct tokens no skill has. Tokens held by more than `seed_df_max` of the skills are dropped (if
        at least `seed_df_min` skills hold them: a tiny library has no common words), unless that would
        drop them all."""
        q_tokens = tokenize(query)
        index = self.vocab.index
        known, counts = np.unique(
            np.array([index[t] for t in q_tokens if t in index], dtype=np.int64), return_counts=True
        )
        n_unknown = len({t for t in q_tokens if t not in index})
        cols = known
        df = self.df[known]
        common = (df > self.config.seed_df_max * self.n) & (df >= self.config.seed_df_min)
        if common.any() and not common.all():
            cols, counts = known[~common], counts[~common]
        return cols, 1.0 + np.log(counts), known, len(q_tokens), n_unknown

    @cached_property
    def high(self) -> sp.csc_matrix:
        """The high tier of the frequent columns (`high_tier`), built on a two-phase query's first use."""
        return high_tier(self.matrix, _TIER_MIN_POSTINGS, _TIER_SHARE)

    def evidence(
        self, query: str, patch: dict[int, dict[int, float]] | None = None, depth: int | None = None
    ) -> Evidence:
        """Lexical evidence from the postings of the query's tokens: only the skills they reach are
        scored. `patch` replaces whole rows ({node: {column: value}}).

        With `depth` (a ranking cut at that many skills), the evidence holds only the skills scoring at
        least as high as the `depth`-th best, and every named skill, each with its exact score; the best
        score and the coverage stay those of every skill. A query whose tokens reach more postings than
        `lexical_postings_budget` is then answered in two phases (`_two_phase`): approximate, since a
        skill that only frequent tokens reach, none of them among its highest-valued postings, is not
        scored (`Evidence.approximate`)."""
        cols, weights, known, n_tokens, n_unknown = self.query_columns(query)
        idf = bm25_idf(self.n, self.df[cols])
        postings = int((self.matrix.indptr[cols + 1] - self.matrix.indptr[cols]).sum()) if len(cols) else 0
        approximate = bool(depth) and not patch and postings > self.config.lexical_postings_budget
        if approximate:
            nodes, score, matched = self._two_phase(cols, weights, idf, depth or 0)
        else:
            nodes, (score, matched) = column_sums(self.matrix, cols, [weights, idf], [False, True])
        if patch:
            nodes, score, matched = _with_rows(nodes, score, matched, patch, cols, weights)
        best = float(matched.max()) if len(matched) else 0.0
        # the name rule reads every query token: a name made of common words is still named in full
        named, (hits,) = column_sums(self.name_matrix, known, [np.ones(len(known))], [True])
        named = named[(self.name_len[named] > 0) & (hits >= self.name_len[named])]
        complete = not depth or bool(patch) or len(nodes) <= _KEEP_ALL
        if not complete:  # a named skill keeps its score
            keep = (score >= self._floor(cols, nodes, score, depth or 0)) | contains(named, nodes)
            nodes, score, matched = nodes[keep], score[keep], matched[keep]
        if approximate:  # a named skill the first phase missed still gets its score
            missed = named[~contains(nodes, named)]
            extra, extra_matched = sums_at(self.matrix, cols, [weights, idf], [False, True], missed)
            pairs = [(score, extra), (matched, extra_matched)]
            nodes, (score, matched) = merged_columns(nodes, missed, pairs)
        top = float(score.max()) if len(score) else 0.0
        positive = score > 0
        out, at_scored, at_named = union_positions(nodes[positive], named)
        node_score = scattered(len(out), at_scored, score[positive])
        node_matched = scattered(len(out), at_scored, matched[positive])
        name_match = np.zeros(len(out), dtype=bool)
        name_match[at_named] = True
        evidence = node_score / top if top > 0 else np.zeros(len(out))
        evidence = evidence + self.config.name_bonus * name_match
        known_idf = float(bm25_idf(self.n, self.df[known]).sum())
        # Tokens no skill has are left out of coverage: they are mostly names, numbers and ids that neither
        # signal could use, and counting them would push an entity-laden request towards the embedding.
        coverage = best / known_idf if top > 0 and known_idf > 0 else 0.0
        unknown_idf = float(bm25_idf(self.n, np.zeros(1))[0])  # as rare as can be
        words_total = known_idf + n_unknown * unknown_idf
        return Evidence(
            self.n,
            out,
            node_score,
            name_match,
            evidence,
            n_tokens,
            coverage,
            complete and not approximate,
            approximate,
            cols,
            weights,
            top,
            node_matched,
            words_total,
        )

    def _two_phase(
        self, cols: np.ndarray, weights: np.ndarray, idf: np.ndarray, depth: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(skills, exact scores, exact matched idf mass) of the best skills by a first phase that reads
        every posting of the query's rarer tokens and only the high tier of its frequent ones (`high`):
        a few percent of the postings. The first phase's best max(_CANDIDATES, depth) are then scored
        exactly over every column by binary search."""
        high = self.high
        tiered = (high.indptr[cols + 1] - high.indptr[cols]) > 0
        rare, rare_at = column_sums(self.matrix, cols[~tiered], [weights[~tiered]], [False])
        freq, freq_at = column_sums(high, cols[tiered], [weights[tiered]], [False])
        nodes, at_rare, at_freq = union_positions(rare, freq)
        partial = scattered(len(nodes), at_rare, rare_at[0])
        partial[at_freq] += freq_at[0]
        cand = np.sort(nodes[top_k(partial, np.arange(len(nodes)), max(_CANDIDATES, depth))])
        score, matched = sums_at(self.matrix, cols, [weights, idf], [False, True], cand)
        return cand, score, matched

    def _floor(self, cols: np.ndarray, nodes: np.ndarray, score: np.ndarray, depth: int) -> float:
        """A score the `depth`-th best reaches: the `depth`-th best among the skills holding the query's
        rarest tokens (the few that decide most queries), read from `score` (the scores of the sorted
        `nodes`); the exact `depth`-th best score when those skills are too few."""
        lengths = self.matrix.indptr[cols + 1] - self.matrix.indptr[cols]
        order = np.argsort(lengths, kind="stable")
        take = order[: max(1, int(np.searchsorted(np.cumsum(lengths[order]), 4 * _KEEP_ALL, side="right")))]
        rows, _, _ = gather(self.matrix, cols[take])
        found = score[np.searchsorted(nodes, unique(rows))]
        pool = found if len(found) >= depth else score
        if len(pool) <= depth:
            return float(pool.min())
        return float(np.partition(pool, len(pool) - depth)[len(pool) - depth])

    def extend(self, ev: Evidence, nodes: np.ndarray) -> Evidence:
        """`ev` with the exact evidence of the given skills (sorted) that it does not hold and that score;
        a complete `ev` already holds every skill with any."""
        if ev.complete or not len(nodes) or ev.cols is None or ev.weights is None:
            return ev
        new = nodes[~contains(ev.nodes, nodes)]
        idf = bm25_idf(self.n, self.df[ev.cols])
        score, matched = sums_at(self.matrix, ev.cols, [ev.weights, idf], [False, True], new)
        new, score, matched = new[score > 0], score[score > 0], matched[score > 0]
        if not len(new):
            return ev
        # none of them is named (every named skill is held): evidence = score / top + 0, as for the rest
        assert ev.node_matched is not None
        columns = {  # Evidence field: (what ev holds, the new skills' values)
            "node_score": (ev.node_score, score),
            "node_evidence": (ev.node_evidence, score / ev.top + 0.0),
            "node_name_match": (ev.node_name_match, np.zeros(len(new), dtype=bool)),
            "node_matched": (ev.node_matched, matched),
        }
        out, merged = merged_columns(ev.nodes, new, list(columns.values()))
        return replace(ev, nodes=out, **dict(zip(columns, merged, strict=True)))

    # ------------------------------------------------------------------------------------- persistence

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        sp.save_npz(folder / "matrix.npz", self.matrix.tocsc(), compressed=False)
        sp.save_npz(folder / "names.npz", self.name_matrix.tocsc(), compressed=False)
        np.save(folder / "df.npy", self.df)
        np.save(folder / "name_len.npy", self.name_len)
        pl.DataFrame({"token": self.vocab.tokens}).write_parquet(folder / "vocab.parquet")
        pl.DataFrame(
            {"field": list(self.avg), "avg": list(self.avg.values())},
            schema={"field": pl.String, "avg": pl.Float64},
        ).write_parquet(folder / "avg.parquet")

    @classmethod
    def load(cls, folder: Path, n_nodes: int, config: RetrievalConfig) -> LexicalIndex:
        index = cls.__new__(cls)
        index.n = n_nodes
        index.config = config
        index.vocab = Vocabulary(pl.read_parquet(folder / "vocab.parquet")["token"])
        avg = pl.read_parquet(folder / "avg.parquet")
        index.avg = dict(zip(avg["field"].to_list(), avg["avg"].to_list(), strict=True))
        index.df = np.load(folder / "df.npy")
        index.matrix = sp.load_npz(folder / "matrix.npz").tocsc()
        if not index.matrix.has_sorted_indices:  # `sums_at` binary-searches each column's rows
            index.matrix.sort_indices()
        index.name_matrix = sp.load_npz(folder / "names.npz").tocsc()
        index.name_len = np.load(folder / "name_len.npy")
        if index.matrix.shape != (n_nodes, len(index.vocab)) or len(index.df) != len(index.vocab):
            raise ValueError("cached lexical index does not match the version")
        return index


def _with_rows(
    nodes: np.ndarray,
    score: np.ndarray,
    matched: np.ndarray,
    patch: dict[int, dict[int, float]],
    cols: np.ndarray,
    weights: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores with the patched skills' rows in place of theirs (a patched skill the query's postings do
    not reach joins the scored ones); coverage keeps the version's rows."""
    patched = np.fromiter(patch, dtype=np.int64, count=len(patch))
    merged, at, _ = union_positions(nodes, unique(patched))
    score_m, matched_m = np.zeros(len(merged)), np.zeros(len(merged))
    score_m[at], matched_m[at] = score, matched
    for node, row in patch.items():
        score_m[np.searchsorted(merged, node)] = sum(
            row.get(int(c), 0.0) * w for c, w in zip(cols.tolist(), weights, strict=True)
        )
    return merged, score_m, matched_m


def index_for(snapshot: Snapshot, config: RetrievalConfig) -> LexicalIndex:
    """The lexical index of a version, from the store's cache when it holds one for this configuration.

    The cache (`STORE/cache/lexical/<key>/`) is derived data outside the immutable version folders: its key
    is the version's token-table hash plus the scoring settings, it is written atomically (staged folder,
    then rename) with its files' hashes, an entry that fails them or does not load is dropped and rebuilt,
    and a store that cannot be written to simply goes without. It saves rebuilding the index on every
    process start (seconds on 100k skills).
    """
    n = snapshot.nodes.height
    tokens_key = snapshot.content_key("tokens")
    root = cache_root(snapshot.path, "lexical")
    if root is None or tokens_key is None:
        return _fresh_index(snapshot, config)
    key_data = {
        "format": _CACHE_FORMAT,
        "tokens": tokens_key,
        "weights": config.field_weights,
        "k1": config.bm25_k1,
        "b": config.bm25_b,
    }  # seed_df_max is applied per query: one index serves every threshold
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:20]
    cached = read_entry(root, key, lambda folder: LexicalIndex.load(folder, n, config))
    if cached is not None:
        return cached  # its files matched their recorded hashes; a damaged entry was dropped: rebuilt below
    index = _fresh_index(snapshot, config)

    def fill(stage: Path) -> None:
        index.save(stage)
        (stage / "complete").write_text(json.dumps(key_data))

    write_entry(root, key, fill)  # a read-only or racing store: the index in memory is all this needs
    return index


def _fresh_index(snapshot: Snapshot, config: RetrievalConfig) -> LexicalIndex:
    """The index built from the token table in memory when the snapshot holds it (a draft, or a version
    whose tokens were read), else from its stored parts one at a time (the string table never held whole)."""
    files = snapshot.files
    if snapshot.tokens_loaded or files is None:
        return LexicalIndex(snapshot.tokens, snapshot.nodes.height, config)
    return LexicalIndex.of(EncodedTokens.of_parts(files.token_parts(), snapshot.nodes.height), config)
