"""Field-weighted BM25F lexical evidence (SPEC §6 steps 1 and 7), precomputed as one sparse matrix.

For each (skill, token): tf̃ = Σ_f w_f · tf_f / (1 − b + b·len_f/avglen_f) over the GoS fields, and the
stored value is idf(t)·tf̃·(k1+1)/(k1+tf̃). A query's score is then the sum of the matrix columns of its
distinct tokens: rare terms outweigh common ones, repeated terms saturate, and the GoS field weights stay.
Everything is built once per (version, config); a query touches only its own tokens' columns.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import scipy.sparse as sp

from .config import RetrievalConfig
from .lexicon import Vocabulary
from .text import tokenize

if TYPE_CHECKING:
    from .snapshot import Snapshot

_CACHE_FORMAT = 2  # 2: the matrix is built with bincounts and sparse sums (last-bit differences)


@dataclass(frozen=True)
class Evidence:
    """Per-query lexical evidence over all skills (dense arrays of length n)."""

    score: np.ndarray  # raw BM25F score
    name_match: np.ndarray  # bool: every token of the skill's name occurs in the query
    evidence: np.ndarray  # m_i(q): score / max score, plus the name bonus
    n_query_tokens: int


def _column_sum(m: sp.csc_matrix, cols: np.ndarray, n: int) -> np.ndarray:
    if len(cols) == 0:
        return np.zeros(n)
    starts, stops = m.indptr[cols], m.indptr[cols + 1]
    lengths = stops - starts
    if lengths.sum() == 0:
        return np.zeros(n)
    # Indices of all selected column entries without a Python loop: a ragged arange.
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    pos = np.arange(lengths.sum()) + offsets
    return np.bincount(m.indices[pos], weights=m.data[pos], minlength=n)


class LexicalIndex:
    def __init__(self, tokens: pl.DataFrame, n_nodes: int, config: RetrievalConfig | None = None):
        config = config or RetrievalConfig()
        self.n = n = n_nodes
        self.config = config
        self.vocab = Vocabulary(tokens["token"])
        self._weights = pl.DataFrame(
            {"field": list(config.field_weights), "fw": list(config.field_weights.values())},
            schema={"field": pl.String, "fw": pl.Float64},
        )
        # Whole-table arithmetic on integer arrays: one join maps each token to its column in the sorted
        # vocabulary, fields become small codes, and every per-(skill, field) or per-(skill, token) sum is
        # a bincount or a sparse matrix (which sums duplicate entries), not a group-by.
        rows = tokens.join(self.vocab.lookup, on="token").select("node", "field", "tf", "col")
        node = rows["node"].to_numpy().astype(np.int64)
        col = rows["col"].to_numpy()
        tf = rows["tf"].to_numpy().astype(np.float64)
        fields = rows["field"].unique().sort()
        code = rows["field"].cast(pl.Enum(fields)).to_physical().to_numpy().astype(np.int64)
        field_names = fields.to_list()
        lengths = np.bincount(node * len(fields) + code, weights=tf, minlength=n * len(fields))
        lengths = lengths.reshape(n, len(fields))
        avg = lengths.sum(axis=0) / max(n, 1)  # per skill, counting skills without the field as 0
        self._avg = pl.DataFrame(
            {"field": fields, "avg": avg}, schema={"field": pl.String, "avg": pl.Float64}
        )
        # df: skills holding the token in any field (each (skill, token) pair counted once)
        self.df = np.diff(self._matrix(node, col, np.ones(len(node))).indptr).astype(np.int64)
        self.matrix = self._bm25f(node, col, tf, code, field_names, lengths[node, code], avg)
        is_name = code == (field_names.index("name") if "name" in field_names else -1)
        name_matrix = self._matrix(node[is_name], col[is_name], np.ones(int(is_name.sum())))
        name_matrix.data[:] = 1.0
        self.name_matrix = name_matrix
        self.name_len = np.bincount(node[is_name], minlength=n)

    def _bm25f(
        self,
        node: np.ndarray,
        col: np.ndarray,
        tf: np.ndarray,
        code: np.ndarray,
        fields: list[str],
        flen: np.ndarray,
        avg: np.ndarray,
    ) -> sp.csc_matrix:
        """The BM25F matrix of token rows (SPEC §6): rows of fields without a weight are left out."""
        k1, b = self.config.bm25_k1, self.config.bm25_b
        weights = self.config.field_weights
        fw = np.array([weights.get(f, 0.0) for f in fields])
        keep = np.isin(code, [i for i, f in enumerate(fields) if f in weights])
        c = code[keep]
        w = fw[c] * tf[keep] / (1 - b + b * flen[keep] / avg[c])
        m = self._matrix(node[keep], col[keep], w)  # tf̃ per (skill, token): the field terms summed
        df = np.repeat(self.df, np.diff(m.indptr))
        m.data = np.log(1 + (self.n - df + 0.5) / (df + 0.5)) * m.data * (k1 + 1) / (k1 + m.data)
        return m

    def _values(self, rows: pl.DataFrame) -> pl.DataFrame:
        """(node, col, value) of BM25F for token rows, with this index's idf and average lengths."""
        k1, b = self.config.bm25_k1, self.config.bm25_b
        lengths = rows.group_by("node", "field").agg(flen=pl.col("tf").sum())
        tf_tilde = (
            rows.join(self._weights, on="field", how="inner")
            .join(lengths, on=["node", "field"])
            .join(self._avg, on="field")
            .with_columns(w=pl.col("fw") * pl.col("tf") / (1 - b + b * pl.col("flen") / pl.col("avg")))
            .group_by("node", "col")
            .agg(tf=pl.col("w").sum())
        )
        df = pl.Series(self.df).gather(tf_tilde["col"])
        return tf_tilde.with_columns(
            value=(1 + (self.n - df + 0.5) / (df + 0.5)).log() * pl.col("tf") * (k1 + 1) / (k1 + pl.col("tf"))
        )

    def _matrix(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> sp.csc_matrix:
        """(skill, column) entries as a CSC matrix, duplicate entries summed."""
        m = sp.csc_matrix((values, (rows, cols)), shape=(self.n, len(self.vocab)))
        m.sum_duplicates()
        return m

    def idf(self, token: str) -> float:
        """The BM25 idf of a token in this version (a token no skill has gets the highest idf)."""
        col = self.vocab.index.get(token)
        df = int(self.df[col]) if col is not None else 0
        return float(np.log(1 + (self.n - df + 0.5) / (df + 0.5)))

    def row_patch(self, node_tokens: pl.DataFrame) -> dict[int, float]:
        """{token column: value} of one skill re-scored from new token rows (field, token, tf).

        Used to try a description revision without rebuilding the index: idf and average lengths stay
        those of the version (the exact index is rebuilt once the round's revisions are chosen). Tokens
        outside the vocabulary cannot match any query token of the index and are left out.
        """
        index = self.vocab.index
        known = node_tokens.filter(pl.col("token").is_in(self.vocab.tokens.implode()))
        rows = known.select(
            node=pl.lit(0, dtype=pl.UInt32),
            field="field",
            tf="tf",
            col=pl.col("token").map_elements(index.__getitem__, return_dtype=pl.Int64),
        )
        values = self._values(rows)
        return dict(zip(values["col"].to_list(), values["value"].to_list(), strict=True))

    def evidence(self, query: str, patch: dict[int, dict[int, float]] | None = None) -> Evidence:
        """Lexical evidence of every skill; `patch` replaces whole rows ({node: {column: value}})."""
        q_tokens = tokenize(query)
        cols = self.vocab.ids(q_tokens)
        score = _column_sum(self.matrix, cols, self.n)
        for node, row in (patch or {}).items():
            score[node] = sum(row.get(int(c), 0.0) for c in cols)
        matched = _column_sum(self.name_matrix, cols, self.n)
        name_match = (self.name_len > 0) & (matched >= self.name_len)
        top = score.max() if self.n else 0.0
        evidence = score / top if top > 0 else np.zeros(self.n)
        evidence = evidence + self.config.name_bonus * name_match
        return Evidence(score=score, name_match=name_match, evidence=evidence, n_query_tokens=len(q_tokens))

    # ------------------------------------------------------------------------------------- persistence

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        sp.save_npz(folder / "matrix.npz", self.matrix.tocsc(), compressed=False)
        sp.save_npz(folder / "names.npz", self.name_matrix.tocsc(), compressed=False)
        np.save(folder / "df.npy", self.df)
        np.save(folder / "name_len.npy", self.name_len)
        pl.DataFrame({"token": self.vocab.tokens}).write_parquet(folder / "vocab.parquet")
        self._avg.write_parquet(folder / "avg.parquet")

    @classmethod
    def load(cls, folder: Path, n_nodes: int, config: RetrievalConfig) -> LexicalIndex:
        index = cls.__new__(cls)
        index.n = n_nodes
        index.config = config
        index.vocab = Vocabulary(pl.read_parquet(folder / "vocab.parquet")["token"])
        index._weights = pl.DataFrame(
            {"field": list(config.field_weights), "fw": list(config.field_weights.values())},
            schema={"field": pl.String, "fw": pl.Float64},
        )
        index._avg = pl.read_parquet(folder / "avg.parquet")
        index.df = np.load(folder / "df.npy")
        index.matrix = sp.load_npz(folder / "matrix.npz").tocsc()
        index.name_matrix = sp.load_npz(folder / "names.npz").tocsc()
        index.name_len = np.load(folder / "name_len.npy")
        if index.matrix.shape != (n_nodes, len(index.vocab)) or len(index.df) != len(index.vocab):
            raise ValueError("cached lexical index does not match the version")
        return index


def index_for(snapshot: Snapshot, config: RetrievalConfig) -> LexicalIndex:
    """The lexical index of a version, from the store's cache when it holds one for this configuration.

    The cache (`STORE/cache/lexical/<key>/`) is derived data outside the immutable version folders: its key
    is the version's token-table hash plus the scoring settings, it is written atomically (staged folder,
    then rename), a damaged or mismatching entry is rebuilt, and a store that cannot be written to simply
    goes without. It saves rebuilding the index on every process start (seconds on 100k skills).
    """
    n = snapshot.nodes.height
    tokens_key = snapshot.content_key("tokens")
    if snapshot.path is None or tokens_key is None:
        return LexicalIndex(snapshot.tokens, n, config)
    key_data = {
        "format": _CACHE_FORMAT,
        "tokens": tokens_key,
        "weights": config.field_weights,
        "k1": config.bm25_k1,
        "b": config.bm25_b,
    }
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:20]
    root = snapshot.path.parent.parent / "cache" / "lexical"
    folder = root / key
    if (folder / "complete").is_file():
        try:
            return LexicalIndex.load(folder, n, config)
        except (OSError, ValueError, KeyError):
            pass  # damaged or foreign: rebuild below and replace it
    index = LexicalIndex(snapshot.tokens, n, config)
    stage = root / f".{key}.{uuid.uuid4().hex}"
    try:
        index.save(stage)
        (stage / "complete").write_text(json.dumps(key_data))
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.rename(stage, folder)
    except OSError:
        pass  # a read-only or racing store: the index in memory is all this process needs
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
    return index
