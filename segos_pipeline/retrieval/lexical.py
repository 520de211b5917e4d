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
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..config import RetrievalConfig
from ..store.cache import cache_root, write_entry
from ..text.lexicon import Vocabulary
from ..text.tokens import tokenize
from .sets import union_positions, unique
from .token_rows import CODED_FIELDS, NAME, EncodedTokens, TokenRows, field_codes, sorted_rows

if TYPE_CHECKING:
    from ..store.snapshot import Snapshot, VersionFiles

# 3: per-field saturation (SPEC §6.7) replaces BM25F; averages over skills with the field. 4: fields summed in
# field order per (skill, token), whatever the chunking.
_CACHE_FORMAT = 4


@dataclass(frozen=True)
class Evidence:
    """Per-query lexical evidence, held over the skills that have any (sorted indices into the node
    table); every other skill has none. The dense views over all n skills are made on first use."""

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

    def at(self, node: int) -> float:
        """m_i(q) of one skill (a binary search, not the dense view)."""
        i = int(np.searchsorted(self.nodes, node))
        return float(self.node_evidence[i]) if i < len(self.nodes) and self.nodes[i] == node else 0.0

    def _dense(self, values: np.ndarray) -> np.ndarray:
        out = np.zeros(self.n, dtype=values.dtype)
        out[self.nodes] = values
        return out

    @cached_property
    def score(self) -> np.ndarray:
        """The raw score of every skill (dense, length n)."""
        return self._dense(self.node_score)

    @cached_property
    def name_match(self) -> np.ndarray:
        return self._dense(self.node_name_match)

    @cached_property
    def evidence(self) -> np.ndarray:
        """m_i(q) of every skill (dense, length n)."""
        return self._dense(self.node_evidence)


def _gather(m: sp.csc_matrix, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored entries of the selected columns, column after column: (rows, positions in m.data, each
    column's length). A ragged arange, no Python loop over columns."""
    starts = m.indptr[cols].astype(np.int64)
    lengths = m.indptr[cols + 1].astype(np.int64) - starts
    pos = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
        starts - (np.cumsum(lengths) - lengths), lengths
    )
    return m.indices[pos], pos, lengths


# Below this share of the skills, a query's postings are grouped by skill with a sort (cost follows the
# postings); above it, summed into one length-n vector by one bincount, which measured faster than
# sorting them (80k postings on 100k skills: 1.5 ms against 7 ms).
_SORT_SHARE = 1 / 16


def _column_sums(
    m: sp.csc_matrix, cols: np.ndarray, weights: list[np.ndarray], pattern: list[bool]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Σ_j c_j · m[:, j] over the selected columns, for each weight vector c, on the rows that hold any of
    them only: (rows, [sums]). With `pattern` every stored entry counts as 1 (the sum is then the weights
    of the columns a row holds). Within a row the entries are summed in column order, as a dense
    `bincount(minlength=n)` over the same entries sums them, so all give the same floating-point sums."""
    n = m.shape[0]
    postings = int((m.indptr[cols + 1] - m.indptr[cols]).sum()) if len(cols) else 0
    if postings == 0:
        return np.zeros(0, dtype=np.int64), [np.zeros(0) for _ in weights]
    rows, pos, lengths = _gather(m, cols)
    if postings > _SORT_SHARE * n:
        held = np.zeros(n, dtype=bool)
        held[rows] = True
        nodes = np.flatnonzero(held)
        sums = []
        for c, flat in zip(weights, pattern, strict=True):
            per_entry = np.repeat(c, lengths) if flat else m.data[pos] * np.repeat(c, lengths)
            sums.append(np.bincount(rows, weights=per_entry, minlength=n)[nodes])
        return nodes, sums
    order = np.argsort(rows)  # groups only: bincount below still adds each row's entries in column order
    sorted_rows = rows[order]
    first = np.empty(len(rows), dtype=bool)
    first[0] = True
    np.not_equal(sorted_rows[1:], sorted_rows[:-1], out=first[1:])
    nodes = sorted_rows[first]
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    sums = []
    for c, flat in zip(weights, pattern, strict=True):
        per_entry = np.repeat(c, lengths)
        if not flat:
            per_entry = m.data[pos] * per_entry
        sums.append(np.bincount(inverse, weights=per_entry, minlength=len(nodes)))
    return nodes, sums


def _idf(n: int, df: np.ndarray) -> np.ndarray:
    """BM25 idf of document frequencies among n skills (a token no skill has gets the highest)."""
    return np.log(1 + (n - df + 0.5) / (df + 0.5))


def parts_index(files: VersionFiles, n_nodes: int, config: RetrievalConfig) -> LexicalIndex:
    """The index of a stored version, read a token part at a time (the string table is never held whole)."""
    return LexicalIndex.of(EncodedTokens.of_parts(files, n_nodes), config)


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
        # assembled from its sorted rows (token_rows.py), then the chunks are stacked; no group-by, no join,
        # no global sort.
        self.config = config = config or RetrievalConfig()
        self.n = n = encoded.n_nodes
        self.vocab = vocab = encoded.vocab
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
        matrix.data *= _idf(n, self.df)[matrix.indices]
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
        return float(_idf(self.n, np.asarray(self.df[col] if col is not None else 0)))

    def row_patch(self, node_tokens: pl.DataFrame) -> dict[int, float]:
        """{token column: value} of one skill re-scored from new token rows (field, token, tf).

        Used to try a description revision without rebuilding the index: idf and average lengths stay
        those of the version (the exact index is rebuilt once the round's revisions are chosen). Tokens
        outside the vocabulary cannot match any query token of the index and are left out.
        """
        # One skill's rows against the vocabulary's dict: a join or `is_in` over the whole vocabulary costs
        # 0.2-0.5 s a call on 100k skills, and L3 makes one call per revision it tries.
        index = self.vocab.index
        tokens = node_tokens["token"].to_list()
        known = node_tokens.filter(pl.Series([t in index for t in tokens], dtype=pl.Boolean))
        col = np.fromiter((index[t] for t in known["token"].to_list()), dtype=np.int64, count=known.height)
        coded = known.select(node=pl.lit(0, dtype=pl.Int64), col=pl.Series(col), field=field_codes(), tf="tf")
        rows = sorted_rows(coded, 0, 1)
        flen = np.bincount(rows.field, weights=rows.tf, minlength=len(CODED_FIELDS))[rows.field]
        m = self._matrix_of(rows, flen)
        m.data *= _idf(self.n, self.df)[m.indices]
        return dict(zip(m.indices.tolist(), m.data.tolist(), strict=True))

    def query_columns(self, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(columns, weights, known, n_tokens) of a query: its distinct known tokens that may carry
        evidence, each weighted 1 + ln(count); all its distinct known tokens; its token count. Tokens held
        by more than `seed_df_max` of the skills are dropped (if at least `seed_df_min` skills hold them: a
        tiny library has no common words), unless that would drop them all."""
        q_tokens = tokenize(query)
        index = self.vocab.index
        known, counts = np.unique(
            np.array([index[t] for t in q_tokens if t in index], dtype=np.int64), return_counts=True
        )
        cols = known
        df = self.df[known]
        common = (df > self.config.seed_df_max * self.n) & (df >= self.config.seed_df_min)
        if common.any() and not common.all():
            cols, counts = known[~common], counts[~common]
        return cols, 1.0 + np.log(counts), known, len(q_tokens)

    def coverage(self, known: np.ndarray, cols: np.ndarray) -> float:
        """The largest share of the idf mass of the query's known tokens that one skill matches with
        `cols`. Tokens no skill has are left out: they are mostly names, numbers and ids that neither
        signal could use, and counting them would push an entity-laden request towards the embedding."""
        if not len(cols):
            return 0.0
        _, (matched,) = _column_sums(self.matrix, cols, [_idf(self.n, self.df[cols])], [True])
        return self._coverage(known, matched)

    def _coverage(self, known: np.ndarray, matched: np.ndarray) -> float:
        total = float(_idf(self.n, self.df[known]).sum())
        return float(matched.max() / total) if total > 0 and len(matched) else 0.0

    def evidence(self, query: str, patch: dict[int, dict[int, float]] | None = None) -> Evidence:
        """Lexical evidence from the postings of the query's tokens: only the skills they reach are
        scored. `patch` replaces whole rows ({node: {column: value}})."""
        cols, weights, known, n_tokens = self.query_columns(query)
        idf = _idf(self.n, self.df[cols])
        nodes, (score, matched) = _column_sums(self.matrix, cols, [weights, idf], [False, True])
        if patch:
            nodes, score, matched = _with_rows(nodes, score, matched, patch, cols, weights)
        # the name rule reads every query token: a name made of common words is still named in full
        named, (hits,) = _column_sums(self.name_matrix, known, [np.ones(len(known))], [True])
        named = named[(self.name_len[named] > 0) & (hits >= self.name_len[named])]
        top = score.max() if len(score) else 0.0
        positive = score > 0
        out, at_scored, at_named = union_positions(nodes[positive], named)
        node_score = np.zeros(len(out))
        node_score[at_scored] = score[positive]
        name_match = np.zeros(len(out), dtype=bool)
        name_match[at_named] = True
        evidence = node_score / top if top > 0 else np.zeros(len(out))
        evidence = evidence + self.config.name_bonus * name_match
        coverage = self._coverage(known, matched) if top > 0 else 0.0
        return Evidence(self.n, out, node_score, name_match, evidence, n_tokens, coverage)

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
    then rename), a damaged or mismatching entry is rebuilt, and a store that cannot be written to simply
    goes without. It saves rebuilding the index on every process start (seconds on 100k skills).
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
    folder = root / key
    if (folder / "complete").is_file():
        try:
            return LexicalIndex.load(folder, n, config)
        except (OSError, ValueError, KeyError):
            pass  # damaged or foreign: rebuild below and replace it
    index = _fresh_index(snapshot, config)

    def fill(stage: Path) -> None:
        index.save(stage)
        (stage / "complete").write_text(json.dumps(key_data))

    write_entry(root, key, fill)  # a read-only or racing store: the index in memory is all this needs
    return index


def _fresh_index(snapshot: Snapshot, config: RetrievalConfig) -> LexicalIndex:
    """The index built from the token table in memory when the snapshot holds it (a draft, or a version
    whose tokens were read), else from its stored parts one at a time."""
    files = snapshot.files
    if snapshot.tokens_loaded or files is None:
        return LexicalIndex(snapshot.tokens, snapshot.nodes.height, config)
    return parts_index(files, snapshot.nodes.height, config)
