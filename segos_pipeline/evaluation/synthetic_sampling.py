"""Buffered random streams of the synthetic generator: uniform floats and Zipf-distributed words."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np

# A numpy call per draw costs far more than the draw, which dominates a large run; every stream below
# therefore draws thousands of values per numpy call and hands them out through a generator's __next__.

_BLOCK = 4096


def zipf_cdf(n: int, s: float, q: float = 2.7) -> np.ndarray:
    """Zipf–Mandelbrot cdf over ranks 0..n-1 (q flattens the head as real corpora do)."""
    weights = 1.0 / (np.arange(n, dtype=np.float64) + q) ** s
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def uniform_cdf(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.float64) / n


class Stream:
    """Uniform floats in [0, 1) from one numpy generator, buffered."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.u: Callable[[], float] = self._floats().__next__

    def _floats(self) -> Iterator[float]:
        while True:
            yield from self.rng.random(_BLOCK).tolist()

    def below(self, n: int) -> int:
        return int(self.u() * n)

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[int(self.u() * len(seq))]


class Sampler:
    """Words drawn i.i.d. by a fixed cdf (Zipf or uniform), buffered."""

    def __init__(self, words: Sequence[str], cdf: np.ndarray, rng: np.random.Generator):
        self._gen = self._draws(np.asarray(words, dtype=object), cdf, rng)
        self.one: Callable[[], str] = self._gen.__next__

    @staticmethod
    def _draws(words: np.ndarray, cdf: np.ndarray, rng: np.random.Generator) -> Iterator[str]:
        top = len(words) - 1
        while True:
            idx = np.searchsorted(cdf, rng.random(_BLOCK), side="right")
            yield from words[np.minimum(idx, top)].tolist()

    def take(self, k: int) -> list[str]:
        return list(islice(self._gen, k))
