"""Distinct strings → dense integer ids, grown batch by batch, by hash and without Python objects."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from .lexicon import position_index

# Appended batches a string column keeps before one copy joins them: a gather walks the chunks.
_MAX_CHUNKS = 32
_RECENT_MIN = 65_536  # keys the small level of a StringIndex may hold before it joins the large one


def _hash(tokens: pl.Series) -> np.ndarray:
    return tokens.hash().to_numpy()


class StringIndex:
    """String → id in first-seen order, grown a batch of distinct strings at a time.

    Looked up by a u64 hash of each string in a sorted numpy array: per batch, a binary search of the
    batch and an insert of its unseen strings, about 12 bytes a string besides the strings themselves (a
    polars join would hash the whole growing index on every batch; a dictionary costs ~110 bytes a
    string, hundreds of MB at the tokens of a million skills). A found string is compared with the one it
    was found as, so a hash collision is seen, and from then on the index is an exact dictionary."""

    def __init__(self, key: Callable[[pl.Series], np.ndarray] = _hash) -> None:
        self.key = key
        self.tokens = pl.Series("token", [], dtype=pl.String)  # the token of each id
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted
        self.key_ids = np.zeros(0, dtype=np.uint32)  # the id of each of `keys`
        self.recent = np.zeros(0, dtype=np.uint64)  # keys added since the last merge into `keys`, sorted
        self.recent_ids = np.zeros(0, dtype=np.uint32)
        self.index: dict[str, int] | None = None  # the exact fallback, once a collision is seen

    def ids(self, tokens: pl.Series) -> np.ndarray:
        """The id of each of `tokens` (distinct strings), adding the unseen ones."""
        if self.index is None:
            ids = self._by_key(tokens)
            if ids is not None:
                return ids
            self.index = position_index(self.tokens)
        return self._by_dict(tokens)

    def _by_key(self, tokens: pl.Series) -> np.ndarray | None:
        """The ids through the sorted keys, or None (nothing changed) if two distinct tokens share one."""
        keys = self.key(tokens)
        found, ids = self._find(keys)
        mask = pl.Series(found)
        if found.any() and not bool((self.tokens.gather(ids[found]) == tokens.filter(mask)).all()):
            return None
        new_keys = keys[~found]
        if len(np.unique(new_keys)) != len(new_keys):
            return None
        start = len(self.tokens)
        ids[~found] = np.arange(start, start + len(new_keys), dtype=np.uint32)
        self._add(new_keys, ids[~found])
        self._append(tokens.filter(~mask))
        return ids

    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether each key is indexed, its id where it is). The keys are looked up in ascending order:
        numpy's binary search then starts each key where the last one ended, which at a million-token
        index is several times faster than jumping about it."""
        order = np.argsort(keys)
        ordered = keys[order]
        found = np.zeros(len(keys), dtype=bool)
        ids = np.zeros(len(keys), dtype=np.uint32)
        for level, level_ids in ((self.keys, self.key_ids), (self.recent, self.recent_ids)):
            if not len(level):
                continue
            at = np.minimum(np.searchsorted(level, ordered), len(level) - 1)
            hit = level[at] == ordered
            found[order[hit]] = True
            ids[order[hit]] = level_ids[at[hit]]
        return found, ids

    def _add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Index new keys. They go to a small sorted level first and join the large one only once that
        level holds an eighth of it: inserting every batch into millions of keys copied them each time
        (quadratic in the batches of a large merge)."""
        order = np.argsort(keys)
        where = np.searchsorted(self.recent, keys[order])
        self.recent = np.insert(self.recent, where, keys[order])
        self.recent_ids = np.insert(self.recent_ids, where, ids[order])
        if len(self.recent) > max(_RECENT_MIN, len(self.keys) // 8):
            where = np.searchsorted(self.keys, self.recent)
            self.keys = np.insert(self.keys, where, self.recent)
            self.key_ids = np.insert(self.key_ids, where, self.recent_ids)
            self.recent = self.recent[:0]
            self.recent_ids = self.recent_ids[:0]

    def _by_dict(self, tokens: pl.Series) -> np.ndarray:
        index, before = self.index, len(self.tokens)
        assert index is not None
        words = tokens.to_list()
        # the default is evaluated before the insert: an unseen token gets the next free id
        ids = np.fromiter((index.setdefault(w, len(index)) for w in words), dtype=np.uint32, count=len(words))
        self._append(tokens.filter(pl.Series(ids >= before)))  # unseen, in id order
        return ids

    def series(self) -> pl.Series:
        return self.tokens.rechunk()

    def _append(self, tokens: pl.Series) -> None:
        self.tokens.append(tokens)
        if self.tokens.n_chunks() > _MAX_CHUNKS:
            self.tokens = self.tokens.rechunk()

    def __len__(self) -> int:
        return len(self.tokens)
