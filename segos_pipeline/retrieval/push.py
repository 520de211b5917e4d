"""Personalized PageRank by local push (forward push, Andersen–Chung–Lang), vectorised by frontier: the
one PPR solver a query runs, on a closed component of a few skills as on one that holds most of a library.

It solves (SPEC §6.2)

    s = α·p + (1−α)·(Tᵀs + (Σ_{u dangling} s_u)·p),

with T the reverse-aware row-stochastic operator (SPEC §5: forward edges plus γ-weighted reverse edges,
row-normalised) and dangling rows (no out-mass) teleporting to p. Written as s = α·p + (1−α)·M·s, M is
column-stochastic: column u of M is row u of T, or p for a dangling u.

Forward push keeps an estimate x and a residual r, starting from x = 0, r = p. Pushing u moves α·r_u into
x_u and spreads (1−α)·r_u over M's column u, which keeps the invariant s = x + PPR(r) (PPR being linear
in its restart vector). Because M is column-stochastic, PPR(r) has the mass of r, so the L1 distance of
the estimate to the exact vector is exactly Σ r when the push stops: `PushResult.residual` reports it.

A node is pushed while r_u ≥ ε·d_u (d_u its number of out-edges, at least 1). Every push removes α·r_u ≥
α·ε·d_u of residual mass from a total of 1, so the work (edges read) is at most 1/(α·ε) however large the
graph or its components are: the cost of a query follows ε, not the size of the seeds' component.

Pushes are synchronous by frontier: every node above its threshold is pushed at once, its out-rows read
with one ragged gather, and the mass they send summed per target with one scatter-add. The ACL bound holds
for any push order, so it holds for this one. On a small component a round costs a fixed number of numpy
calls whatever the frontier holds, so a round does only what the push needs: x is summed once at the end
from the amounts each round pushed, and the thresholds ε·d are kept between queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .sets import unique


@dataclass(frozen=True)
class PushResult:
    """PPR mass of the nodes the push reached (sorted indices, their estimates) and its accounting."""

    nodes: np.ndarray
    mass: np.ndarray
    residual: float  # Σ r at the end: the exact L1 distance of `mass` to the PPR vector
    pushes: int  # node pushes over all rounds
    work: int  # out-edges read (bounded by 1/(α·ε))
    rounds: int


class PushOperator:
    """The query-independent part of local push: T's rows, out-degrees and dangling rows."""

    def __init__(self, t: sp.csr_matrix):
        t = t.tocsr()
        self.n = t.shape[0]
        self.indptr = t.indptr.astype(np.int64)
        self.indices = t.indices
        self.data = t.data.astype(np.float64)
        self.degree = np.diff(self.indptr)
        self.dangling = self.degree == 0
        self.any_dangling = bool(self.dangling.any())
        self.unit = np.maximum(self.degree, 1).astype(np.float64)  # the push threshold is ε·unit
        self._limit = (0.0, self.unit)  # (ε, ε·unit) of the last query: ε is a setting, rarely changed

    def limit(self, epsilon: float) -> np.ndarray:
        """Each node's push threshold ε·d_u."""
        eps, limit = self._limit
        if eps != epsilon:
            limit = epsilon * self.unit
            self._limit = (epsilon, limit)  # one tuple: a concurrent reader sees a matching pair
        return limit

    def ppr(self, seeds: np.ndarray, weights: np.ndarray, alpha: float, epsilon: float) -> PushResult:
        """Approximate PPR from `seeds` (distinct; p ∝ weights); see the module docstring for the
        guarantee."""
        if not epsilon > 0:
            raise ValueError(f"local push needs a residual threshold ε > 0 (got {epsilon})")
        seeds = np.asarray(seeds, dtype=np.int64)
        p = np.asarray(weights, dtype=np.float64)
        p = p / p.sum()
        limit = self.limit(epsilon)
        keep = 1.0 - alpha
        # A dense residual is allocated zeroed and untouched pages stay unmapped, so its cost follows the
        # nodes the push reaches, not n; every read and write below goes through index arrays.
        r = np.zeros(self.n)
        r[seeds] = p
        frontier = seeds[p >= limit[seeds]]
        pushed: list[np.ndarray] = []
        amounts: list[np.ndarray] = []
        pushes = work = rounds = 0
        while len(frontier):
            rounds += 1
            pushes += len(frontier)
            rf = r[frontier]
            r[frontier] = 0.0
            pushed.append(frontier)
            amounts.append(rf)
            targets, sent = self._spread(frontier, keep * rf)
            work += len(targets)
            if self.any_dangling:
                teleport = keep * float(rf[self.dangling[frontier]].sum())
                if teleport > 0:  # dangling rows send their mass back to the personalisation vector
                    targets = np.concatenate([targets, seeds])
                    sent = np.concatenate([sent, teleport * p])
            np.add.at(r, targets, sent)
            # Only nodes that just received mass can have crossed their threshold.
            frontier = unique(targets[r[targets] >= limit[targets]])
        if not pushed:
            return PushResult(seeds[:0], np.zeros(0), 1.0, 0, 0, 0)
        every = np.concatenate(pushed)
        x = np.zeros(self.n)
        np.add.at(x, every, alpha * np.concatenate(amounts))
        nodes = unique(every)
        mass = x[nodes]
        # A push keeps Σx + Σr = 1 (T's rows and p each sum to 1), so the residual is what x lacks.
        residual = max(0.0, 1.0 - float(mass.sum()))
        return PushResult(nodes, mass, residual, pushes, work, rounds)

    def _spread(self, frontier: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(target, mass) of every out-edge of the frontier, carrying `out` split by T's row weights: the
        positions of the frontier's stored entries are one ragged arange."""
        starts = self.indptr[frontier]
        lengths = self.degree[frontier]
        ends = np.cumsum(lengths)
        pos = np.repeat(starts - ends + lengths, lengths) + np.arange(int(ends[-1]), dtype=np.int64)
        return self.indices[pos], self.data[pos] * np.repeat(out, lengths)
