"""The CLI contract (JSON shapes, version id printed last, one-line errors with a nonzero exit), end to end
on the project's demo data (data/)."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from segos_pipeline import SnapshotStore
from segos_pipeline.cli import main
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEMO_DIR


def run(*args, ok=True):
    result = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + str(result.exception)
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    store = tmp_path_factory.mktemp("cli") / "store"
    result = run("build", "--store", store, "--quiet")
    return store, result.output.strip().splitlines()[-1]


def test_build_prints_version_id_last_and_json_manifest(built, tmp_path):
    store, vid = built
    assert vid.startswith("v0001-")
    manifest = json.loads(run("build", DEMO_DIR / "library", "--store", store, "--json").stdout)
    assert manifest["version"].startswith("v0002-") and manifest["kind"] == "cold_start"
    assert manifest["counts"]["skills"] >= 40


def test_versions_json(built):
    store, vid = built
    versions = json.loads(run("versions", "--store", store, "--json").stdout)
    assert versions[0]["version"] == vid
    assert vid in run("versions", "--store", store).output


def test_retrieve_json_shape(built):
    store, vid = built
    out = json.loads(
        run(
            "retrieve",
            "turn the interview video into subtitles",
            "--store",
            store,
            "--version",
            vid,
            "--top-n",
            "3",
            "--json",
        ).output
    )
    assert out["version"] == vid and out["query"] == "turn the interview video into subtitles"
    assert 1 <= len(out["skills"]) <= 3
    for key in ("id", "name", "rank", "score", "chars"):
        assert key in out["skills"][0]
    assert out["chars"] == sum(s["chars"] for s in out["skills"]) <= 9000
    # why each skill is there: the same records the MCP bundle gives (one builder, retrieval/why.py)
    from segos_pipeline.service.api import SegosService

    served = SegosService(store, version=vid, landing=store / "landing").retrieve_bundle(
        "turn the interview video into subtitles", top_n=3
    )
    by_id = {s["id"]: s for s in served["skills"]}
    assert sorted(by_id) == sorted(s["id"] for s in out["skills"])
    for s in out["skills"]:
        assert s["why"] and s["reasons"] and s["why"] == by_id[s["id"]]["why"]
        assert s["reasons"] == by_id[s["id"]]["reasons"]
    assert out["seeds"] == served["seeds"]


def test_retrieve_text_says_why_each_skill_is_there(built):
    store, vid = built
    query = "turn the interview video into subtitles"
    bundle = json.loads(run("retrieve", query, "--store", store, "--version", vid, "--json").output)
    lines = run("retrieve", query, "--store", store, "--version", vid).output.splitlines()
    assert lines[1].split() == ["skill", "score", "relev.", "why"]
    rows = lines[2 : 2 + len(bundle["skills"])]
    for s, line in zip(bundle["skills"], rows, strict=True):
        assert line.split()[:2] == [f"{s['rank']}.", s["id"]] and line.endswith(s["why"])


@pytest.mark.parametrize("query", ["xyzzy quux", "bake a chocolate cake"])
def test_nothing_relevant_is_an_empty_bundle_not_the_best_of_nothing(built, query):
    store, vid = built
    out = json.loads(run("retrieve", query, "--store", store, "--version", vid, "--json").output)
    assert out["skills"] == [] and out["no_match"] is True and out["seeds"] == []
    assert "no skill is relevant" in run("retrieve", query, "--store", store).output
    # the floor is a setting: 0 lists the closest skills, each with its (low) absolute relevance
    closest = json.loads(run("retrieve", query, "--store", store, "--min-score", "0", "--json").output)
    assert closest["skills"] and closest["no_match"] is False
    assert max(s["relevance"] for s in closest["skills"]) < out["min_score"]
    real = json.loads(run("retrieve", "parse a csv file and plot a chart", "--store", store, "--json").output)
    assert real["no_match"] is False and real["skills"][0]["relevance"] >= real["min_score"]
    assert all(0 <= s["words"] <= 1 and 0 <= s["relevance"] <= 1 for s in real["skills"])


def test_nothing_relevant_on_the_evolved_demo_versions_too(tmp_path):
    """After the quick start the served version is evolved: its skills' witnessing requests must not
    make an off-topic request relevant. "bake a chocolate cake" shares "bake" with dockerfile-author's
    text ("bake secrets"); a docker request that witnessed it is a little closer to the cake (cosine 0.12)
    than the text is, and that cosine, weighed as if it came with the word, gave relevance 0.36."""
    from segos_pipeline.service.api import SegosService

    store = tmp_path / "store"
    run("build", "--store", store, "--quiet")
    run("ingest", DEMO_DIR / "traces", "--store", store, "--quiet")
    for window in ("2026-11-27", "2026-11-28"):
        run("evolve", "--window", window, "--store", store, "--quiet")
    service = SegosService(store, landing=tmp_path / "landing")
    for version in ("v2", "v3"):
        for query in ("xyzzy quux", "bake a chocolate cake"):
            out = json.loads(run("retrieve", query, "--store", store, "--version", version, "--json").output)
            assert out["skills"] == [] and out["no_match"] is True, (version, query)
            found = service.search(query, version=version)
            assert found["results"] == [] and found["no_match"] is True, (version, query)
            bundle = service.retrieve_bundle(query, version=version)
            assert bundle["skills"] == [] and bundle["no_match"] is True, (version, query)
        real = service.retrieve_bundle("load the sales csv and chart revenue by month", version=version)
        assert not real["no_match"] and "data-wrangling/csv-loader" in real["order"]
    assert service.status()["version"] == service.status()["latest"]  # v3 served: what agents get


def test_replay_json_shape(built):
    store, _ = built
    out = json.loads(
        run("replay", DEMO_DIR / "queries" / "demo.jsonl", "--store", store, "--k", "5", "--json").output
    )
    for key in ("version", "k", "n", "hit", "recall", "comp", "mrr", "mean_best_rank", "latency_ms"):
        assert key in out
    assert set(out["latency_ms"]) == {"p50", "p95"} and out["k"] == 5 and out["n"] >= 20
    assert 0 <= out["comp"] <= out["recall"] <= out["hit"] <= 1
    # --details without --json: one line a query after the summary
    text = run("replay", DEMO_DIR / "queries" / "demo.jsonl", "--store", store, "--details").stdout
    lines = [line for line in text.splitlines() if line.startswith(("  hit ", "  MISS "))]
    assert len(lines) == out["n"] and sum(line.startswith("  hit ") for line in lines) == out["n_hit"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["retrieve", "x", "--version", "v9999"], "no such version"),
        (["replay", "missing.jsonl"], "not found"),
        (["build", "no/such/dir"], "not found"),
        (["retrieve", "  "], "query is empty"),
    ],
)
def test_errors_are_one_actionable_line_and_nonzero(built, args, message):
    store, _ = built
    result = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", *args, "--store", str(store)],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_empty_library_is_an_error_unless_allowed(tmp_path):
    (tmp_path / "lib" / "notes").mkdir(parents=True)
    (tmp_path / "lib" / "notes" / "README.md").write_text("no skill here\n")
    store = tmp_path / "store"
    result = run("build", tmp_path / "lib", "--store", store, ok=False)
    assert result.exit_code != 0 and "no skill packages" in result.output and "--allow-empty" in result.output
    assert SnapshotStore(store).list_versions() == []  # nothing committed
    allowed = run("build", tmp_path / "lib", "--store", store, "--allow-empty", "--quiet")
    assert allowed.exit_code == 0 and len(SnapshotStore(store).list_versions()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["retrieve", "csv", "--top-n", "0"],
        ["retrieve", "csv", "--max-chars", "0"],
        ["replay", "q", "--k", "0"],
    ],
)
def test_sizes_out_of_range_are_rejected(built, args):
    store, _ = built
    result = run(*args, "--store", store, ok=False)
    assert result.exit_code == 2 and "is not in the range" in result.output


def test_empty_store_error(tmp_path):
    result = run("retrieve", "anything", "--store", tmp_path / "nothing", ok=False)
    assert result.exit_code != 0 and "segos build" in result.output


def test_ingest_evolve_diff_round_trip(tmp_path):
    store = tmp_path / "store"
    v1 = run("build", "--store", store, "--quiet").output.strip().splitlines()[-1]
    report = json.loads(run("ingest", DEMO_DIR / "traces", "--store", store, "--json").stdout)
    assert report["accepted"] > 50 and report["quarantined"] == 3
    out = run("evolve", "--store", store, "--window", "2026-11-27", "--quiet").output.strip().splitlines()
    v2 = out[-1]
    assert v2.startswith("v0002-")
    m3 = json.loads(run("evolve", "--store", store, "--window", "2026-11-28", "--json").stdout)
    assert m3["parent"] == v2 and m3["round"] == 2 and m3["window"] == "2026-11-28"
    assert set(m3["counters"]["l1"]) == {"avoid_retraction", "workflow", "dependency", "avoid"}
    assert "blocked_by_zeta" in m3["counters"]["l1"]["dependency"]
    d = json.loads(run("diff", v1, v2, "--store", store, "--json").stdout)
    assert d["from"] == v1 and d["to"] == v2 and d["counts"]["added"] > 0
    assert set(d["edges"]) == {"added", "removed", "reweighted", "retyped"}
    assert run("diff", v1, v2, "--store", store, "--markdown").output.startswith("# Diff")
    assert "workflow" in run("diff", v1, v2, "--store", store).output
    # a round parses nothing: its report is its cold start's, and says so
    evolved = run("report", "v3", "--store", store, "--json")
    of = json.loads(evolved.stdout)
    assert of["version"] == m3["version"] and of["report_of"] == v1
    assert of["problems"] == json.loads(run("report", "v1", "--store", store, "--json").stdout)["problems"]
    assert f"this is the report of {v1}" in evolved.stderr


def test_evolve_settings_and_errors(tmp_path):
    store = tmp_path / "store"
    run("build", "--store", store, "--quiet")
    run("ingest", DEMO_DIR / "traces", "--store", store, "--window", "w1")
    m = json.loads(
        run(
            "evolve", "--store", store, "--window", "w1", "--no-l3", "--set", "theta_avoid=3", "--json"
        ).stdout
    )
    assert m["config"]["evolution"]["theta_avoid"] == 3 and "l3" not in m["counters"]
    bad = run("evolve", "--store", store, "--window", "w1", "--set", "zzz=1", ok=False)
    assert bad.exit_code != 0 and "unknown setting" in bad.output
    assert "known: " in bad.output and "theta_avoid" in bad.output  # the valid keys are listed
    missing = run("evolve", "--store", store, "--window", "nope", ok=False)
    assert missing.exit_code != 0 and "no traces ingested" in missing.output


def test_simulate_writes_labelled_traces_that_ingest(tmp_path):
    store = tmp_path / "store"
    run("build", "--store", store, "--quiet")
    out = tmp_path / "sim.jsonl"
    msg = run("simulate", "--store", store, "--traces", "200", "--out", out, "--window", "2026-12-02").output
    assert "SIMULATED" in msg
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 200 and all(x["simulated"] is True for x in lines)
    report = json.loads(run("ingest", out, "--store", store, "--json").stdout)
    assert report["windows"]["2026-12-02"]["accepted"] == 200
    m = json.loads(run("evolve", "--store", store, "--window", "2026-12-02", "--json").stdout)
    assert m["counters"]["traces"]["simulated"] == m["counters"]["traces"]["selected"] > 0
    assert m["counters"]["traces"]["real"] == 0
    table = TraceStore(SnapshotStore(store)).load("2026-12-02")
    assert set(table["source_format"]) == {"simulated"} and table["simulated"].all()


def test_damaged_versions_are_reported_not_hidden(tmp_path):
    """A version whose manifest cannot be read is listed by no command; `versions` warns about it and
    `verify --all` reports it next to versions whose files fail their hashes."""
    from ..conftest import commit_copy, damage

    store = tmp_path / "store"
    run("build", "--store", store, "--quiet")
    st = SnapshotStore(store)
    v1 = st.latest()
    bad_files, bad_manifest = commit_copy(st), commit_copy(st)
    assert run("verify", "--all", "--store", store).output.splitlines() == [
        f"{v}: ok" for v in (v1, bad_files, bad_manifest)
    ]
    damage(next((st.versions_dir / bad_files).glob("edges*.parquet")), 0, b"XXXX")
    damage(st.versions_dir / bad_manifest / "manifest.json", 0, b"{not json")

    listed = CliRunner().invoke(main, ["versions", "--store", str(store), "--json"])
    assert [m["version"] for m in json.loads(listed.stdout)] == [v1, bad_files]
    assert f"warning: {bad_manifest} is not listed: manifest.json unreadable" in listed.stderr

    result = run("verify", "--all", "--store", store, ok=False)
    assert result.exit_code == 2
    assert f"{v1}: ok" in result.stdout
    assert f"{bad_files}: DAMAGED: edges.parquet differ from the manifest" in result.stdout
    assert f"{bad_manifest}: DAMAGED: manifest.json unreadable" in result.stdout
    assert "2 damaged version(s)" in result.stderr
    assert "not both" in run("verify", v1, "--all", "--store", store, ok=False).stderr
    as_json = run("verify", "--all", "--store", store, "--json", ok=False)
    assert as_json.exit_code == 2 and "2 damaged version(s)" in as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["damaged"] == 2
    assert {r["version"]: r["ok"] for r in report["versions"]} == {
        v1: True,
        bad_files: False,
        bad_manifest: False,
    }
    one = json.loads(run("verify", v1, "--store", store, "--json").stdout)
    assert one == {"versions": [{"version": v1, "ok": True, "problem": None}], "damaged": 0}


def test_every_option_of_every_command_says_what_it_does():
    import click

    from segos_pipeline.cli.main import main as group

    missing = []

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")
        missing.extend(
            f"{path} {p.opts[0]}" for p in cmd.params if isinstance(p, click.Option) and not p.help
        )

    walk(group, "segos")
    assert not missing
