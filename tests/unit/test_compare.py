"""`segos compare`: a task's bundle and a query set's replay on two versions, as the quick start ends."""

import json

import pytest
from click.testing import CliRunner

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.cli import main
from segos_pipeline.evaluation.compare import METRICS, bundle_rows, dropped
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR

HOLDOUT = DEMO_DIR / "queries" / "holdout.jsonl"


def run(*args, ok=True):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + str(result.exception)
    return result


def test_bundle_rows_mark_new_moved_and_kept_skills():
    rows = bundle_rows(["a", "b", "c", "d"], ["a", "x", "b", "c"])
    assert [(r.rank, r.before, r.after, r.change, r.was) for r in rows] == [
        (1, "a", "a", "same", 1),
        (2, "b", "x", "new", None),
        (3, "c", "b", "down 1", 2),
        (4, "d", "c", "down 1", 3),
    ]
    assert [r.change for r in bundle_rows(["a", "b"], ["b", "a"])] == ["up 1", "down 1"]
    assert dropped(["a", "b", "c", "d"], ["a", "x", "b", "c"]) == ["d"]
    shorter = bundle_rows(["a", "b"], ["b"])
    assert [(r.after, r.change) for r in shorter] == [("b", "up 1"), (None, "")]


@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    """The quick start's store: the demo's cold start and the rounds of its two windows (v1, v2, v3)."""
    store = SnapshotStore(tmp_path_factory.mktemp("compare") / "store")
    build_cold_start(DEFAULT_LIBRARY, store)
    TraceStore(store).ingest(iter_records(DEMO_DIR / "traces", "native"))
    evolve(store, "2026-11-27")
    evolve(store, "2026-11-28")
    return store.root


def test_compare_shows_the_bundle_side_by_side_with_needed_skills_and_the_replay_legend(evolved):
    task = next(q for q in map(json.loads, HOLDOUT.open()) if q["task"] == "house-price-xgb")
    args = ("compare", "v1", "v3", "--store", evolved, "--query", task["query"], "--queries", HOLDOUT)
    out = json.loads(run(*args, "--json").stdout)
    store = SnapshotStore(evolved)
    cold, _, last = (m["version"] for m in store.list_versions())
    assert (out["before"], out["after"]) == (cold, last)
    b = out["bundle"]
    assert b["before"] != b["after"], "the quick start's task must show what evolution changed"
    assert [r["after"] for r in b["rows"]] == b["after"] and [r["before"] for r in b["rows"]] == b["before"]
    assert {s.split("/")[-1] for s in b["needed"]} == set(task["gold"])
    assert sum(s in b["needed"] for s in b["after"]) > sum(s in b["needed"] for s in b["before"])
    assert set(b["dropped"]) == set(b["before"]) - set(b["after"])
    r = out["replay"]
    assert r["n"] == 10 and r["k"] == 5
    assert [m["key"] for m in r["metrics"]] == [key for key, _, _ in METRICS]
    assert all(m["legend"] for m in r["metrics"])
    text = run(*args).output
    assert f"before: {cold}" in text and f"after: {last}" in text
    assert "new" in text and "a skill the task needs" in text
    for m in r["metrics"]:  # every number printed with its one-line meaning
        assert any(m["metric"] in line and m["legend"] in line for line in text.splitlines()), m["metric"]


def test_compare_needs_a_query_or_a_query_file(evolved):
    result = run("compare", "v1", "v2", "--store", evolved, ok=False)
    assert result.exit_code == 2 and "--query" in result.output
    missing = run("compare", "v1", "v2", "--store", evolved, "--queries", evolved / "nope.jsonl", ok=False)
    assert missing.exit_code == 2 and "nope.jsonl" in missing.output


def test_the_quick_starts_windows_make_no_held_out_metric_worse(evolved):
    """What the quick start prints last: the two demo windows must not make any held-out number worse.
    A lease-redaction task about nothing the windows taught once lost two needed skills to release notes
    and a container scanner, whose own texts took the experience vote of a request close to no skill."""
    out = json.loads(run("compare", "v1", "v3", "--store", evolved, "--queries", HOLDOUT, "--json").stdout)
    by_key = {m["key"]: m for m in out["replay"]["metrics"]}
    for key in ("hit", "recall", "comp", "mrr"):
        assert by_key[key]["after"] >= by_key[key]["before"], by_key[key]
    assert by_key["recall"]["after"] > by_key["recall"]["before"]
