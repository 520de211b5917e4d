"""L3: critic, grounded editor, gates, verification, the model-backed editor against a fake server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import polars as pl
import pytest

from segos_pipeline import RetrievalConfig, SnapshotStore, build_cold_start
from segos_pipeline.config import EvolutionConfig
from segos_pipeline.evolution.descriptions import ungrounded_words
from segos_pipeline.evolution.editor import GroundedEditor, make_editor
from segos_pipeline.evolution.round import evolve_round
from segos_pipeline.evolution.traces import QueryRecord, TraceRecord, trace_frame
from segos_pipeline.store.diff import diff_versions, to_table

from ..conftest import write_skill

# The reporter's long body dilutes its body match, so for the witness query it ranks behind the archiver
# although its package says exactly what the query needs.
FILLER = " ".join(f"word{i}" for i in range(150))
SKILLS = {
    "archiver": ("Archive files into columnar bundles.", "Bundles files."),
    "reporter": (
        "Summarise results in a report.",
        f"Stores the report with snappy columnar archive storage. {FILLER}",
    ),
    "digest": ("Summarise weekly results digest.", "Sends a digest."),
    "mailer": ("Send email.", "Sends email."),
}
WITNESS = "snappy columnar archive"
TOP1 = RetrievalConfig(top_n=1)


@pytest.fixture
def store(tmp_path):
    for name, (desc, body) in SKILLS.items():
        write_skill(tmp_path / "lib", name, f"name: {name}\ndescription: {desc}", f"# {name}\n\n{body}\n")
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(tmp_path / "lib", st)
    return st


def _trace(tid, query, used, retrieved, reward=1.0):
    return TraceRecord(tid, tid, used, reward, [QueryRecord(query, retrieved, retrieved[:1])], window="w")


def _round(store, records, custom_editor=None, **cfg):
    config = EvolutionConfig(l1_topology=False, l2_weights=False).with_overrides(**cfg)
    return evolve_round(store.load(), trace_frame(records), config, TOP1, editor=custom_editor)


def test_grounded_revision_committed_when_it_lifts_the_rank(store):
    from segos_pipeline import Retriever

    before = Retriever(store.load(), TOP1).rank_of(
        WITNESS, 3
    )  # nodes sorted: archiver, digest, mailer, reporter
    assert before == 2
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"])])
    rev = r.revisions.row(0, named=True)
    assert rev["skill"] == "reporter" and rev["committed"] and rev["outcome"] == "committed"
    assert rev["rank_before"] > 1 and rev["rank_after"] == 1
    assert set(rev["missing_terms"]) == {"snappy", "columnar", "archive"}
    after = r.nodes.filter(pl.col("id") == "reporter")["description"][0]
    assert after.startswith("Summarise results in a report.") and "snappy" in after
    assert not ungrounded_words(
        SKILLS["reporter"][0], after, SKILLS["reporter"][0] + " " + SKILLS["reporter"][1]
    )
    assert r.counters["l3"]["committed"] == 1
    # the token table follows the revision, so the next version's index sees it
    desc_tokens = r.tokens.filter((pl.col("node") == 3) & (pl.col("field") == "description"))[
        "token"
    ].to_list()
    assert "snappy" in desc_tokens


def test_no_candidate_when_the_skill_was_retrieved(store):
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["reporter"])])
    assert r.revisions.is_empty() and r.counters["l3"]["candidates"] == 0


def test_failed_traces_give_no_candidates(store):
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"], reward=0.3)])
    assert r.counters["l3"]["candidates"] == 0


class DropSummaryEditor:
    """A test editor that adds the witness words but drops the words another query relies on."""

    name = "drop-summary"

    def propose(self, before, critique, package_text):
        return "Stores the report with snappy columnar archive storage."


def test_gate_two_blocks_a_revision_that_hurts_another_query(store):
    records = [
        _trace("t1", WITNESS, ["reporter"], ["archiver"]),
        _trace("t2", "summarise the results", ["reporter"], ["reporter"]),
    ]
    r = _round(store, records, custom_editor=DropSummaryEditor())
    rev = r.revisions.row(0, named=True)
    assert not rev["committed"] and rev["outcome"].startswith("gate 2")
    assert rev["worst_other_change"] > 0
    assert r.nodes.filter(pl.col("id") == "reporter")["description"][0] == SKILLS["reporter"][0]


class PasteQueryEditor:
    name = "paste"

    def propose(self, before, critique, package_text):
        return before + " quantum blockchain"


def test_ungrounded_revisions_are_rejected(store):
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"])], custom_editor=PasteQueryEditor())
    assert r.counters["l3"]["rejected_ungrounded"] == 1 and r.counters["l3"]["committed"] == 0
    assert "ungrounded" in r.revisions["outcome"][0]


def test_grounded_editor_only_appends_package_words():
    from segos_pipeline.evolution.editor import Critique

    out = GroundedEditor(max_terms=2).propose(
        "Base text.", Critique("s", "q", ["alpha", "beta", "gamma"], ""), ""
    )
    assert out == "Base text. (alpha, beta)"


class _FakeChat(BaseHTTPRequestHandler):
    reply = ""
    seen: ClassVar[list] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeChat.seen.append((self.path, body, self.headers.get("Authorization")))
        data = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": _FakeChat.reply}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    server = HTTPServer(("127.0.0.1", 0), _FakeChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _FakeChat.seen = []
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_model_editor_against_a_local_fake_server(store, fake_server, monkeypatch):
    monkeypatch.setenv("SEGOS_EDITOR_API_KEY", "test-key")
    _FakeChat.reply = "Summarise results in a report; stores it as snappy columnar archive storage."
    cfg = {"editor": "openai", "editor_endpoint": fake_server, "editor_model": "fake-model"}
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"])], **cfg)
    assert r.counters["l3"]["committed"] == 1, r.revisions["outcome"].to_list()
    assert r.revisions["editor"][0] == "openai"
    path, body, auth = _FakeChat.seen[0]
    assert path == "/v1/chat/completions" and body["model"] == "fake-model" and auth == "Bearer test-key"
    _FakeChat.reply = "Summarise results with quantum blockchain."
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"])], **cfg)
    assert r.counters["l3"]["rejected_ungrounded"] == 1


def test_model_editor_needs_configuration_and_unreachable_endpoint_is_an_editor_error(store):
    with pytest.raises(ValueError, match="editor_endpoint"):
        make_editor(EvolutionConfig(editor="openai"))
    cfg = {
        "editor": "openai",
        "editor_endpoint": "http://127.0.0.1:9/v1",
        "editor_model": "m",
        "editor_timeout_s": 2,
    }
    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"])], **cfg)
    assert r.counters["l3"]["editor_errors"] == 1 and r.counters["l3"]["committed"] == 0


def test_description_changes_appear_in_the_diff(store):
    from segos_pipeline.graph.build import commit_derived

    r = _round(store, [_trace("t1", WITNESS, ["reporter"], ["archiver"])])
    parent = store.load()
    m = commit_derived(store, parent, r.edges, kind="evolved", nodes=r.nodes, tokens=r.tokens)
    d = diff_versions(parent, store.load(m["version"]))
    assert d["counts"]["descriptions"] == 1 and d["descriptions"][0]["skill"] == "reporter"
    # the plain view (`segos diff`) shows the words the editor appended
    added = d["descriptions"][0]["after"][len(d["descriptions"][0]["before"]) :].strip()
    assert added and f"  description reporter: + {added}" in to_table(d).splitlines()


# ------------------------------------------------------------------ L3 proportional to its candidates


def test_patch_tokens_equals_retokenising_the_whole_library(demo_store):
    from segos_pipeline.evolution.descriptions import patch_tokens
    from segos_pipeline.text.token_rows import token_table

    snap = SnapshotStore(demo_store).load()
    last = snap.nodes.height - 1
    changed = {0: "Loads ledgers; quantum parquet words.", 5: "", last: "Summarise results twice, results."}
    rows = sorted(changed)
    nodes = snap.nodes.with_columns(
        description=snap.nodes["description"].scatter(rows, [changed[r] for r in rows])
    )
    patched = patch_tokens(snap.tokens, nodes, changed)
    assert patched.equals(token_table(nodes))
    assert not patched.equals(snap.tokens)
    assert patch_tokens(snap.tokens, snap.nodes, []).equals(snap.tokens)


def _demo_round_before_l3(tmp_path):
    from segos_pipeline.evolution.adapters import iter_records
    from segos_pipeline.evolution.ingest import TraceStore
    from segos_pipeline.evolution.round import l1_stage, l2_stage, prepare_round
    from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR

    st = SnapshotStore(tmp_path / "demo")
    build_cold_start(DEFAULT_LIBRARY, st)
    TraceStore(st).ingest(iter_records(DEMO_DIR / "traces" / "2026-11-27.jsonl", "native"))
    parent, config = st.load(), EvolutionConfig()
    retrieval = RetrievalConfig()
    state = prepare_round(parent, TraceStore(st).load("2026-11-27"), config, retrieval)
    return l2_stage(l1_stage(state, config), config), config, retrieval


def test_l3_stage_equals_a_from_scratch_round_on_the_demo_data(tmp_path):
    """The stage reuses the parent's index and re-tokenises only revised skills; the result must be that
    of the round before that change: a fresh index for the round's graph, the whole library re-tokenised
    and rebuilt for verification."""
    from dataclasses import replace

    from segos_pipeline import Retriever
    from segos_pipeline.evolution.descriptions import description_update
    from segos_pipeline.evolution.round import draft_snapshot, l3_stage
    from segos_pipeline.text.token_rows import token_table

    state, config, retrieval = _demo_round_before_l3(tmp_path)
    parent, edges = state.parent, state.edges
    fresh = Retriever(draft_snapshot(parent, state.nodes, state.tokens, edges), retrieval)
    assert fresh.snapshot.path is None  # no cache: the index is built from the tokens

    def from_scratch(nodes, _tokens, _changed):
        return Retriever(draft_snapshot(parent, nodes, token_table(nodes), edges), retrieval)

    reference = description_update(fresh, state.selected, config, retrieval.top_n, None, from_scratch)
    ours = l3_stage(replace(state, counters=dict(state.counters), timings={}), config, retrieval)
    assert reference.counters["committed"] == 2  # the demo window commits revisions: a real comparison
    assert ours.revisions.equals(reference.revisions)
    assert ours.nodes.equals(reference.nodes)
    assert ours.tokens.equals(token_table(reference.nodes))
    assert ours.counters["l3"] == reference.counters


def test_rank_positions_equal_rank_of(demo_store, demo_queries):
    """The counted positions L3 uses are `rank_of`'s, for every skill, with and without a patch."""
    import json

    from segos_pipeline import Retriever
    from segos_pipeline.evolution.descriptions import RankPositions
    from segos_pipeline.text.token_rows import token_table

    retriever = Retriever(SnapshotStore(demo_store).load())
    positions = RankPositions(retriever, keep=2)
    texts = [json.loads(line)["query"] for line in demo_queries.read_text().splitlines()[:6]]
    nodes = retriever.snapshot.nodes
    revised = nodes.slice(3, 1).with_columns(description=pl.lit("csv parquet schema ledger charts"))
    patch = retriever.revision_patch(3, revised, token_table(revised).drop("node"))
    for text in texts + texts[:2]:  # the repeats come from the kept rankings
        for node in range(nodes.height):
            assert positions.of(text, node) == retriever.rank_of(text, node)
        assert positions.of(text, 3, patch) == retriever.rank_of(text, 3, patch)
    assert any(retriever.rank_of(t, n) is None for t in texts for n in range(nodes.height))
