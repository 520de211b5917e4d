"""Distinct strings → dense integer ids, grown batch by batch, by hash and without Python objects."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from .lexicon import position_index

# Appended batches a string column keeps before one copy joins them: a gather walks the chunks.
_MAX_CHUNKS = 32


def _hash(tokens: pl.Series) -> np.ndarray:
    return tokens.hash().to_numpy()


class StringIndex:
    """String → id in first-seen order, grown a batch of distinct strings at a time.

    Looked up by a u64 hash of each string in a sorted numpy array: per batch, a binary search of the
    batch and an insert of its unseen strings, about 12 bytes a string besides the strings themselves (a
    polars join would hash the whole growing index on every batch; a dictionary costs ~110 bytes a
    string, 280 MB at the 2.5M tokens of 1M synthetic skills). A found string is compared with the one it
    was found as, so a hash collision is seen, and from then on the index is an exact dictionary."""

    def __init__(self, key: Callable[[pl.Series], np.ndarray] = _hash) -> None:
        self.key = key
        self.tokens = pl.Series("token", [], dtype=pl.String)  # the token of each id
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted
        self.key_ids = np.zeros(0, dtype=np.uint32)  # the id of each of `keys`
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
        at = np.minimum(np.searchsorted(self.keys, keys), max(0, len(self.keys) - 1))
        found = self.keys[at] == keys if len(self.keys) else np.zeros(len(keys), dtype=bool)
        ids = np.empty(len(keys), dtype=np.uint32)
        ids[found] = self.key_ids[at[found]]
        mask = pl.Series(found)
        if found.any() and not bool((self.tokens.gather(ids[found]) == tokens.filter(mask)).all()):
            return None
        new_keys = keys[~found]
        if len(np.unique(new_keys)) != len(new_keys):
            return None
        start = len(self.tokens)
        ids[~found] = np.arange(start, start + len(new_keys), dtype=np.uint32)
        order = np.argsort(new_keys)
        where = np.searchsorted(self.keys, new_keys[order])
        self.keys = np.insert(self.keys, where, new_keys[order])
        self.key_ids = np.insert(self.key_ids, where, ids[~found][order])
        self._append(tokens.filter(~mask))
        return ids

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
