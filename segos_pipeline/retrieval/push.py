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
with one ragged gather, and the mass they send summed per target with one bincount. The ACL bound holds
for any push order, so it holds for this one. On a small component a round costs a fixed number of numpy
calls whatever the frontier holds (≈40 rounds at α = 0.2, ε = 3e-5), so a round does only what the push
needs, on arrays as small as the part of the graph it reached: the reached nodes get local slots in
order of arrival (a dense global → slot map, allocated zeroed so its cost follows the nodes touched), r
and the thresholds live in those slots, the frontier is the slots at or above their threshold, and x is
summed once at the end from the amounts each round pushed. A node that arrives twice in one round takes
one slot and leaves the others empty (r = 0, never pushed): no sort per round, and the slots stay
bounded by the seeds plus the edges read. ε·d and (1−α)·T's weights are kept between queries.

On a small graph whose rows hold a good share of all nodes (an evolved library's induced edges), once every
node has a slot the rest of the push reads the frontier's rows of a dense (1−α)·T: the same products summed
in the same order, so the same bits as the sparse rounds, without their gathers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


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
        self.indices = t.indices.astype(np.int64)  # numpy casts a narrower index array on every gather
        self.data = t.data.astype(np.float64)
        self.degree = np.diff(self.indptr)
        self.dangling = self.degree == 0
        self.any_dangling = bool(self.dangling.any())
        self.unit = np.maximum(self.degree, 1).astype(np.float64)  # the push threshold is ε·unit
        # Views of one arange stand in for the per-round aranges: edge positions (≤ nnz), frontier
        # positions and slots (≤ n seeds + one per edge read).
        self.seq = np.arange(self.n + len(self.indices) + 1, dtype=np.int64)
        # (ε, α) of the last query with ε·unit and (1−α)·T's weights: settings, rarely changed
        self._scaled = ((0.0, 0.0), self.unit, self.data)
        # A small graph whose rows hold a good share of all nodes (an evolved library's induced edges: 199
        # tools, 18k edges) is pushed densely once every node is reached (`_dense_rounds`).
        self.dense = self.n <= _DENSE_MAX_NODES and _DENSE_MIN_SHARE * self.n * self.n <= len(self.indices)
        if self.dense:  # a row's repeated target would add twice in the sparse round, once here
            rows = np.repeat(np.arange(self.n, dtype=np.int64), self.degree)
            self.dense = len(np.unique(rows * self.n + self.indices)) == len(self.indices)
        self._dense: tuple[float, np.ndarray] | None = None  # (1 − α, the dense (1 − α)·T)

    def scaled(self, epsilon: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """Each node's push threshold ε·d_u, and the share (1−α)·T_uv a push of u sends along each edge."""
        key, limit, moved = self._scaled
        if key != (epsilon, alpha):
            limit, moved = epsilon * self.unit, (1.0 - alpha) * self.data
            self._scaled = ((epsilon, alpha), limit, moved)  # one tuple: a concurrent reader sees a match
        return limit, moved

    def ppr(self, seeds: np.ndarray, weights: np.ndarray, alpha: float, epsilon: float) -> PushResult:
        """Approximate PPR from `seeds` (distinct; p ∝ weights); see the module docstring for the
        guarantee."""
        if not epsilon > 0:
            raise ValueError(f"local push needs a residual threshold ε > 0 (got {epsilon})")
        seeds = np.asarray(seeds, dtype=np.int64)
        p = np.asarray(weights, dtype=np.float64)
        p = p / p.sum()
        limit, moved = self.scaled(epsilon, alpha)
        keep = 1.0 - alpha
        indptr, degree, indices, seq = self.indptr, self.degree, self.indices, self.seq
        k = len(seeds)
        # Slot 0 is the map's "not reached" and never pushed (its limit is infinite); the seeds take 1..k.
        slot = np.zeros(self.n, dtype=np.int64)
        slot[seeds] = seq[1 : k + 1]
        used = k + 1
        slots = _Slots(64 + 2 * used)
        slots.fill(1, seeds, indptr[seeds], degree[seeds], limit[seeds])
        slots.limit[0] = np.inf
        slots.r[1:used] = p
        r, lim = slots.r[:used], slots.limit[:used]
        pushed: list[np.ndarray] = []  # each round's frontier
        amounts: list[np.ndarray] = []
        work = 0
        frontier = (r >= lim).nonzero()[0]
        while len(frontier):
            rf = _take(frontier, r, pushed, amounts)
            # the positions of the frontier's stored entries: one ragged arange (per-row values repeated
            # over the row's edges, cheaper than a gather through an edge → row index)
            lengths = slots.degree[frontier]
            ends = np.add.accumulate(lengths)
            total = int(ends[-1])
            pos = seq[:total] + (slots.start[frontier] - ends + lengths).repeat(lengths)
            targets = indices[pos]
            work += total
            at = slot[targets]
            if np.count_nonzero(at) < total:  # first arrivals take slots
                fresh = targets[at == 0]
                end = used + len(fresh)
                slots.reserve(end)
                slot[fresh] = seq[used:end]  # a node arriving twice keeps one slot; the other stays empty
                slots.fill(used, fresh, indptr[fresh], degree[fresh], limit[fresh])
                used = end
                r, lim = slots.r[:used], slots.limit[:used]
                at = slot[targets]
            r += np.bincount(at, moved[pos] * rf.repeat(lengths), used)
            if self.any_dangling:
                teleport = keep * float(rf[self.dangling[slots.node[frontier]]].sum())
                if teleport > 0:  # dangling rows send their mass back to the personalisation vector
                    r[1 : k + 1] += teleport * p
            frontier = (r >= lim).nonzero()[0]
            if self.dense and used > self.n and len(frontier) and (slot != 0).all():
                # every node has its slot: no arrival is left to look for, and the rest is dense
                work += self._dense_rounds(frontier, r, lim, slot, slots.node, keep, k, p, pushed, amounts)
                break
        if not pushed:
            return PushResult(seeds[:0], np.zeros(0), 1.0, 0, 0, 0)
        x = np.bincount(np.concatenate(pushed), alpha * np.concatenate(amounts), used)
        # the pushed slots: a push moves at least α·ε > 0 into x (a boolean's nonzero: a float's is slower)
        got = (x != 0).nonzero()[0]
        nodes = slots.node[got]
        order = nodes.argsort()
        mass = x[got[order]]
        # A push keeps Σx + Σr = 1 (T's rows and p each sum to 1), so the residual is what x lacks.
        residual = max(0.0, 1.0 - float(mass.sum()))
        return PushResult(nodes[order], mass, residual, sum(len(f) for f in pushed), work, len(pushed))

    def _dense_rounds(
        self,
        frontier: np.ndarray,
        r: np.ndarray,
        lim: np.ndarray,
        slot: np.ndarray,
        node: np.ndarray,
        keep: float,
        k: int,
        p: np.ndarray,
        pushed: list[np.ndarray],
        amounts: list[np.ndarray],
    ) -> int:
        """The push's remaining rounds once every node has a slot, from `frontier`, on the dense (1−α)·T:
        the frontier's rows scaled by what each pushes and summed down the rows in frontier order, which
        are the sparse round's bincount sums to the bit (the same products added in the same order, and
        zeros where a row has no edge). Returns the edges read."""
        if self._dense is None or self._dense[0] != keep:
            matrix = np.zeros((self.n, self.n))
            matrix[np.repeat(np.arange(self.n), self.degree), self.indices] = keep * self.data
            self._dense = (keep, matrix)  # one tuple: a concurrent reader sees a match
        matrix = self._dense[1]
        first = len(pushed)
        while len(frontier):
            rf = _take(frontier, r, pushed, amounts)
            nodes = node[frontier]
            sent = matrix.take(nodes, axis=0)
            sent *= rf[:, None]
            r[slot] += np.add.reduce(sent, axis=0)
            if self.any_dangling:
                teleport = keep * float(rf[self.dangling[nodes]].sum())
                if teleport > 0:
                    r[1 : k + 1] += teleport * p
            frontier = (r >= lim).nonzero()[0]
        # edges read, counted once: every pushed slot's node's out-degree
        return int(self.degree[node[np.concatenate(pushed[first:])]].sum())


def _take(
    frontier: np.ndarray, r: np.ndarray, pushed: list[np.ndarray], amounts: list[np.ndarray]
) -> np.ndarray:
    """Start a round: take the frontier's residuals (they are pushed now) and record what each pushes."""
    rf = r[frontier]
    r[frontier] = 0.0
    pushed.append(frontier)
    amounts.append(rf)
    return rf


class _Slots:
    """Per-slot arrays of the nodes a push reached: node id, row start, out-degree, threshold and
    residual, grown geometrically as nodes arrive."""

    def __init__(self, size: int):
        self.node = np.zeros(size, dtype=np.int64)
        self.start = np.zeros(size, dtype=np.int64)
        self.degree = np.zeros(size, dtype=np.int64)
        self.limit = np.zeros(size)
        self.r = np.zeros(size)

    def reserve(self, size: int) -> None:
        if size > len(self.r):
            for name in ("node", "start", "degree", "limit", "r"):
                old = getattr(self, name)
                new = np.zeros(4 * size, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def fill(
        self, at: int, node: np.ndarray, start: np.ndarray, degree: np.ndarray, limit: np.ndarray
    ) -> None:
        end = at + len(node)
        self.node[at:end] = node
        self.start[at:end] = start
        self.degree[at:end] = degree
        self.limit[at:end] = limit


# Dense rounds: graphs of at most this many nodes whose edges fill at least this share of the n × n matrix
# (the dense matrix is n² floats, and a row read densely costs n where the sparse one costs its degree).
_DENSE_MAX_NODES = 1_024
_DENSE_MIN_SHARE = 0.125
