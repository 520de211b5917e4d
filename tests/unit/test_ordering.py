"""Execution order of bundles: rules, tie-breaks, cycles, precedence mining and the API-Bank measurement."""

from pathlib import Path

import polars as pl
import pytest

from segos_pipeline.retrieval.ordering import Precedence, execution_order, mine_precedence

from ..ordering_study import apibank_study, kendall_tau, set_f1


def test_dependency_puts_the_producer_first_whatever_the_scores():
    order = execution_order(
        ["report", "load", "clean"],
        {"report": 0.9, "load": 0.1, "clean": 0.5},
        [("load", "clean", "dependency"), ("clean", "report", "dependency")],
    )
    assert order.order == ["load", "clean", "report"]
    assert [c.basis for c in order.constraints] == ["dependency", "dependency"]
    assert order.broken == []


def test_without_evidence_the_order_is_score_then_id():
    order = execution_order(["b", "a", "c"], {"a": 0.5, "b": 0.5, "c": 0.9})
    assert order.order == ["c", "a", "b"]
    assert order.constraints == []


def test_tiers_are_lexicographic_dependency_then_precedence_then_workflow():
    prec = Precedence(counts={("b", "a"): 5, ("c", "b"): 1})
    edges = [("a", "b", "dependency"), ("b", "c", "workflow")]
    order = execution_order(["a", "b", "c"], {"a": 0.1, "b": 0.2, "c": 0.3}, edges, prec)
    # a→b by dependency (beats 5 traces saying b first); c before b by precedence (beats the workflow edge)
    assert {(c.before, c.after, c.basis) for c in order.constraints} == {
        ("a", "b", "dependency"),
        ("c", "b", "precedence"),
    }
    assert order.order == ["c", "a", "b"]


def test_a_cycle_is_broken_by_score_and_reported():
    prec = Precedence(counts={("a", "b"): 2, ("b", "c"): 2, ("c", "a"): 2})
    order = execution_order(["a", "b", "c", "d"], {"a": 0.2, "b": 0.9, "c": 0.5, "d": 0.1}, [], prec)
    # d is free, so it is placed first; then the cycle a→b→c→a is broken at its best-scored skill b,
    # violating a→b only
    assert order.order == ["d", "b", "c", "a"]
    assert [(c.before, c.after) for c in order.broken] == [("a", "b")]


def test_order_is_deterministic_and_ignores_edges_outside_the_members():
    args = (["x", "y"], {"x": 0.3, "y": 0.3}, [("z", "x", "dependency"), ("y", "z", "dependency")])
    assert execution_order(*args).order == execution_order(*args).order == ["x", "y"]


def test_mine_precedence_counts_successful_ordered_traces_once():
    traces = pl.DataFrame(
        {
            "trace_id": ["t1", "t2", "t3", "t4", "t1"],
            "used": [["a", "b", "c"], ["a", "c"], ["c", "a"], ["b", "a"], ["a", "b", "c"]],
            "reward": [1.0, 0.95, 0.2, 1.0, 1.0],
            "used_ordered": [True, True, True, False, True],
        }
    )
    p = mine_precedence(traces)
    assert p.traces == 2  # t3 failed, t4 unordered, t1 repeated
    assert p.before("a", "c") == 2 and p.before("c", "a") == 0
    assert p.net("a", "b") == 1 and p.net("b", "a") == -1


def test_metrics():
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau(["c", "b", "a"], ["a", "b", "c"]) == -1.0
    assert kendall_tau(["a", "x", "b"], ["b", "a"]) == -1.0  # only shared items count
    assert kendall_tau(["a"], ["a", "b"]) is None
    assert set_f1(["a", "b"], ["b", "c"]) == pytest.approx(0.5)
    assert set_f1([], ["a"]) == 0.0


@pytest.mark.shared
def test_apibank_execution_order_beats_score_order(shared_data: Path, tmp_path: Path):
    study = apibank_study(shared_data / "traces" / "apibank", tmp_path / "study")
    for protocol in ("same_task", "transfer"):
        tau = study[protocol]["bundle"]["kendall_tau"]
        assert tau["execution_order"]["mean"] > 0 > tau["retrieval_score"]["mean"], protocol
        gold = study[protocol]["gold_set"]["kendall_tau"]
        assert gold["execution_order"]["mean"] > gold["retrieval_score"]["mean"], protocol
    # without traces there is nothing to order by but the score
    cold = study["cold_start"]["bundle"]["kendall_tau"]
    assert cold["execution_order"]["mean"] == cold["retrieval_score"]["mean"]
