"""The offline replay study: metrics by hand, bootstrap, overlay, leakage buckets, factorial, `segos eval`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from segos_pipeline import RetrievalConfig, Retriever, SnapshotStore, build_cold_start
from segos_pipeline.evaluation.metrics import (
    leakage_bucket,
    overlap_fraction,
    pair_corecovery,
    paired_bootstrap,
    query_metrics,
    rank_by_score,
)
from segos_pipeline.evaluation.replay import EvalQuery
from segos_pipeline.evaluation.study.config import CELLS, StudyConfig, cell_name
from segos_pipeline.evaluation.study.evolving import evolve_cells
from segos_pipeline.evaluation.study.measuring import Hydration, QueryResult, summarize
from segos_pipeline.evaluation.study.overlay import overlay_test
from segos_pipeline.evaluation.study.queries import prepare_queries, split_tasks
from segos_pipeline.evaluation.study.traces import load_traces, parse_trace_spec
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.trace_names import NameLookup, resolve_frame
from segos_pipeline.evolution.traces import trace_frame
from segos_pipeline.paths import DEMO_DIR
from segos_pipeline.text.names import SkillNames

from ..conftest import simple_library

# ------------------------------------------------------------------------------------------ metrics


def test_pair_corecovery_by_hand():
    ranked = ["a", "b", "c", "d"]
    pairs = [({"a"}, {"b"}), ({"b"}, {"e"}), ({"c"}, {"d"})]
    # (a,b) both in the top 3; (b,e): e never retrieved; (c,d): d is 4th, outside k=3
    assert pair_corecovery(ranked, pairs, k=3) == pytest.approx(1 / 3)
    assert pair_corecovery(ranked, pairs, k=4) == pytest.approx(2 / 3)
    assert pair_corecovery(ranked, [], k=3) is None  # no gold pairs: not scored, not zero
    assert pair_corecovery([], pairs, k=3) == 0.0  # empty bundle recovers nothing
    # a duplicated name (two packages) is found by either package
    assert pair_corecovery(["x2", "b"], [({"x1", "x2"}, {"b"})], k=2) == 1.0


def test_rank_by_score_breaks_ties_to_the_smaller_index_and_drops_zero_scores():
    scores = np.array([0.5, 1.0, 0.5, 0.0, 1.0])
    assert rank_by_score(scores).tolist() == [1, 4, 0, 2]
    assert rank_by_score(scores, 3).tolist() == [1, 4, 0]
    assert rank_by_score(np.zeros(3)).tolist() == []


def test_metrics_with_tied_scores_by_hand():
    ids = ["s0", "s1", "s2", "s3"]
    ranked = [ids[i] for i in rank_by_score(np.array([0.2, 0.7, 0.7, 0.2]), 3)]
    assert ranked == ["s1", "s2", "s0"]  # the tie at 0.7 goes to s1, the tie at 0.2 to s0
    m = query_metrics(ranked, [{"s2"}, {"s3"}], k=3)
    assert (m.hit, m.recall, m.comp, m.best_rank) == (1.0, 0.5, 0.0, 2)
    assert m.rr == pytest.approx(0.5)


def _result(ranked: list[str], gold: list[set[str]], k: int, latency: float, chars: int) -> QueryResult:
    return QueryResult(query_metrics(ranked, gold, k), latency, chars, pair_corecovery(ranked, [], k), ranked)


def test_summarize_by_hand_including_an_empty_bundle():
    res = [
        _result(["a", "x"], [{"a"}, {"b"}], 5, 1.0, 100),  # hit, recall 1/2, rank 1
        _result(["x", "y", "b"], [{"b"}], 5, 3.0, 300),  # hit, recall 1, comp, rank 3
        _result([], [{"c"}], 5, 2.0, 0),  # empty bundle: all zero, no best rank
    ]
    s = summarize(res)
    assert s["n"] == 3 and s["n_hit"] == 2
    assert s["hit"] == pytest.approx(2 / 3)
    assert s["recall"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert s["comp"] == pytest.approx(1 / 3)
    assert s["mrr"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert s["mean_best_rank"] == pytest.approx(2.0)  # over the queries with a hit only
    assert s["bundle_chars"] == pytest.approx(400 / 3)
    assert s["latency_ms"]["p50"] == pytest.approx(2.0)
    assert s["pair_corecovery"] is None and s["n_pair_queries"] == 0


def test_summarize_all_empty_bundles():
    s = summarize([_result([], [{"a"}], 5, 0.5, 0)])
    assert (s["hit"], s["recall"], s["comp"], s["mrr"], s["mean_best_rank"]) == (0.0, 0.0, 0.0, 0.0, None)


def test_hydration_follows_per_skill_and_global_budgets(demo_store):
    snap = SnapshotStore(demo_store).load()
    cfg = RetrievalConfig(per_skill_chars=100, total_chars=250)
    hyd = Hydration(snap.nodes, cfg)
    ids = [sid for sid, n in zip(snap.nodes["id"].to_list(), hyd.lengths, strict=True) if n > 100][:4]
    assert hyd.chars(ids[:1]) == 100
    assert hyd.chars(ids) == 250  # 100 + 100 + 50 (clipped to what is left) + nothing
    assert hyd.chars([]) == 0
    # the same characters as the retriever's own hydration of a real bundle
    retriever = Retriever(snap, cfg)
    bundle = retriever.retrieve("split the data and train a gradient boosting model", top_n=5)
    assert hyd.chars(retriever.ranked_ids(bundle.query, 5)) == bundle.chars > 0


# ---------------------------------------------------------------------------------------- bootstrap


def test_paired_bootstrap_is_deterministic_and_paired():
    rng = np.random.default_rng(7)
    a, b = rng.random(40), rng.random(40)
    first = paired_bootstrap(a, b, n_boot=500, seed=3)
    assert first == paired_bootstrap(a, b, n_boot=500, seed=3)
    assert first["diff"] == pytest.approx(float(np.mean(a - b)))
    assert first["lo"] <= first["diff"] <= first["hi"]
    assert paired_bootstrap(a, b, n_boot=500, seed=4) != first  # the seed is what fixes the resamples
    same = paired_bootstrap(a, a, n_boot=200, seed=0)
    assert (same["diff"], same["lo"], same["hi"]) == (0.0, 0.0, 0.0)
    # a constant per-query gain has a zero-width interval, whatever the spread of the scores themselves
    shifted = paired_bootstrap(a + 0.1, a, n_boot=200, seed=0)
    assert shifted["lo"] == pytest.approx(0.1) and shifted["hi"] == pytest.approx(0.1)


def test_paired_bootstrap_edge_cases():
    assert paired_bootstrap([], [], n_boot=10)["diff"] is None
    with pytest.raises(ValueError):
        paired_bootstrap([1.0, 0.0], [1.0], n_boot=10)


# ------------------------------------------------------------------------------------------ overlay


def _edges(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"src": [r[0] for r in rows], "dst": [r[1] for r in rows], "relation": [r[2] for r in rows]}
    )


def test_overlay_counts_on_a_hand_made_graph():
    ids = pl.Series("id", ["a", "b", "c", "d", "e", "f"])
    backbone = _edges([("a", "b", "semantic"), ("b", "a", "semantic"), ("c", "d", "semantic")])
    evolved = _edges(
        [
            ("a", "b", "semantic"),
            ("c", "d", "semantic"),
            ("b", "c", "workflow"),  # merges {a,b} with {c,d}
            ("e", "a", "dependency"),  # connects the isolated e
            ("a", "b", "workflow"),  # already connected: no new reach
            ("d", "f", "avoid"),  # never traversed: adds no reach
        ]
    )
    ov = overlay_test(ids, backbone, evolved)
    assert ov["components_before"] == 4  # {a,b} {c,d} {e} {f}
    assert ov["components_after"] == 2  # {a,b,c,d,e} {f}
    assert ov["merged_components"] == 2
    assert ov["newly_connected_nodes"] == 1  # e
    assert ov["nodes_gaining_reach"] == 5  # a, b, c, d, e
    assert ov["induced_pairs"] == 3 and ov["induced_pairs_within_component"] == 1
    assert ov["induced_by_relation"] == {"workflow": 2, "dependency": 1, "alternative": 0}


def test_overlay_without_induced_edges_adds_no_reach():
    ids = pl.Series("id", ["a", "b", "c"])
    backbone = _edges([("a", "b", "semantic")])
    ov = overlay_test(ids, backbone, backbone)
    assert (ov["merged_components"], ov["newly_connected_nodes"], ov["induced_pairs"]) == (0, 0, 0)


# ------------------------------------------------------------------------------------------ leakage


def test_overlap_fraction_and_buckets_by_hand():
    gold = [[{"pdf", "tabl", "extract"}], [{"csv", "load"}]]
    # first skill: 2 of 3 tokens in the query; second: 0 of 2 → mean (2/3 + 0) / 2
    assert overlap_fraction({"pdf", "tabl", "invoice"}, gold) == pytest.approx(1 / 3)
    # a duplicated name counts its most echoed skill, a skill without tokens 0; an unknown name not at all
    assert overlap_fraction({"csv"}, [[{"pdf"}, {"csv", "load"}], [set()], []]) == pytest.approx(1 / 4)
    assert overlap_fraction({"x"}, []) == 0.0
    assert [leakage_bucket(x) for x in (0.0, 0.33, 1 / 3, 0.5, 2 / 3, 1.0)] == [
        "low",
        "low",
        "mid",
        "mid",
        "high",
        "high",
    ]


def test_leakage_buckets_on_hand_made_queries(tmp_path: Path):
    lib = simple_library(
        tmp_path / "lib",
        {
            "invoice-parser": "Extract vendor totals from scanned invoice pages",
            "chart-maker": "Plot monthly revenue trends as line charts",
        },
    )
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, store)
    snap = store.load()
    queries = [
        # repeats the skill's name and description: high overlap
        EvalQuery(
            "invoice parser: extract vendor totals from scanned invoice pages", ["invoice-parser"], "echo"
        ),
        # the same need in other words: low overlap
        EvalQuery("how much do we owe each supplier according to these bills?", ["invoice-parser"], "para"),
        # one of two gold skills echoed, the other not
        EvalQuery("plot monthly revenue trends as line charts for the board", ["chart-maker", "nope"], "mix"),
    ]
    prepared, unknown = prepare_queries(queries, snap, SkillNames(snap.nodes))
    by = {q.task: q for q in prepared}
    assert by["echo"].bucket == "high" and by["echo"].overlap > 0.9
    assert by["para"].bucket == "low" and by["para"].overlap == 0.0
    assert by["mix"].bucket == "high"  # an unknown gold name has no text to echo: it is left out
    assert unknown == ["nope"]


# ------------------------------------------------------------------------------- split, spec, cells


def test_split_tasks_is_deterministic_disjoint_and_keeps_groups_together():
    tasks = [f"t{i}" for i in range(11)]
    a, b = split_tasks(tasks, seed=0)
    assert (a, b) == split_tasks(list(reversed(tasks)), seed=0)  # order of the file does not matter
    assert not set(a) & set(b) and set(a) | set(b) == set(tasks) and len(a) == 6
    groups = {t: ("g1" if t in ("t1", "t2", "t3") else t) for t in tasks}
    a, b = split_tasks(tasks, seed=0, groups=groups)
    assert {"t1", "t2", "t3"} <= set(a) or {"t1", "t2", "t3"} <= set(b)


def test_parse_trace_spec():
    assert parse_trace_spec("x/dev.jsonl:skillsbench-trials") == (Path("x/dev.jsonl"), "skillsbench-trials")
    assert parse_trace_spec("x/traces") == (Path("x/traces"), "native")
    assert parse_trace_spec("C:/weird:name.jsonl") == (Path("C:/weird:name.jsonl"), "native")


def test_study_traces_skip_a_torn_last_line(demo_store: Path, tmp_path: Path):
    source = tmp_path / "t.jsonl"
    line = {"task_id": "a", "used": ["csv-loader"], "reward": 1.0, "timestamp": "2026-11-29T00:00:00Z"}
    source.write_text(json.dumps(line) + '\n{"task_id": "b", "us')  # an append cut short
    store = SnapshotStore(demo_store)
    [src] = load_traces([str(source)], [], store, store.load(), None).sources
    assert (src["accepted"], src["rejected"], src["skipped"]) == (1, 0, 1)


def test_the_probe_appends_the_requests_of_successful_traces_only():
    from segos_pipeline.evaluation.study.queries import StudyQuery
    from segos_pipeline.evaluation.study.rankers import gold_traced, traced_skills, with_requests

    nodes = pl.DataFrame({"id": ["b", "a", "c"], "body": ["bee", None, "sea"]})
    frame = pl.DataFrame(
        {
            "queries": [
                [{"text": "stitch pdfs"}, {"text": "glue pages"}],
                [{"text": "fail"}],
                [{"text": "x"}],
            ],
            "used": [["a", "c"], ["b"], ["a"]],
            "reward": [1.0, 0.0, 0.95],
        }
    )
    out = with_requests(nodes, frame, 0.9)
    assert out["id"].to_list() == ["b", "a", "c"]  # the node order is kept
    assert out["body"].to_list() == ["bee ", " glue pages stitch pdfs x", "sea glue pages stitch pdfs"]
    traced = traced_skills(frame, 0.9)
    assert traced == {"a", "c"}

    def q(*gold: set[str]) -> StudyQuery:
        return StudyQuery(0, "t", "q", [], list(gold), [], 0.0, "low")

    assert gold_traced(q({"a"}, {"c", "x"}), traced) == "traced"
    assert gold_traced(q({"b"}), traced) == "untraced"
    assert gold_traced(q({"a"}, {"b"}), traced) == "mixed"


def test_factorial_has_eight_cells_from_the_same_traces(demo_store):
    assert [cell_name(c) for c in CELLS] == [
        "static",
        "L1",
        "L2",
        "L3",
        "L1+L2",
        "L1+L3",
        "L2+L3",
        "L1+L2+L3",
    ]
    snap = SnapshotStore(demo_store).load()
    records = [
        r
        for r in iter_records(DEMO_DIR / "traces" / "2026-11-27.jsonl", "native")
        if not hasattr(r, "reason")
    ]
    traces, _unknown = resolve_frame(trace_frame(records), NameLookup(SkillNames(snap.nodes)))
    cells = evolve_cells(snap, traces, StudyConfig(), CELLS, "t")
    assert len(cells) == 8
    assert cells["static"].snapshot is snap
    assert {c.traces["traces"] for c in cells.values()} == {len(records)}
    # a cell without L1 never changes the topology; every cell with L1 induces the same edges
    assert cells["L2"].snapshot.edges.filter(pl.col("relation") != "semantic").height == 0
    induced = {
        name: cells[name].snapshot.edges.filter(pl.col("relation") != "semantic").height
        for name in ("L1", "L1+L2", "L1+L3", "L1+L2+L3")
    }
    assert len(set(induced.values())) == 1 and next(iter(induced.values())) > 0


# ------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """`segos eval` on the project's demo data: a committed evolved version, an ingested window, a trace
    file and a little simulated traffic."""
    from segos_pipeline.cli.evaluate import eval_cmd
    from segos_pipeline.evolution.round import evolve
    from segos_pipeline.paths import DEFAULT_LIBRARY

    root = tmp_path_factory.mktemp("eval")
    store = SnapshotStore(root / "store")
    build_cold_start(DEFAULT_LIBRARY, store)
    TraceStore(store).ingest(iter_records(DEMO_DIR / "traces" / "2026-11-27.jsonl", "native"))
    version = evolve(store, "2026-11-27")["version"]
    out = root / "out"
    args = [
        "--store",
        str(store.root),
        "--queries",
        str(DEMO_DIR / "queries" / "demo.jsonl"),
        "--versions",
        version,
        "--window",
        "2026-11-27",
        "--traces",
        f"{DEMO_DIR / 'traces' / '2026-11-28.jsonl'}:native",
        "--simulate",
        "40",
        "--rounds",
        "2",
        "--bootstrap",
        "200",
        "--out",
        str(out),
        "--json",
        "--quiet",
    ]
    result = CliRunner().invoke(eval_cmd, args)
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout), version


def test_eval_writes_report_files(eval_run):
    out, _data, _version = eval_run
    for name in ("report.md", "report.json", "methods.png", "rounds.png", "leakage.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    md = (out / "report.md").read_text()
    assert "SIMULATED" in md and "transfer protocol" in md and "deployment protocol" in md
    assert "Overlay test" in md and "Leakage buckets" in md
    assert "What a round learned: skills with traces and without" in md


def test_eval_json_shape(eval_run):
    _out, data, version = eval_run
    names = [m["method"] for m in data["methods"]]
    assert names[:4] == ["bm25", "lexical", "forward_ppr", "ppr"]
    assert f"version:{version}" in names
    assert [n for n in names if n.startswith("factorial:")] == [f"factorial:{cell_name(c)}" for c in CELLS]
    for m in data["methods"]:
        for key in ("hit", "recall", "comp", "mrr", "mean_best_rank", "bundle_chars", "protocol"):
            assert key in m, (m["method"], key)
        assert set(m["latency_ms"]) == {"p50", "p95"}
        assert set(m["buckets"]) == {"low", "mid", "high"}
        if m["method"] != "ppr":
            assert set(m["vs_ppr"]["recall"]) == {"diff", "lo", "hi", "n"}
    transfer = [m for m in data["protocols"]["transfer"]["methods"] if m["kind"] == "factorial"]
    assert len(transfer) == 8 and all(m["protocol"] == "transfer" and m["simulated"] for m in transfer)
    assert data["traces"]["includes_simulated"] and data["traces"]["label"] == "includes SIMULATED traces"
    assert [r["round"] for r in data["rounds"]["deployment"]] == [0, 1, 2]
    assert [r["round"] for r in data["rounds"]["transfer"]] == [0, 1, 2]
    assert data["overlay"] and {"merged_components", "newly_connected_nodes"} <= set(data["overlay"][0])
    assert set(data["transfer_split"]["half_a"]).isdisjoint(data["transfer_split"]["half_b"])
    assert data["findings"] and "per_query" not in data
    # the naive probe beside segos in both protocols, and the transfer split by traced gold skills
    for proto in ("deployment", "transfer"):
        probe = [m for m in data["protocols"][proto]["methods"] if m["method"] == "bm25+traces"]
        assert len(probe) == 1 and probe[0]["kind"] == "probe" and probe[0]["protocol"] == proto
    learning = data["learning"]
    assert sum(learning["counts"].values()) == data["queries"]["n"]
    assert set(learning["methods"]) == {"ppr", "factorial:L1+L2+L3", "bm25+traces"}
    for by_group in learning["methods"].values():
        assert set(by_group) == {g for g, n in learning["counts"].items() if n}


def test_eval_without_traces_compares_the_trace_free_methods(demo_store, tmp_path):
    from segos_pipeline.cli.evaluate import eval_cmd

    out = tmp_path / "out"
    args = ["--store", str(demo_store), "--queries", str(DEMO_DIR / "queries" / "demo.jsonl")]
    result = CliRunner().invoke(eval_cmd, [*args, "--out", str(out), "--json", "--quiet", "--no-charts"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [m["method"] for m in data["methods"]] == ["bm25", "lexical", "forward_ppr", "ppr"]
    assert "note" in data["protocols"]["transfer"] and (out / "report.md").is_file()
    # the graph ablation: seeds only against propagation over each cold-start kNN size
    graph = data["graph"]
    assert [m["method"] for m in graph["methods"]] == ["seeds_only", "ppr_k1", "ppr_k2", "ppr_k3", "ppr_k5"]
    seeds = graph["methods"][0]
    assert seeds["vs_seeds_only"] == {key: 0.0 for key in ("hit", "recall", "comp", "mrr")}
    assert seeds["recall"] == next(m for m in data["methods"] if m["method"] == "lexical")["recall"]
    for m in graph["methods"]:
        assert sum(b["n"] for b in m["by_length"].values()) == m["n"] == data["queries"]["n"]
        assert sum(b["n"] for b in m["by_gold"].values()) == m["n"]
        assert m["vs_seeds_only"]["recall"] == pytest.approx(m["recall"] - seeds["recall"])
    k_built = data["graph"]["version_graph"]
    same_k = next(m for m in graph["methods"] if m["method"] == f"ppr_k{k_built}")
    assert same_k["recall"] == next(m for m in data["methods"] if m["method"] == "ppr")["recall"]
    assert "earn its place" in (out / "report.md").read_text()


def test_eval_reports_a_bad_query_file(demo_store, tmp_path):
    from segos_pipeline.cli.evaluate import eval_cmd

    bad = tmp_path / "q.jsonl"
    bad.write_text('{"query": "x"}\n')
    result = CliRunner().invoke(eval_cmd, ["--store", str(demo_store), "--queries", str(bad)])
    assert result.exit_code == 2 and "no usable queries" in result.output
