"""L2 edge-weight update (SPEC §8): reinforce witnessed edges, attenuate surfaced-but-unused skills.

- Existing workflow / dependency / avoid edges witnessed again in the window gain the window's evidence
  (raw weight += count; n_e += informing trials). Edges induced by this round's L1 already carry it.
- Skills surfaced in ≥ `surfaced_min` retrieved lists and never used: their *incoming semantic* weights
  are halved once per round; nothing is deleted.
- Optional confidence blending of trace-induced edges: w = λ·w_raw + (1−λ)·w0, λ = n_e/(n_e+n0).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..config import AVOID, DEPENDENCY, SEMANTIC, WORKFLOW, EvolutionConfig


@dataclass
class L2Result:
    edges: pl.DataFrame
    counters: dict[str, float]


def _evidence_frame(workflow: pl.DataFrame, ordered: pl.DataFrame, couse: pl.DataFrame) -> pl.DataFrame:
    """(src, dst, relation, add_weight, add_trials) of what this window witnessed for each typed relation."""

    def witnessed(pairs: pl.DataFrame, relation: str, add_w: pl.Expr, add_n: str) -> pl.DataFrame:
        return pairs.select(
            "src",
            "dst",
            relation=pl.lit(relation),
            add_w=add_w.cast(pl.Float64),
            add_n=pl.col(add_n).cast(pl.Int64),
        )

    return pl.concat(
        [
            witnessed(workflow, WORKFLOW, pl.col("count"), "trials"),
            witnessed(ordered, DEPENDENCY, pl.col("trials"), "trials"),
            witnessed(couse.filter(pl.col("failed") > 0), AVOID, pl.lit(0.0), "failed"),
        ],
        how="vertical",
    )


def weight_update(
    edges: pl.DataFrame,
    workflow: pl.DataFrame,
    ordered: pl.DataFrame,
    couse: pl.DataFrame,
    unused: pl.DataFrame,
    config: EvolutionConfig,
    round_: int,
) -> L2Result:
    evidence = _evidence_frame(workflow, ordered, couse)
    # Only edges from earlier rounds: this round's L1 edges were created with the window's evidence.
    old = pl.col("round_created") < round_
    joined = edges.join(evidence, on=["src", "dst", "relation"], how="left")
    reinforce = old & pl.col("add_n").is_not_null()
    attenuate = (pl.col("relation") == SEMANTIC) & pl.col("dst").is_in(unused["skill"].implode())
    updated = joined.with_columns(
        w_raw=pl.when(reinforce)
        .then(pl.col("w_raw") + pl.col("add_w"))
        .when(attenuate)
        .then(pl.col("w_raw") * config.attenuation)
        .otherwise(pl.col("w_raw")),
        n_e=pl.when(reinforce).then(pl.col("n_e") + pl.col("add_n")).otherwise(pl.col("n_e")),
        round_updated=pl.when(reinforce | attenuate).then(pl.lit(round_)).otherwise(pl.col("round_updated")),
        _reinforced=reinforce,
        _attenuated=attenuate,
    )
    counters = {
        "edges_reinforced": int(updated["_reinforced"].sum()),
        "skills_surfaced_unused": unused.height,
        "semantic_edges_attenuated": int(updated["_attenuated"].sum()),
        "blended": 0,
    }
    induced = pl.col("relation").is_in([WORKFLOW, DEPENDENCY])
    if config.blend:
        lam = pl.col("n_e") / (pl.col("n_e") + config.blend_n0)
        weight = (
            pl.when(induced).then(lam * pl.col("w_raw") + (1 - lam) * pl.col("w0")).otherwise(pl.col("w_raw"))
        )
        counters["blended"] = int(updated.filter(induced).height)
    else:
        weight = pl.col("w_raw")
    out = updated.with_columns(
        weight=pl.when(pl.col("relation") == AVOID).then(0.0).otherwise(weight)
    ).select(edges.columns)
    return L2Result(edges=out, counters=counters)
