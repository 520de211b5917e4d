"""Experience, the round's node update (SPEC §8): what each skill learned from the requests it served.

A round adds the witnessing requests of its window's successful traces (evidence.py, `experience_partials`)
to the parent's experience, keeps at most `experience_per_skill` per skill (most distinct tasks first, then
the most recent, then by a hash of the text: deterministic), and checks itself on the traces it held out:
the used skills' reciprocal ranks with the round's experience and edges against the parent's. A round whose
held-out effect is negative commits no new experience (its edges are L1/L2's business and stay).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ..store.layout import EXPERIENCE_SCHEMA
from .evidence import EXPERIENCE_PARTIAL_SCHEMA, HOLDOUT_SCHEMA


def merged_experience(
    parent: pl.DataFrame, window: pl.DataFrame, skills: pl.Series, round_no: int, per_skill: int
) -> pl.DataFrame:
    """The parent's experience with the window's added, bounded per skill, in (skill, text) order.

    Rows of skills the version does not hold are dropped."""
    fresh = window.cast(EXPERIENCE_PARTIAL_SCHEMA).with_columns(
        first_round=pl.lit(round_no, pl.Int64), last_round=pl.lit(round_no, pl.Int64)
    )
    both = pl.concat([parent.cast(EXPERIENCE_SCHEMA), fresh.select(list(EXPERIENCE_SCHEMA))], how="vertical")
    return (
        both.filter(pl.col("skill").is_in(skills.implode()))
        .group_by("skill", "text")
        .agg(pl.col("tasks").sum(), pl.col("first_round").min(), pl.col("last_round").max())
        .with_columns(_order=pl.col("text").hash(seed=11))
        .sort(
            ["skill", "tasks", "last_round", "_order", "text"], descending=[False, True, True, False, False]
        )
        .filter(pl.int_range(pl.len()).over("skill") < per_skill)
        .sort("skill", "text")
        .drop("_order")
        .cast(EXPERIENCE_SCHEMA)
    )


@dataclass
class GateResult:
    """The round's check on its held-out traces."""

    traces: int = 0
    pairs: int = 0  # (query, used skill) pairs replayed
    mrr_before: float = 0.0
    mrr_after: float = 0.0
    hit_before: float = 0.0  # share of pairs with the skill in the top-N
    hit_after: float = 0.0
    passed: bool = True
    reason: str = ""

    @property
    def effect(self) -> float:
        return self.mrr_after - self.mrr_before

    def as_dict(self) -> dict[str, Any]:
        return {
            "traces": self.traces,
            "pairs": self.pairs,
            "mrr_before": round(self.mrr_before, 4),
            "mrr_after": round(self.mrr_after, 4),
            "hit_before": round(self.hit_before, 4),
            "hit_after": round(self.hit_after, 4),
            "effect": round(self.effect, 4),
            "passed": self.passed,
            "reason": self.reason,
        }


# (query text) -> ids of the top `depth` skills, best first
Ranked = Callable[[str], list[str]]


def held_out_pairs(holdout: pl.DataFrame, max_traces: int) -> pl.DataFrame:
    """The held-out (trace, text, skill) rows of at most `max_traces` traces (the smallest trace ids)."""
    table = holdout.cast(HOLDOUT_SCHEMA)
    keep = table.select(pl.col("trace_id").unique().sort().head(max_traces))
    return table.join(keep, on="trace_id", how="semi").sort("trace_id", "text", "skill")


def gate(pairs: pl.DataFrame, before: Ranked, after: Ranked, depth: int, top_n: int) -> GateResult:
    """Reciprocal rank (within `depth`, 0 beyond) of every held-out used skill, before and after."""
    if pairs.height == 0:
        return GateResult(passed=True, reason="no held-out traces")
    texts = pairs["text"].unique().sort().to_list()
    ranked_before = {t: before(t) for t in texts}
    ranked_after = {t: after(t) for t in texts}

    def reciprocal(ranked: dict[str, list[str]]) -> np.ndarray:
        out = np.zeros(pairs.height)
        rows = zip(pairs["text"].to_list(), pairs["skill"].to_list(), strict=True)
        for k, (text, skill) in enumerate(rows):
            ids = ranked[text]
            out[k] = 1.0 / (ids.index(skill) + 1) if skill in ids else 0.0
        return out

    rb, ra = reciprocal(ranked_before), reciprocal(ranked_after)
    result = GateResult(
        traces=pairs["trace_id"].n_unique(),
        pairs=pairs.height,
        mrr_before=float(rb.mean()),
        mrr_after=float(ra.mean()),
        hit_before=float((rb >= 1.0 / top_n).mean()),
        hit_after=float((ra >= 1.0 / top_n).mean()),
    )
    result.passed = result.effect >= 0
    result.reason = "held-out ranks no worse" if result.passed else "held-out ranks worse: not committed"
    return result
