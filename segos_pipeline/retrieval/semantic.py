"""Semantic evidence from a static embedding model (SPEC §6.8), computed once per version.

Short requests often paraphrase a skill instead of naming its words ("can I find peer-reviewed papers?"),
and lexical evidence has nothing to hold on to. A static embedding model (a token-embedding table, pooled
and normalised: no attention, no GPU, milliseconds per query on numpy) gives each skill a vector once per
version, and a query one vector; cosine similarity is the signal.

- Backends are pluggable (embeddings.py); `RetrievalConfig.semantic` names one.
- A skill's vector is the normalised sum of two embeddings: name + description, and name + description +
  the start of the body (the description says what a skill is for, the body how it talks about it).
- Vectors are cached under `STORE/cache/semantic/<key>/` like the lexical index, keyed by the backend and
  every skill's text hash. A version whose cache entry is missing reuses the vectors of any cached or
  in-process vectors with the same text hash, so an incremental update or an L3 description rewrite
  embeds only the skills whose text changed.
- Evidence for a query is limited to the `semantic_candidates` most similar skills, scaled to [0, 1]
  between the next one's similarity and the best, and to skills at least `semantic_min_cosine` similar:
  every skill has some cosine with every query, and only the head of that list is evidence.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from ..store.cache import T, cache_root, read_entry, write_entry
from .ann import InvertedLists, build_lists, check_lists, list_count, unit_rows
from .embeddings import EmbeddingBackend, backend_for

if TYPE_CHECKING:
    from ..config import RetrievalConfig
    from ..store.snapshot import Snapshot

_CACHE_FORMAT = 1
BODY_CHARS = 500  # body characters in a skill's second text: its opening, where skills say what they do


# The one search (SemanticIndex): inverted lists over the full vectors (ann.py). A query scores the rows
# of the lists nearest it until it has read IVF_SCAN_ROWS of them, so its cost stops growing with the
# library. A library of at most IVF_SCAN_ROWS skills is one list, read whole: the exact search, bit for bit.
# (figures: docs/benchmarks.md, "Design measurements quoted from the code")
IVF_SCAN_ROWS = 16_384
_IVF_FORMAT = 2  # 2: lists over the full vectors, with the vectors stored in list order
# ---------------------------------------------------------------------------------------- skill texts


def skill_texts(nodes: pl.DataFrame) -> tuple[list[str], list[str]]:
    """The two texts embedded per skill: name + description, and the same plus the body's opening."""
    name = (
        pl.coalesce(pl.col("name"), pl.col("folder"), pl.lit(""))
        .str.replace_all(r"[-_]+", " ")
        .str.strip_chars()
    )
    head = pl.concat_str([name, pl.col("description").fill_null("")], separator=". ")
    full = pl.concat_str([head, pl.col("body").fill_null("").str.slice(0, BODY_CHARS)], separator=" ")
    frame = nodes.select(head=head, full=full)
    return frame["head"].to_list(), frame["full"].to_list()


def text_hashes(heads: Sequence[str], fulls: Sequence[str]) -> list[str]:
    return [
        hashlib.blake2b(f"{a}\x00{b}".encode(), digest_size=12).hexdigest()
        for a, b in zip(heads, fulls, strict=True)
    ]


def embed_skills(backend: EmbeddingBackend, heads: Sequence[str], fulls: Sequence[str]) -> np.ndarray:
    if not heads:
        return np.zeros((0, 0), dtype=np.float32)
    return unit_rows(unit_rows(backend.embed(heads)) + unit_rows(backend.embed(fulls)))


# ---------------------------------------------------------------------------------------- the vectors


@dataclass(frozen=True)
class SkillVectors:
    """Unit vectors of a version's skills (row i = node i) and the text hash each was computed from."""

    fingerprint: str
    hashes: list[str]
    matrix: np.ndarray  # float32 (n, d)
    embedded: int  # how many skills were embedded to make these (the rest were reused)
    key: str = ""  # the cache key (backend and every text hash): names what is derived from these vectors


# Vectors recently computed or loaded in this process, for reuse by text hash (an evolution round's
# drafts, an incremental update): a handful of versions, bounded by count.
_RECENT: OrderedDict[str, SkillVectors] = OrderedDict()
_RECENT_MAX = 2  # an evolution round's draft and its committed version; 100 MB each at 100k skills
_RECENT_LOCK = threading.Lock()


def _remember(recent: OrderedDict[str, T], key: str, value: T) -> None:
    """Keep `value` as the newest entry of `recent`, dropping the oldest past `_RECENT_MAX`."""
    with _RECENT_LOCK:
        recent[key] = value
        recent.move_to_end(key)
        while len(recent) > _RECENT_MAX:
            recent.popitem(last=False)


def compute_vectors(
    backend: EmbeddingBackend,
    nodes: pl.DataFrame,
    hashes: Sequence[str],
    donors: Sequence[SkillVectors] = (),
) -> SkillVectors:
    """Vectors of the skills of `nodes` (their text hashes: `text_hashes` of `skill_texts`), reusing the
    vector of the first donor that holds a skill's text hash (its last row with that hash); the rest are
    embedded, in one batch in row order. Only the embedded skills' texts are made."""
    source = np.full(len(hashes), -1, dtype=np.int64)  # which donor gives each row its vector
    row = np.zeros(len(hashes), dtype=np.int64)  # and from which of its rows
    for d, donor in enumerate(donors):
        if donor.fingerprint != backend.fingerprint:
            continue
        open_rows = np.flatnonzero(source < 0)
        if not len(open_rows):
            break
        where = {h: i for i, h in enumerate(donor.hashes)}
        found = [(k, where[hashes[k]]) for k in open_rows.tolist() if hashes[k] in where]
        if found:
            at, rows = np.array(found, dtype=np.int64).T
            source[at], row[at] = d, rows
    todo = np.flatnonzero(source < 0)
    heads, fulls = skill_texts(nodes[todo.tolist()]) if len(todo) else ([], [])
    fresh = embed_skills(backend, heads, fulls)
    dim = fresh.shape[1] if len(todo) else donors[int(source[0])].matrix.shape[1] if len(hashes) else 0
    n = len(hashes)
    # A draft's donor is mostly its parent, row for row: copied whole (one copy of contiguous memory),
    # then only the rows it does not give in place are set.
    in_place = (source >= 0) & (row == np.arange(n))
    done = np.zeros(n, dtype=bool)
    matrix = np.zeros((n, dim), dtype=np.float32)
    if in_place.any():
        base = int(np.bincount(source[in_place]).argmax())
        if donors[base].matrix.shape == matrix.shape:
            matrix = np.array(donors[base].matrix, dtype=np.float32)
            done = in_place & (source == base)
    rest = np.flatnonzero((source >= 0) & ~done)
    for d in np.unique(source[rest]).tolist():
        at = rest[source[rest] == d]
        matrix[at] = donors[d].matrix[row[at]]
    if len(todo):
        matrix[todo] = fresh
    return SkillVectors(backend.fingerprint, list(hashes), matrix, len(todo))


# The text hashes of node tables hashed recently in this process, each held by a weak reference to its
# table: an evolution round's drafts and an incremental update differ from their parent in a few rows,
# and only those rows' texts are made and hashed again.
_HASHED: list[tuple[weakref.ref[pl.DataFrame], list[str]]] = []
_HASHED_MAX = 2
_TEXT_COLUMNS = ("name", "folder", "description", "body")  # what `skill_texts` reads


def node_text_hashes(nodes: pl.DataFrame) -> list[str]:
    """`text_hashes(*skill_texts(nodes))`: computed again only for the rows whose text columns differ from
    a table of the same height hashed recently."""
    with _RECENT_LOCK:
        recent = [(ref(), hashes) for ref, hashes in reversed(_HASHED)]
    out: list[str] | None = None
    for old, old_hashes in recent:
        if old is None or old.height != nodes.height:
            continue
        if old is nodes:
            return old_hashes
        if any(nodes[c].dtype != old[c].dtype for c in _TEXT_COLUMNS):
            break  # a column of another type: hashed whole, not compared
        changed = np.zeros(nodes.height, dtype=bool)
        for column in _TEXT_COLUMNS:
            changed |= ~nodes[column].eq_missing(old[column]).to_numpy()
        rows = np.flatnonzero(changed)
        if len(rows) * 4 > nodes.height:  # mostly new texts: hashed whole
            break
        out = list(old_hashes)
        if len(rows):
            for k, h in zip(rows.tolist(), text_hashes(*skill_texts(nodes[rows.tolist()])), strict=True):
                out[k] = h
        break
    if out is None:
        out = text_hashes(*skill_texts(nodes))
    with _RECENT_LOCK:
        live = [(r, h) for r, h in _HASHED if r() is not None and r() is not nodes]
        _HASHED[:] = [*live[len(live) - _HASHED_MAX + 1 :], (weakref.ref(nodes), out)]
    return out


def _cache_key(fingerprint: str, hashes: Sequence[str]) -> str:
    h = hashlib.sha256(json.dumps({"format": _CACHE_FORMAT, "backend": fingerprint}).encode())
    for x in hashes:
        h.update(x.encode())
    return h.hexdigest()[:20]


def _load_entry(folder: Path, fingerprint: str) -> SkillVectors | None:
    """The vectors of an entry already checked against its hashes (`read_entry`): None when another
    backend made them; an entry that does not load raises, and `read_entry` drops it."""
    meta = json.loads((folder / "complete").read_text())
    if meta.get("backend") != fingerprint or meta.get("format") != _CACHE_FORMAT:
        return None
    hashes = pl.read_parquet(folder / "hashes.parquet")["hash"].to_list()
    matrix = np.load(folder / "vectors.npy")
    if matrix.ndim != 2 or matrix.shape[0] != len(hashes):
        raise ValueError(f"{folder}: {matrix.shape} vectors for {len(hashes)} skills")
    return SkillVectors(fingerprint, hashes, matrix.astype(np.float32, copy=False), 0, folder.name)


def _cached_donors(root: Path, fingerprint: str, limit: int = 3) -> list[SkillVectors]:
    """The newest cache entries made with the same backend (the parent version's, usually)."""
    if not root.is_dir():
        return []
    entries = sorted(
        (p for p in root.iterdir() if not p.name.startswith(".") and (p / "complete").is_file()),
        key=_mtime,
        reverse=True,
    )
    out = []
    for folder in entries:
        donor = read_entry(root, folder.name, lambda f: _load_entry(f, fingerprint))
        if donor is not None:
            out.append(donor)
        if len(out) >= limit:
            break
    return out


def _mtime(folder: Path) -> float:
    try:
        return (folder / "complete").stat().st_mtime
    except OSError:  # dropped or replaced by another process since it was listed
        return 0.0


def vectors_for(snapshot: Snapshot, backend: EmbeddingBackend) -> SkillVectors:
    """The skill vectors of a version: from the store's cache, else computed (reusing unchanged skills'
    vectors) and cached. A draft (no folder) and a store that cannot be written to go without the disk
    cache; the process keeps the last few in memory either way."""
    hashes = node_text_hashes(snapshot.nodes)
    key = _cache_key(backend.fingerprint, hashes)
    with _RECENT_LOCK:
        hit = _RECENT.get(key)
    root = cache_root(snapshot.path, "semantic")
    if hit is not None:
        # the same texts embedded earlier in this process (another store, a draft): this version still
        # gets its entry on disk, or the next process would embed every skill again
        if root is not None and not (root / key / "complete").is_file():
            _save_entry(root, key, hit)
        return hit
    if root is not None:
        loaded = read_entry(root, key, lambda folder: _load_entry(folder, backend.fingerprint))
        if loaded is not None and loaded.hashes == hashes:
            _remember(_RECENT, key, loaded)
            return loaded
    with _RECENT_LOCK:
        donors = list(reversed(_RECENT.values()))
    if root is not None:
        donors += _cached_donors(root, backend.fingerprint)
    vectors = replace(compute_vectors(backend, snapshot.nodes, hashes, donors), key=key)
    if root is not None:
        _save_entry(root, key, vectors)
    _remember(_RECENT, key, vectors)
    return vectors


def _save_entry(root: Path, key: str, vectors: SkillVectors) -> None:
    def fill(stage: Path) -> None:
        np.save(stage / "vectors.npy", vectors.matrix)
        hashes = pl.DataFrame({"hash": vectors.hashes}, schema={"hash": pl.String})
        hashes.write_parquet(stage / "hashes.parquet")
        meta = {"format": _CACHE_FORMAT, "backend": vectors.fingerprint, "skills": len(vectors.hashes)}
        (stage / "complete").write_text(json.dumps(meta))

    write_entry(root, key, fill)  # a read-only or racing store: the vectors in memory are all this needs


# ------------------------------------------------------------------------------------------ evidence


@dataclass(eq=False)
class SemanticIndex:
    """Answers queries against one version's skill vectors, through their inverted lists (`lists_for`),
    reading at least `scan_rows` rows of them a query."""

    vectors: SkillVectors
    backend: EmbeddingBackend
    candidates: int
    min_cosine: float
    lists: InvertedLists
    scan_rows: int = IVF_SCAN_ROWS  # `semantic_index` passes the setting as it is when the index is made

    @property
    def matrix(self) -> np.ndarray:
        return self.vectors.matrix

    def query_vector(self, query: str) -> np.ndarray:
        return unit_rows(self.backend.embed([query]))[0]

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray:
        """Unit vectors of several queries, embedded in one call."""
        return unit_rows(self.backend.embed(list(queries)))

    def evidence_and_nearest(
        self, q: np.ndarray, patch: dict[int, np.ndarray] | None, m: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The evidence of a unit query vector `q`, held over the skills that have any: (sorted node
        indices, their z > 0), z ∈ (0, 1] for the `candidates` most similar skills (best = 1, the next one
        after them = 0) and none below `min_cosine`; and the m skills most similar to `q` with their
        cosines (what experience votes against), from one search. Past one list, nothing the size of the
        library is allocated or read."""
        rows, sims = self._scored(q, patch)
        # Skills not scored rank below every one that was: the head is taken among the scored ones.
        pos, z = head_of(sims, self.candidates, self.min_cosine)
        nodes = rows[pos]
        ranked = np.argsort(nodes, kind="stable")
        return (nodes[ranked], z[ranked], *_nearest(rows, sims, m))

    def nearest(
        self, q: np.ndarray, patch: dict[int, np.ndarray] | None, m: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The m skills most similar to `q` and their cosines, as `evidence_and_nearest` finds them, without
        the evidence."""
        return _nearest(*self._scored(q, patch), m)

    def nearest_each(
        self, vectors: Sequence[np.ndarray], patch: dict[int, np.ndarray] | None, m: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """`nearest` of each of several unit vectors: a request's sentences, which vote in the experience
        (their evidence is not fused). Past one list they share one search's budget, each its nearest lists
        for about `scan_rows` / k rows, the union read once (ann.py): a search of its own for each sentence
        made a request of several sentences cost several searches of the library. With one list, the exact
        pass of each, as `nearest` makes it."""
        if len(vectors) < 2 or self.scan_rows >= len(self.lists.order):
            return [self.nearest(v, patch, m) for v in vectors]
        rows, sims = self.lists.scan(np.stack(vectors), self.scan_rows // len(vectors))
        sims = sims.astype(np.float64)
        return [_nearest(*_patched(rows, s, v, patch), m) for v, s in zip(vectors, sims, strict=True)]

    def _scored(self, q: np.ndarray, patch: dict[int, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
        """(node ids, similarities) of the skills the search scores: the rows of the lists nearest `q`
        (every skill, in order, when there is one list), patched (`_patched`)."""
        rows, sims = self.lists.scan(q, self.scan_rows)
        return _patched(rows, sims.astype(np.float64), q, patch)

    def vector_of(self, nodes_row: pl.DataFrame) -> np.ndarray:
        """The vector a (revised) one-row node table would get: to try a description rewrite."""
        return embed_skills(self.backend, *skill_texts(nodes_row))[0]


def _patched(
    rows: np.ndarray, sims: np.ndarray, q: np.ndarray, patch: dict[int, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray]:
    """A search's (rows, similarities to `q`) with every patched skill scored with its new vector: in its
    place when its list was read (so one list stays the exact search), else appended."""
    if patch:
        patched = np.fromiter(patch, dtype=np.int64, count=len(patch))
        new = np.fromiter((float(v @ q) for v in patch.values()), dtype=np.float64, count=len(patch))
        at = _positions(rows, patched)
        read = at >= 0
        sims[at[read]] = new[read]
        rows = np.concatenate((rows, patched[~read]))
        sims = np.concatenate((sims, new[~read]))
    return rows, sims


def _nearest(rows: np.ndarray, sims: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The m scored skills with the largest similarities (unordered) and those similarities."""
    if m <= 0:  # nobody asked for them (a version without experience): no selection on the query path
        near = np.zeros(0, dtype=np.int64)
    elif m < len(sims):
        near = np.argpartition(-sims, m - 1)[:m]
    else:
        near = np.arange(len(sims))
    return rows[near], sims[near]


def _positions(rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The position of each of `nodes` in `rows` (distinct ids), -1 where it is not there."""
    hit = np.flatnonzero(np.isin(rows, nodes))
    where = {int(r): int(i) for r, i in zip(rows[hit], hit, strict=True)}
    return np.array([where.get(node, -1) for node in nodes.tolist()], dtype=np.int64)


# Inverted lists recently built or loaded in this process, by their cache entry's name.
_RECENT_LISTS: OrderedDict[str, InvertedLists] = OrderedDict()


def lists_count(n: int) -> int:
    """Lists over n skills: one (read whole, the exact search) up to IVF_SCAN_ROWS, else 2√n (ann.py)."""
    return 1 if n <= IVF_SCAN_ROWS else list_count(n)


def lists_for(snapshot: Snapshot, vectors: SkillVectors) -> InvertedLists:
    """The inverted lists of a version's skill vectors. One list is the vectors themselves, made on the
    spot. More are read from the store's cache (the list-ordered vectors memory-mapped), else built (once
    per set of skill texts) and cached like the vectors. A damaged or foreign cache entry is rebuilt and
    replaced."""
    n = vectors.matrix.shape[0]
    k = lists_count(n)
    if k == 1 or not vectors.key:
        return build_lists(vectors.matrix, k)
    key = f"{vectors.key}-f{_IVF_FORMAT}-k{k}"
    with _RECENT_LOCK:
        hit = _RECENT_LISTS.get(key)
    if hit is not None:
        return hit
    root = cache_root(snapshot.path, "semantic-lists")
    lists = read_entry(root, key, lambda folder: _load_lists(folder, vectors.matrix)) if root else None
    if lists is None:
        lists = build_lists(vectors.matrix, k)
        if root is not None and _save_lists(root, key, lists):
            # Read back memory-mapped: the list-ordered copy then lives in the page cache, shared by every
            # process that loads this version, instead of in this process's heap.
            lists = read_entry(root, key, lambda folder: _load_lists(folder, vectors.matrix)) or lists
    _remember(_RECENT_LISTS, key, lists)
    return lists


def _save_lists(root: Path, key: str, lists: InvertedLists) -> bool:
    def fill(stage: Path) -> None:
        for name in ("centroids", "order", "offsets", "vectors"):
            np.save(stage / f"{name}.npy", getattr(lists, name))
        meta = {"format": _IVF_FORMAT, "rows": len(lists.order), "lists": len(lists.centroids)}
        (stage / "complete").write_text(json.dumps(meta))

    return write_entry(root, key, fill)


def _load_lists(folder: Path, source: np.ndarray) -> InvertedLists:
    """The cached lists in `folder` (already checked against its hashes by `read_entry`) when they are of
    this format and the lists of `source`; raises otherwise, and `read_entry` drops the entry."""
    meta = json.loads((folder / "complete").read_text())
    if meta.get("format") != _IVF_FORMAT:
        raise ValueError(f"{folder}: lists of format {meta.get('format')}, not {_IVF_FORMAT}")
    lists = InvertedLists(
        np.load(folder / "centroids.npy"),
        np.load(folder / "order.npy"),
        np.load(folder / "offsets.npy"),
        np.asarray(np.load(folder / "vectors.npy", mmap_mode="r")),
    )
    problem = check_lists(lists, source)
    if problem is not None:  # foreign: rebuilt by the caller
        raise ValueError(f"{folder}: {problem}")
    return lists


def head_of(sims: np.ndarray, m: int, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """(positions, z > 0) of the top-m similarities rescaled to (0, 1] against the (m+1)-th (the
    reference, or `floor` when that is higher). One partial selection, linear in len(sims)."""
    n = len(sims)
    none = np.zeros(0, dtype=np.int64), np.zeros(0)
    if n == 0 or m <= 0:
        return none
    if m < n:
        part = np.argpartition(-sims, m)[: m + 1]  # position m holds the (m+1)-th largest
        ref, head = float(sims[part[m]]), part[:m]
    else:
        ref, head = float(sims.min()), np.arange(n)
    ref = max(ref, floor)
    top = float(sims[head].max())
    if top <= ref:
        return none
    vals = (sims[head] - ref) / (top - ref)
    keep = vals > 0
    return head[keep].astype(np.int64, copy=False), vals[keep]


def semantic_index(snapshot: Snapshot, config: RetrievalConfig) -> SemanticIndex | None:
    """The semantic index of a version under `config.semantic` (None when it is `none`)."""
    backend = backend_for(config.semantic)
    if backend is None:
        return None
    vectors = vectors_for(snapshot, backend)
    lists = lists_for(snapshot, vectors)
    return SemanticIndex(
        vectors, backend, config.semantic_candidates, config.semantic_min_cosine, lists, IVF_SCAN_ROWS
    )
