import json

import pytest

from segos_pipeline.evaluation.metrics import aggregate, percentile, query_metrics
from segos_pipeline.evaluation.replay import load_queries


def test_hand_computed_single_query():
    m = query_metrics(["x", "a", "y", "b", "z"], [{"a"}, {"b"}, {"c"}], k=5)
    assert (m.hit, m.comp, m.best_rank) == (1.0, 0.0, 2)
    assert m.recall == pytest.approx(2 / 3) and m.rr == pytest.approx(0.5)


def test_cutoff_k_is_respected():
    m = query_metrics(["x", "y", "a"], [{"a"}], k=2)
    assert (m.hit, m.recall, m.comp, m.rr, m.best_rank) == (0.0, 0.0, 0.0, 0.0, None)


def test_empty_bundle_scores_zero():
    m = query_metrics([], [{"a"}], k=5)
    assert (m.hit, m.recall, m.comp, m.rr, m.best_rank) == (0.0, 0.0, 0.0, 0.0, None)


def test_duplicate_name_gold_item_matches_any_of_its_skills_once():
    # a gold name that resolves to two packages is one gold item: found once, counted once
    m = query_metrics(["kdense/rdkit", "skillsbench/rdkit"], [{"kdense/rdkit", "skillsbench/rdkit"}], k=5)
    assert (m.recall, m.comp, m.rr) == (1.0, 1.0, 1.0)


def test_unknown_gold_name_stays_in_denominator():
    m = query_metrics(["a"], [{"a"}, set()], k=5)
    assert m.recall == 0.5 and m.comp == 0.0


def test_aggregate_means_and_best_rank_over_hits():
    per = [
        query_metrics(["a"], [{"a"}], 5),
        query_metrics(["x", "b"], [{"b"}], 5),
        query_metrics([], [{"c"}], 5),
    ]
    agg = aggregate(per)
    assert agg["n"] == 3 and agg["n_hit"] == 2
    assert agg["hit"] == pytest.approx(2 / 3)
    assert agg["mrr"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert agg["mean_best_rank"] == pytest.approx(1.5)
    assert aggregate([])["mean_best_rank"] is None


def test_ties_in_rank_resolve_by_position():
    # retrieval breaks score ties deterministically; metrics only see positions
    assert query_metrics(["a", "b"], [{"b"}], 5).rr == 0.5


def test_percentile():
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([], 95) == 0.0


def test_query_file_bad_lines_are_skipped_with_reasons(tmp_path):
    path = tmp_path / "q.jsonl"
    lines = [
        {"query": "ok", "gold": ["a"]},
        "not json",
        {"instruction": "uses instruction", "gold": "b", "task": "t2"},
        {"query": "", "gold": ["a"]},
        {"query": "no gold"},
        [1, 2],
    ]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n\n")
    qf = load_queries(path)
    assert [q.query for q in qf.queries] == ["ok", "uses instruction"]
    assert qf.queries[1].gold == ["b"] and qf.queries[1].task == "t2"
    assert [s["line"] for s in qf.skipped] == [2, 4, 5, 6]
