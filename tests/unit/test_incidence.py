"""The incidence index against its definition: for each skill, the edge-table rows with it at either end."""

from __future__ import annotations

import polars as pl

from segos_pipeline.retrieval.incidence import Incidence


def _by_definition(edges: pl.DataFrame, skill: str) -> list[tuple[str, str, str, float]]:
    mine = edges.filter((pl.col("src") == skill) | (pl.col("dst") == skill))
    return [(s, d, r, float(w)) for s, d, r, w in mine.select("src", "dst", "relation", "weight").iter_rows()]


def test_every_skill_gets_exactly_its_edges_in_table_order():
    ids = pl.Series("id", ["a", "b", "c", "d", "e"])
    edges = pl.DataFrame(
        {
            "src": ["b", "a", "c", "a", "d", "b", "a", "zz"],
            "dst": ["a", "b", "a", "c", "d", "c", "b", "a"],  # d→d a self-loop; zz is no skill
            "relation": [
                "semantic",
                "dependency",
                "workflow",
                "avoid",
                "semantic",
                "custom",
                "workflow",
                "semantic",
            ],
            "weight": [0.5, 1.0, 0.25, 0.0, 0.1, 2.0, 0.75, 9.0],
        }
    )
    inc = Incidence(edges, ids, ids.to_list())
    known = edges.filter(pl.col("src").is_in(ids.implode()) & pl.col("dst").is_in(ids.implode()))
    for i, skill in enumerate(ids):
        assert inc.of(i) == _by_definition(known, skill), skill
        assert inc.rows_of(i).equals(known.filter((pl.col("src") == skill) | (pl.col("dst") == skill)))
    assert inc.of(4) == []  # e has no edge
    assert inc.of(3) == [("d", "d", "semantic", 0.1)]  # a self-loop is listed once
    assert inc.relations[:4] == ["semantic", "workflow", "dependency", "avoid"]  # known relations first


def test_matches_the_definition_on_an_evolved_version(tmp_path):
    """All relations of a real round (workflow, dependency, avoid next to semantic edges)."""
    from segos_pipeline import SnapshotStore, build_cold_start
    from segos_pipeline.evolution.adapters import iter_records
    from segos_pipeline.evolution.ingest import TraceStore
    from segos_pipeline.evolution.round import evolve
    from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR

    store = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, store)
    TraceStore(store).ingest(iter_records(DEMO_DIR / "traces", "native"))
    evolve(store, "2026-11-27")
    snap = store.load()
    assert snap.edges["relation"].n_unique() >= 3
    ids = snap.nodes["id"]
    inc = Incidence(snap.edges, ids, ids.to_list())
    for i, skill in enumerate(ids):
        assert inc.of(i) == _by_definition(snap.edges, skill)
