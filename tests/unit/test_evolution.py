"""L1/L2/L3 rules on hand-built traces (SPEC §8), rounds, lineage and diffs."""

import polars as pl
import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.config import EvolutionConfig
from segos_pipeline.evolution.descriptions import L3_STAGE
from segos_pipeline.evolution.engines import replay
from segos_pipeline.evolution.evidence import select_attempts
from segos_pipeline.evolution.round import evolve, evolve_round
from segos_pipeline.evolution.traces import QueryRecord, TraceRecord, trace_frame
from segos_pipeline.graph.build import commit_derived
from segos_pipeline.graph.edges import EDGE_SCHEMA, violations
from segos_pipeline.progress import Tick
from segos_pipeline.store.diff import diff_versions, to_markdown

from ..conftest import write_skill

# name: (description, inputs, outputs). Words are chosen so the pairs used below share no signature
# token unless a test wants a semantic edge.
LIB = {
    "loader": ("Load ledger spreadsheets.", ["ledger_path"], ["ledger_table", "ledger_schema"]),
    "validator": (
        "Check ledger_table rows against ledger_schema.",
        ["ledger_table", "ledger_schema"],
        ["clean_rows"],
    ),
    "exporter": ("Write clean_rows to parquet.", ["clean_rows", "target_dir"], ["parquet_file"]),
    "plotter": ("Draw quarterly bar charts.", ["summary_frame"], ["chart_png"]),
    "mailer": ("Email weekly digests.", ["recipients"], ["sent_ids"]),
    "zipper": ("Compress archives quickly.", [], []),
    "hasher": ("Fingerprint archives quickly.", [], []),
}


@pytest.fixture
def store(tmp_path):
    for name, (desc, ins, outs) in LIB.items():
        fm = f"name: {name}\ndescription: {desc}\ninputs: {ins}\noutputs: {outs}"
        write_skill(tmp_path / "lib", name, fm, f"# {name}\n\n{desc}\n")
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(tmp_path / "lib", st)
    return st


def trace(tid, used, reward, seeds=None, task=None, agent="a", attempt=1, ordered=True, query="ledger task"):
    seeds = seeds if seeds is not None else used[:1]
    return TraceRecord(
        trace_id=tid,
        task_id=task or tid,
        used=used,
        reward=reward,
        agent=agent,
        attempt=attempt,
        queries=[QueryRecord(query, retrieved=list(seeds), seeds=list(seeds))],
        used_ordered=ordered,
        window="w1",
        timestamp="2026-11-29T00:00:00Z",
    )


def run(store, records, **cfg):
    parent = store.load()
    config = EvolutionConfig(l3_descriptions=False).with_overrides(**cfg)
    return evolve_round(parent, trace_frame(records), config)


def rel(edges, relation):
    return set(edges.filter(pl.col("relation") == relation).select("src", "dst").iter_rows())


def test_workflow_from_seed_to_used_on_success_only(store):
    r = run(
        store,
        [
            trace("t1", ["loader", "validator", "exporter"], 1.0, seeds=["loader"]),
            trace("t2", ["loader", "plotter"], 0.2, seeds=["loader"]),
        ],
    )
    assert rel(r.edges, "workflow") == {("loader", "validator"), ("loader", "exporter")}
    wf = r.edges.filter(pl.col("relation") == "workflow")
    assert wf["weight"].to_list() == [1.0, 1.0] and wf["n_e"].to_list() == [1, 1]
    assert (wf["round_created"] == 1).all()
    assert r.counters["l1"]["workflow"]["induced"] == 2


def test_workflow_counts_every_witnessing_query(store):
    t = trace("t1", ["loader", "validator"], 1.0)
    t.queries.append(QueryRecord("another ledger query", ["loader"], ["loader"]))
    r = run(store, [t])
    wf = r.edges.filter(pl.col("relation") == "workflow")
    assert wf.row(0, named=True)["weight"] == 2.0 and wf.row(0, named=True)["n_e"] == 1


def test_dependency_needs_order_success_and_io_overlap(store):
    r = run(store, [trace("t1", ["loader", "validator", "exporter", "plotter"], 1.0, seeds=[])])
    # loader→validator: both inputs of validator are loader outputs (1.0); validator→exporter: 1 of 2 (0.5)
    assert rel(r.edges, "dependency") == {("loader", "validator")}
    dep = r.counters["l1"]["dependency"]
    assert dep["pairs_considered"] == 6
    assert dep["blocked_by_zeta"] == 5 and dep["blocked_missing_io"] == 0
    assert dep["max_overlap_below_zeta"] == 0.5
    # ζ is the bar: lowering it (never the default) would admit validator→exporter
    low = run(store, [trace("t1", ["loader", "validator", "exporter"], 1.0, seeds=[])], zeta=0.5)
    assert ("validator", "exporter") in rel(low.edges, "dependency")


def test_dependency_order_matters_and_unordered_or_failed_traces_do_not_count(store):
    reverse = run(store, [trace("t1", ["validator", "loader"], 1.0, seeds=[])])
    assert rel(reverse.edges, "dependency") == set()  # validator's outputs do not feed loader
    unordered = run(store, [trace("t1", ["loader", "validator"], 1.0, seeds=[], ordered=False)])
    assert rel(unordered.edges, "dependency") == set()
    failed = run(store, [trace("t1", ["loader", "validator"], 0.5, seeds=[])])
    assert rel(failed.edges, "dependency") == set()


def test_missing_io_is_counted_separately(store):
    r = run(store, [trace("t1", ["zipper", "hasher"], 1.0, seeds=[])])
    assert r.counters["l1"]["dependency"]["blocked_missing_io"] == 1


def test_avoid_needs_theta_failures_and_no_success(store):
    one = run(store, [trace("f1", ["mailer", "plotter"], 0.0)])
    assert rel(one.edges, "avoid") == set() and one.counters["l1"]["avoid"]["below_theta"] == 1
    two = run(store, [trace("f1", ["mailer", "plotter"], 0.0), trace("f2", ["plotter", "mailer"], 0.1)])
    assert rel(two.edges, "avoid") == {("mailer", "plotter")}
    avoid = two.edges.filter(pl.col("relation") == "avoid").row(0, named=True)
    assert avoid["weight"] == 0.0 and avoid["n_e"] == 2
    vindicated = run(
        store,
        [
            trace("f1", ["mailer", "plotter"], 0.0),
            trace("f2", ["mailer", "plotter"], 0.0),
            trace("s1", ["mailer", "plotter"], 1.0, seeds=[]),
        ],
    )
    assert rel(vindicated.edges, "avoid") == set()
    assert vindicated.counters["l1"]["avoid"]["blocked_by_success"] == 1


def test_pair_with_semantic_edge_never_gets_avoid(store):
    parent = store.load()
    semantic = rel(parent.edges, "semantic")
    assert ("zipper", "hasher") in semantic or ("hasher", "zipper") in semantic  # "archives quickly"
    r = run(store, [trace("f1", ["zipper", "hasher"], 0.0), trace("f2", ["hasher", "zipper"], 0.0)])
    assert rel(r.edges, "avoid") == set()
    assert r.counters["l1"]["avoid"]["blocked_by_invariant"] == 1
    assert not any(violations(r.edges, parent.nodes["id"]).values())


def _with_avoid(store, a, b):
    parent = store.load()
    lo, hi = sorted([a, b])
    extra = pl.DataFrame([(lo, hi, "avoid", 0.0, 0.0, 2, 0, 0, 0.0)], schema=EDGE_SCHEMA, orient="row")
    commit_derived(store, parent, pl.concat([parent.edges, extra]), kind="test")


def test_one_successful_co_use_does_not_retract_avoid(store):
    _with_avoid(store, "mailer", "plotter")
    one = run(store, [trace("s1", ["mailer", "plotter"], 1.0, seeds=[], task="task-a")])
    assert rel(one.edges, "avoid") == {("mailer", "plotter")}
    assert one.counters["l1"]["avoid_retraction"]["kept_single_success"] == 1
    same_task = run(
        store,
        [
            trace("s1", ["mailer", "plotter"], 1.0, seeds=[], task="task-a"),
            trace("s2", ["mailer", "plotter"], 1.0, seeds=[], task="task-a", agent="b"),
        ],
    )
    assert rel(same_task.edges, "avoid") == {("mailer", "plotter")}  # one task, however many traces
    two = run(
        store,
        [
            trace("s1", ["mailer", "plotter"], 1.0, seeds=[], task="task-a"),
            trace("s2", ["plotter", "mailer"], 1.0, seeds=[], task="task-b"),
        ],
    )
    assert rel(two.edges, "avoid") == set() and two.counters["l1"]["avoid_retraction"]["retracted"] == 1


def test_navigation_edge_not_induced_onto_an_avoid_pair(store):
    _with_avoid(store, "mailer", "plotter")
    r = run(store, [trace("s1", ["mailer", "plotter"], 1.0, seeds=["mailer"], task="task-a")])
    assert rel(r.edges, "workflow") == set()
    assert r.counters["l1"]["workflow"]["blocked_by_avoid"] == 1


def test_l2_reinforces_existing_edges_and_attenuates_surfaced_unused(store):
    first = run(store, [trace("t1", ["loader", "validator"], 1.0)])
    commit_derived(store, store.load(), first.edges, kind="test", extra={"round": 1})
    parent = store.load()
    surfaced = [
        TraceRecord(
            f"s{i}",
            f"s{i}",
            ["loader", "validator"],
            1.0,
            agent="a",
            window="w2",
            queries=[QueryRecord("q", ["loader", "zipper"], ["loader"])],
        )
        for i in range(3)
    ]
    r = evolve_round(parent, trace_frame(surfaced), EvolutionConfig(l3_descriptions=False))
    wf = r.edges.filter((pl.col("relation") == "workflow") & (pl.col("src") == "loader")).row(0, named=True)
    assert (
        wf["weight"] == 1.0 + 3.0 and wf["n_e"] == 4 and wf["round_updated"] == 2 and wf["round_created"] == 1
    )
    into_zipper = r.edges.filter((pl.col("relation") == "semantic") & (pl.col("dst") == "zipper"))
    before = parent.edges.filter((pl.col("relation") == "semantic") & (pl.col("dst") == "zipper"))
    assert into_zipper.height == before.height > 0  # never deleted
    assert into_zipper["weight"].to_list() == [w * 0.5 for w in before["weight"].to_list()]
    assert r.counters["l2"]["skills_surfaced_unused"] == 1


def test_blending_is_a_switch(store):
    records = [trace("t1", ["loader", "validator"], 1.0)]
    raw = run(store, records).edges.filter(pl.col("relation") == "workflow")["weight"][0]
    blended = run(store, records, blend=True, blend_n0=1.0).edges.filter(pl.col("relation") == "workflow")
    # λ = n_e/(n_e+n0) = 1/2, w0 = 0 for an induced edge
    assert blended["weight"][0] == pytest.approx(0.5 * raw) and blended["w_raw"][0] == raw


def test_final_attempt_per_task_and_agent_unless_pooled():
    records = [
        trace("a1", ["loader"], 0.0, task="t", agent="x", attempt=1),
        trace("a2", ["loader"], 1.0, task="t", agent="x", attempt=2),
        trace("b1", ["loader"], 0.0, task="t", agent="y", attempt=1),
    ]
    kept = select_attempts(trace_frame(records), pool=False)
    assert sorted(kept["trace_id"]) == ["a2", "b1"]
    assert select_attempts(trace_frame(records), pool=True).height == 3


def test_layers_switch_off_independently(store):
    records = [trace("t1", ["loader", "validator"], 1.0)]
    r = run(store, records, l1_topology=False)
    assert rel(r.edges, "workflow") == set() and "l1" not in r.counters


def test_round_commits_child_version_with_lineage_and_diff(store, tmp_path):
    from segos_pipeline.evolution.ingest import TraceStore

    TraceStore(store).ingest(
        [
            trace("t1", ["loader", "validator"], 1.0),
            trace("f1", ["mailer", "plotter"], 0.0),
            trace("f2", ["mailer", "plotter"], 0.0),
        ],
        window="w1",
    )
    parent = store.latest()
    m = evolve(store, "w1")
    assert m["parent"] == parent and m["round"] == 1 and m["window"] == "w1" and m["kind"] == "evolved"
    assert m["counters"]["l1"]["workflow"]["induced"] == 1
    assert {"round-00000.parquet", "revisions.parquet"} <= set(m["files"])
    assert "traces.parquet" not in m["files"] and "round.parquet" not in m["files"]
    assert [r["path"] for r in m["window_files"]] == [
        "traces/w1/parts/" + p.name for p in TraceStore(store).files("w1")
    ]
    m2 = evolve(store, "w1")  # chained: a second round on the same window
    assert m2["parent"] == m["version"] and m2["round"] == 2
    d = diff_versions(store.load(parent), store.load(m["version"]))
    assert d["counts"]["added"] == 3 and d["counts"]["removed"] == 0
    assert {e["relation"] for e in d["edges"]["added"]} == {"workflow", "dependency", "avoid"}
    assert "| workflow |" in to_markdown(d)


def test_a_round_reports_its_replays_and_l3_candidates_as_they_go(store):
    """A long round is not silent: the replays of queries that recorded no retrieval, and the skills L3
    tries, arrive as progress ticks that count up to what the round's counters say it did."""
    queries = ["load the ledger spreadsheets", "email the weekly digests", "compress the archives quickly"]
    records = [
        TraceRecord(
            trace_id=f"t{i}",
            task_id=f"task{i}",
            used=["mailer"] if i % 3 == 2 else ["loader", "validator"],  # mailer: never retrieved there
            reward=1.0,
            agent="a",
            attempt=1,
            queries=[QueryRecord(f"{queries[i % 3]} {i}")],  # nothing recorded: the round replays it
            used_ordered=True,
            window="w1",
            timestamp="2026-11-29T00:00:00Z",
        )
        for i in range(600)
    ]
    events = []
    state = evolve_round(store.load(), trace_frame(records), EvolutionConfig(), progress=events.append)
    ticks = [e for e in events if isinstance(e, Tick)]
    replays = [t.done for t in ticks if t.stage == replay.REPLAY_STAGE]
    assert (
        replays == sorted(replays)
        and replays[-1] == 600 == state.counters["traces"]["retrieval_reconstructed"]
    )
    assert len(replays) >= 600 // replay.TICK_EVERY  # ticks while it works, not one at the end
    l3 = [t for t in ticks if t.stage == L3_STAGE]
    examined = state.counters["l3"]["examined"]
    assert examined >= 1 and [t.done for t in l3] == list(range(1, examined + 1))
    assert {t.total for t in l3} == {examined}
