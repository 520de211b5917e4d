"""Integer-array building blocks every layer uses: the distinct values of an array, and ragged ranges.

`np.unique` takes a hash-table path in numpy 2.x that is slow on the arrays segos holds (tens of thousands of
indices, trigram codes): a sort plus a neighbour comparison does the same work in a fraction of it.
"""

from __future__ import annotations

import numpy as np


def unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of `a`, sorted."""
    if len(a) < 2:
        return np.asarray(a).copy()
    s = np.sort(a)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The integer ranges [start, end), concatenated (a ragged arange: no Python loop over the ranges)."""
    lengths = ends - starts
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
