"""L1 topology update (SPEC §8): induce workflow, dependency and avoid edges; retract avoid edges.

Order inside L1: avoid retraction first (so a pair the window vindicates can gain a navigation edge),
then workflow and dependency induction (never onto a pair that still has an avoid edge, which would break
the non-contradiction invariant), then avoid induction (never onto a pair with any navigation relation,
the new ones included). Every rule reports its counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ..config import AVOID, DEPENDENCY, TRAVERSABLE, WORKFLOW, EvolutionConfig
from ..graph.edges import new_edges

_NO_PRIOR = pl.lit(0.0)  # an induced edge's static prior: it has none


@dataclass
class L1Result:
    edges: pl.DataFrame
    counters: dict[str, dict[str, float]] = field(default_factory=dict)


def _unordered(df: pl.DataFrame) -> pl.DataFrame:
    return df.select(lo=pl.min_horizontal("src", "dst"), hi=pl.max_horizontal("src", "dst"))


def io_field_names(column: str) -> pl.Expr:
    """Normalised field names of an I/O list: the part before ':' of each item, casefolded, alnum only."""
    return (
        pl.col(column)
        .list.eval(
            pl.element().str.split(":").list.first().str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]", "")
        )
        .list.eval(pl.element().filter(pl.element() != ""))
        .list.unique()
    )


def io_overlap(pairs: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
    """Share of the consumer's input fields that the producer outputs: |O_u ∩ I_v| / |I_v|.

    Null when either side declares no I/O fields (the pair cannot take part in a schema match).
    """
    io = nodes.select("id", outs=io_field_names("outputs"), ins=io_field_names("inputs"))
    joined = pairs.join(io.select(src="id", outs="outs"), on="src", how="left").join(
        io.select(dst="id", ins="ins"), on="dst", how="left"
    )
    return joined.with_columns(
        missing_io=(pl.col("outs").list.len().fill_null(0) == 0)
        | (pl.col("ins").list.len().fill_null(0) == 0),
        overlap=pl.col("outs").list.set_intersection(pl.col("ins")).list.len() / pl.col("ins").list.len(),
    ).with_columns(overlap=pl.when(pl.col("missing_io")).then(None).otherwise(pl.col("overlap")))


def topology_update(
    edges: pl.DataFrame,
    nodes: pl.DataFrame,
    workflow: pl.DataFrame,
    ordered: pl.DataFrame,
    couse: pl.DataFrame,
    config: EvolutionConfig,
    round_: int,
) -> L1Result:
    counters: dict[str, dict[str, float]] = {}

    # -- avoid retraction: ≥ N distinct successful task traces co-used the pair in this window
    avoid = edges.filter(pl.col("relation") == AVOID)
    vindicated = couse.filter(pl.col("success_tasks") >= config.retract_min_successes)
    retract = avoid.join(vindicated.select("src", "dst"), on=["src", "dst"], how="semi")
    one_success = avoid.join(
        couse.filter(
            (pl.col("success_tasks") > 0) & (pl.col("success_tasks") < config.retract_min_successes)
        ),
        on=["src", "dst"],
        how="semi",
    )
    edges = edges.join(retract.select("src", "dst", "relation"), on=["src", "dst", "relation"], how="anti")
    counters["avoid_retraction"] = {
        "avoid_edges_before": avoid.height,
        "retracted": retract.height,
        "kept_single_success": one_success.height,
    }
    avoid_pairs = _unordered(edges.filter(pl.col("relation") == AVOID)).unique()

    def admit(candidates: pl.DataFrame, relation: str) -> tuple[pl.DataFrame, int, int]:
        """Candidates that are new for `relation` and not on an avoid pair: (induced, already, blocked)."""
        existing = edges.filter(pl.col("relation") == relation).select("src", "dst")
        fresh = candidates.join(existing, on=["src", "dst"], how="anti")
        keyed = fresh.with_columns(lo=pl.min_horizontal("src", "dst"), hi=pl.max_horizontal("src", "dst"))
        induced = keyed.join(avoid_pairs, on=["lo", "hi"], how="anti").drop("lo", "hi")
        return induced, candidates.height - fresh.height, fresh.height - induced.height

    # -- workflow: seed u retrieved on a successful query, v used there
    wf_induced, wf_present, wf_blocked = admit(workflow, WORKFLOW)
    counters["workflow"] = {
        "pairs_considered": workflow.height,
        "induced": wf_induced.height,
        "already_present": wf_present,
        "blocked_by_avoid": wf_blocked,
    }
    new = [new_edges(wf_induced, WORKFLOW, pl.col("count"), _NO_PRIOR, pl.col("trials"), round_)]

    # -- dependency: ordered successful use and I/O-schema overlap ≥ ζ
    scored = io_overlap(ordered, nodes)
    missing = scored.filter(pl.col("missing_io"))
    low = scored.filter(~pl.col("missing_io") & (pl.col("overlap") < config.zeta))
    passing = scored.filter(~pl.col("missing_io") & (pl.col("overlap") >= config.zeta))
    dep_induced, dep_present, dep_blocked = admit(passing, DEPENDENCY)
    counters["dependency"] = {
        "pairs_considered": ordered.height,
        "induced": dep_induced.height,
        "already_present": dep_present,
        "blocked_by_zeta": low.height,
        "blocked_missing_io": missing.height,
        "blocked_by_avoid": dep_blocked,
        "max_overlap_below_zeta": round(float(low["overlap"].max()), 4) if low.height else 0.0,
    }
    new.append(new_edges(dep_induced, DEPENDENCY, pl.col("trials"), _NO_PRIOR, pl.col("trials"), round_))
    edges = pl.concat([edges, *new], how="vertical")

    # -- avoid: co-used on ≥ θ failed traces, on no successful one, and no navigation relation on the pair
    failing = couse.filter(pl.col("failed") > 0)
    nav_pairs = _unordered(edges.filter(pl.col("relation").is_in(TRAVERSABLE))).unique()
    has_avoid = avoid_pairs.rename({"lo": "src", "hi": "dst"})
    enough = failing.filter(pl.col("failed") >= config.theta_avoid)
    clean = enough.filter(pl.col("succeeded") == 0)
    no_nav = clean.join(nav_pairs, left_on=["src", "dst"], right_on=["lo", "hi"], how="anti")
    avoid_new = no_nav.join(has_avoid, on=["src", "dst"], how="anti")
    counters["avoid"] = {
        "pairs_considered": failing.height,
        "induced": avoid_new.height,
        "below_theta": failing.height - enough.height,
        "blocked_by_success": enough.height - clean.height,
        "blocked_by_invariant": clean.height - no_nav.height,
        "already_present": no_nav.height - avoid_new.height,
    }
    edges = pl.concat(
        [edges, new_edges(avoid_new, AVOID, pl.lit(0.0), _NO_PRIOR, pl.col("failed"), round_)], how="vertical"
    )
    return L1Result(edges=edges.sort("src", "dst", "relation"), counters=counters)
