"""Retrieval metrics at k (SPEC §10), as pure functions over ranked lists and gold bundles.

A gold bundle is a list of gold items; each item is the set of skill ids its name resolves to (usually
one; several for a duplicated name; none for a name the library lacks, which then can never be found and
still counts in the denominator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class QueryMetrics:
    hit: float  # 1 if any gold item is in the top k
    recall: float  # share of gold items in the top k
    comp: float  # 1 if every gold item is in the top k
    rr: float  # reciprocal rank of the first gold item in the top k (0 if none)
    best_rank: int | None  # rank of the first gold item in the top k


def query_metrics(ranked: Sequence[str], gold: Sequence[set[str]], k: int) -> QueryMetrics:
    top = list(ranked[:k])
    if not gold:
        raise ValueError("a query needs at least one gold skill to be scored")
    found = [any(g in item for g in top) for item in gold]
    ranks = [r for r, skill in enumerate(top, start=1) if any(skill in item for item in gold)]
    best = ranks[0] if ranks else None
    return QueryMetrics(
        hit=float(any(found)),
        recall=sum(found) / len(gold),
        comp=float(all(found)),
        rr=1.0 / best if best else 0.0,
        best_rank=best,
    )


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else 0.0


def aggregate(per_query: Sequence[QueryMetrics]) -> dict[str, float | int | None]:
    """Means over queries; mean best rank is over the queries with a hit (as the paper reports it)."""
    n = len(per_query)
    if n == 0:
        return {
            "n": 0,
            "hit": 0.0,
            "recall": 0.0,
            "comp": 0.0,
            "mrr": 0.0,
            "mean_best_rank": None,
            "n_hit": 0,
        }
    best = [m.best_rank for m in per_query if m.best_rank is not None]
    return {
        "n": n,
        "hit": sum(m.hit for m in per_query) / n,
        "recall": sum(m.recall for m in per_query) / n,
        "comp": sum(m.comp for m in per_query) / n,
        "mrr": sum(m.rr for m in per_query) / n,
        "mean_best_rank": sum(best) / len(best) if best else None,
        "n_hit": len(best),
    }


# ------------------------------------------------------------------------------ evaluation additions


def pair_corecovery(
    ranked: Sequence[str], pairs: Sequence[tuple[set[str], set[str]]], k: int
) -> float | None:
    """Share of gold dependency pairs (a, b) with both members in the top k; None without gold pairs.

    Each member is a gold item (the set of ids its name resolves to), so a duplicated name is found by any
    of its packages, as in `query_metrics`. A pair naming a skill the library lacks is never recovered.
    """
    if not pairs:
        return None
    top = set(ranked[:k])
    return sum(bool(a & top) and bool(b & top) for a, b in pairs) / len(pairs)


def rank_by_score(scores: np.ndarray, k: int | None = None) -> np.ndarray:
    """Indices of the positive scores, best first, ties to the smaller index (the retriever's tie rule,
    so a baseline never wins or loses a query on an arbitrary tie order)."""
    scores = np.asarray(scores, dtype=float)
    cand = np.flatnonzero(scores > 0)
    order = cand[np.lexsort((cand, -scores[cand]))]
    return order if k is None else order[:k]


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) resampled query indices; a fixed seed gives the same resamples to every comparison,
    so all differences against one reference are bootstrapped over identical query sets."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n)) if n else np.zeros((n_boot, 0), int)


def paired_bootstrap(
    values: Sequence[float],
    reference: Sequence[float],
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, float | int | None]:
    """Mean of the per-query difference values − reference, with a percentile bootstrap interval.

    Paired: both lists score the same queries in the same order, and each resample draws whole queries
    (a query's two scores stay together), which is what makes small differences on few queries testable.
    """
    a = np.asarray(values, dtype=float)
    b = np.asarray(reference, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired bootstrap needs aligned scores, got {a.shape} and {b.shape}")
    n = len(a)
    if n == 0:
        return {"diff": None, "lo": None, "hi": None, "n": 0}
    d = a - b
    means = d[bootstrap_indices(n, n_boot, seed)].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return {
        "diff": float(d.mean()),
        "lo": float(np.percentile(means, tail)),
        "hi": float(np.percentile(means, 100 - tail)),
        "n": n,
    }


def format_ci(c: dict[str, Any]) -> str:
    """A `paired_bootstrap` result as "+0.050 [+0.010, +0.090]"."""
    d, lo, hi = (c[key] + 0.0 for key in ("diff", "lo", "hi"))  # + 0.0 turns -0.0 into 0.0
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def overlap_fraction(query_tokens: set[str], gold_tokens: Sequence[Sequence[set[str]]]) -> float:
    """Leakage measure: mean over gold items (each the signature tokens of the skills a gold name names) of
    the share of the item's tokens that the query contains (a query written from a skill's text scores near
    1). A duplicated name counts its most echoed skill, a skill with no tokens 0; an item naming no skill
    (an unknown name, which has no text) is left out."""
    shares = [max(len(g & query_tokens) / max(len(g), 1) for g in item) for item in gold_tokens if item]
    return sum(shares) / len(shares) if shares else 0.0


LEAKAGE_BUCKETS = ("low", "mid", "high")
LEAKAGE_THRESHOLDS = (1 / 3, 2 / 3)  # fixed thirds of [0, 1], chosen before looking at any data


def leakage_bucket(overlap: float, thresholds: tuple[float, float] = LEAKAGE_THRESHOLDS) -> str:
    """low < 1/3 ≤ mid < 2/3 ≤ high."""
    if overlap < thresholds[0]:
        return "low"
    return "mid" if overlap < thresholds[1] else "high"
