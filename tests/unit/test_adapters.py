"""Adapters: real public trace formats (../shared/data/traces, skipped when absent) and error paths."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from segos_pipeline.evolution.adapters import FORMATS, Rejected, iter_records, plans, write_library
from segos_pipeline.evolution.traces import TraceRecord
from segos_pipeline.graph.parsing import parse_library


def _split(items: list) -> tuple[list[TraceRecord], list[Rejected]]:
    records = [r for r in items if isinstance(r, TraceRecord)]
    rejected = [r for r in items if isinstance(r, Rejected)]
    assert len(records) + len(rejected) == len(items)
    return records, rejected


# ------------------------------------------------------------------------------------------ real files


@pytest.mark.shared
def test_skillsbench_trials_real(shared_data: Path) -> None:
    eval_file = shared_data / "eval" / "skillsbench-dev.jsonl"
    items = list(
        iter_records(
            shared_data / "traces" / "skillsbench-trials" / "dev.jsonl",
            "skillsbench-trials",
            queries=eval_file,
        )
    )
    records, rejected = _split(items)
    assert len(records) == 68 and not rejected
    instructions = {json.loads(line)["task"]: json.loads(line)["instruction"] for line in eval_file.open()}
    for r in records:
        assert r.used_ordered is False  # the harness sorts skills_loaded
        assert r.source_format == "skillsbench-trials" and r.attempt == 1
        assert [q.text for q in r.queries] == [instructions[r.task_id]]
        assert r.agent.startswith("Terminus-2")
        assert 0.0 <= r.reward <= 1.0
    assert len({r.trace_id for r in records}) == 68
    assert len({r.agent for r in records}) == 2  # two models: two traces per task (SPEC §7)
    assert sum(1 for r in records if r.used) == 12
    unknown = [r for r in records if "note_used" in r.extra]
    assert unknown and all(not r.used for r in unknown)  # null skills_loaded: unknown, said in extra
    stamped = [r for r in records if r.timestamp]
    assert stamped and all(r.timestamp.endswith("Z") for r in stamped)


@pytest.mark.shared
def test_skillsbench_without_queries_keeps_traces_with_a_note(shared_data: Path) -> None:
    items = list(
        iter_records(shared_data / "traces" / "skillsbench-trials" / "dev.jsonl", "skillsbench-trials")
    )
    records, rejected = _split(items)
    assert len(records) == 68 and not rejected
    assert all(not r.queries and "note_queries" in r.extra for r in records)


@pytest.fixture
def apibank_file(shared_data: Path) -> Path:
    return shared_data / "traces" / "apibank" / "level-3.json"


@pytest.mark.shared
def test_apibank_library_and_traces(apibank_file: Path, tmp_path: Path) -> None:
    lib_dir = tmp_path / "lib"
    summary = write_library(apibank_file, "apibank", lib_dir)
    assert summary["skills"] == summary["with_inputs"] == summary["with_outputs"] > 0
    assert summary["excluded_meta_tools"] == ["ToolSearcher"]
    parsed = parse_library(lib_dir)
    assert parsed.report.height == 0, parsed.report
    nodes = {row["name"]: row for row in parsed.nodes.iter_rows(named=True)}
    assert "ToolSearcher" not in nodes

    records, rejected = _split(list(iter_records(apibank_file, "apibank")))
    assert len(records) == 50 and not rejected
    for i, r in enumerate(records):
        assert r.trace_id == r.task_id == f"apibank-l3-{i:03d}"
        assert r.reward == 1.0 and r.used_ordered and r.agent == "apibank-level3"
        assert r.reward_source == "apibank: all plans succeed"
        assert len(r.queries) == 1 and r.queries[0].text
        assert "ToolSearcher" not in r.used and len(r.used) == len(set(r.used)) >= 2
        for name in r.used:
            assert nodes[name]["inputs"] and nodes[name]["outputs"], name

    got = plans(apibank_file)
    assert [p["apis"] for p in got] == [r.used for r in records]
    assert [p["query"] for p in got] == [r.queries[0].text for r in records]


@pytest.mark.shared
def test_apibank_consecutive_calls_share_fields(apibank_file: Path, tmp_path: Path) -> None:
    write_library(apibank_file, "apibank", tmp_path)
    io = {}  # API name -> (input field names, output field names), as the written packages declare them
    for md in tmp_path.glob("*/SKILL.md"):
        fm = yaml.safe_load(md.read_text(encoding="utf-8").split("---\n")[1])
        io[fm["name"]] = (
            {f["name"] for f in fm.get("inputs", [])},
            {f["name"] for f in fm.get("outputs", [])},
        )
    pairs = [
        (a, b, tuple(sorted(io[a][1] & io[b][0])))
        for p in plans(apibank_file)
        for a, b in pairwise(p["apis"])
    ]
    linked = {(a, b): shared for a, b, shared in pairs if shared}
    # an output of one API is literally an input of the next: the evidence dependency induction needs
    assert linked[("Geocoding", "NearbyRestaurants")] == ("latitude", "longitude")
    assert linked[("GetOccupationSalary", "TaxCalculator")] == ("salary",)
    assert 0 < len(linked) < len({(a, b) for a, b, _ in pairs})


@pytest.mark.shared
def test_apibank_library_builds_a_cold_start_graph(apibank_file: Path, tmp_path: Path) -> None:
    from segos_pipeline import build_cold_start

    lib_dir = tmp_path / "lib"
    summary = write_library(apibank_file, "apibank", lib_dir)
    manifest = build_cold_start(lib_dir, tmp_path / "store")
    assert manifest
    assert summary["skills"] == len(list(lib_dir.glob("*/SKILL.md")))


@pytest.mark.shared
def test_toolbench_traces_and_library(shared_data: Path, tmp_path: Path) -> None:
    root = shared_data / "traces" / "toolbench-example"
    summary = write_library(root, "toolbench", tmp_path / "lib")
    parsed = parse_library(tmp_path / "lib")
    assert parsed.report.height == 0, parsed.report
    names = set(parsed.nodes["name"].to_list())
    assert summary["skills"] == len(names)
    assert 0 < summary["with_outputs"] < summary["with_inputs"] < summary["skills"]  # outputs not invented
    assert "finish" not in {n.casefold() for n in names}

    records, rejected = _split(list(iter_records(root, "toolbench")))
    assert not rejected
    finals = [r for r in records if r.trace_id.endswith("-final")]
    branches = [r for r in records if "-branch-" in r.trace_id]
    answer_files = sorted((root / "answer").rglob("*.json"))
    assert len(finals) == len(answer_files) == 15
    assert len(finals) + len(branches) == len(records) == 156
    assert {r.reward for r in finals} == {0.0, 1.0}  # both successful and failed runs
    assert sum(r.reward for r in finals) == 9
    assert branches and all(r.reward == 0.0 and r.extra["kind"] == "failed_branch" for r in branches)
    assert all("diverges_at_depth" in r.extra and r.extra["leaf_depth"] > 0 for r in branches)
    for r in records:
        assert r.agent == "toolbench-chatgpt-dfs" and r.used_ordered
        assert r.queries and r.queries[0].text
        assert set(r.used) <= names, set(r.used) - names
    # within one task, the final try is the last explored (highest attempt)
    for final in finals:
        same = [r.attempt for r in records if r.task_id == final.task_id]
        assert final.attempt == max(same) == len(same)
    # the hallucinated "invalid_hallucination_function_name" calls are kept out of `used`
    assert any("invalid_calls" in r.extra for r in records)


# ------------------------------------------------------------------------------------------ error paths


def test_native_rejects_bad_lines(tmp_path: Path) -> None:
    good = {
        "trace_id": "t1",
        "task_id": "a",
        "used": ["x"],
        "reward": 1.0,
        "timestamp": "2026-01-01T00:00:00",
    }
    lines = [json.dumps(good), "{not json", "", json.dumps({"used": ["x"], "reward": 1.0})]
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "a.jsonl").write_text(json.dumps({**good, "trace_id": "t0"}) + "\n")
    records, rejected = _split(list(iter_records(tmp_path, "native")))
    assert [r.trace_id for r in records] == ["t0", "t1"]  # folder: files sorted
    assert all(r.source_format == "native" for r in records)
    assert records[1].source.endswith("b.jsonl:1") and records[1].timestamp == "2026-01-01T00:00:00Z"
    assert len(rejected) == 2
    bad_json, no_task = rejected
    assert bad_json.source.endswith("b.jsonl:2") and "not valid JSON" in bad_json.reason
    assert no_task.source.endswith("b.jsonl:4") and "task_id" in no_task.reason
    assert no_task.raw.startswith("{")


def test_skillsbench_rejects_bad_reward(tmp_path: Path) -> None:
    base = {"task": "t", "trial_id": "t__1", "model": "m", "skills_loaded": ["b", "a"], "reward": 1.0}
    rows = [base, {**base, "trial_id": "t__2", "reward": 1.7}, {**base, "trial_id": "t__3", "reward": None}]
    trials = tmp_path / "trials.jsonl"
    trials.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    queries = tmp_path / "eval.jsonl"
    queries.write_text(json.dumps({"task": "other", "instruction": "do other"}) + "\n")
    records, rejected = _split(list(iter_records(trials, "skillsbench-trials", queries=queries)))
    assert len(records) == 1 and records[0].used == ["b", "a"] and not records[0].used_ordered
    assert not records[0].queries and "no instruction" in records[0].extra["note_queries"]
    reasons = [r.reason for r in rejected]
    assert len(reasons) == 3
    assert "[0, 1]" in reasons[0] and "1.7" in reasons[0]
    assert "missing `reward`" in reasons[1]
    assert "not valid JSON" in reasons[2]


def test_apibank_rejects_malformed_tasks(tmp_path: Path) -> None:
    call = {
        "api_name": "Echo",
        "input": {"text": "hi"},
        "output": {"output": {"text": "hi"}, "exception": None},
    }
    tasks = [{"requirement": "echo hi", "apis": [call]}, {"apis": [call]}, "oops"]
    src = tmp_path / "level-3.json"
    src.write_text(json.dumps(tasks))
    records, rejected = _split(list(iter_records(src, "apibank")))
    assert [r.used for r in records] == [["Echo"]]
    assert [r.source.rsplit("#", 1)[1] for r in rejected] == ["1", "2"]
    assert "requirement" in rejected[0].reason
    # an API called but never described by ToolSearcher gets a minimal package from its call
    summary = write_library(src, "apibank", tmp_path / "lib")
    assert summary["minimal_from_calls"] == ["Echo"]
    node = parse_library(tmp_path / "lib").nodes.row(0, named=True)
    assert node["inputs"] == ["text: str"] and node["outputs"] == ["text: str"]


def test_formats_without_library_and_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text("")
    assert FORMATS == ("native", "skillsbench-trials", "apibank", "toolbench")
    for fmt in ("native", "skillsbench-trials"):
        with pytest.raises(ValueError, match="no skill library"):
            write_library(tmp_path / "x.jsonl", fmt, tmp_path / "out")
    with pytest.raises(ValueError, match="unknown trace format"):
        iter_records(tmp_path / "x.jsonl", "csv")
    with pytest.raises(FileNotFoundError):
        iter_records(tmp_path / "missing.jsonl", "native")


def _call(name: str, args: str, children: list | None = None, **kw: object) -> dict:
    """An `Action` node and its `Action Input` child, the way ToolBench trees store one call."""
    arg_node = {"node_type": "Action Input", "description": args, "children": children or [], **kw}
    return {"node_type": "Action", "description": name, "children": [arg_node]}


def test_toolbench_small_tree(tmp_path: Path) -> None:
    """root → a → (b → give up) | (c → hallucinated → give answer): one final try and one failed branch."""
    ok = '{"error": "", "response": "ok"}'
    give_up = _call("Finish", '{"return_type": "give_up_and_restart"}', expand_num=3, depth=6)
    answer = _call("Finish", '{"return_type": "give_answer"}', expand_num=6, depth=8)
    ghost = _call("ghost_api", "{}", [answer], observation='{"error": "No such function name"}')
    branch_b = _call("b_for_tool", "{}", [give_up], observation=ok)
    branch_c = _call("c_for_tool", "{}", [ghost], observation=ok)
    root_call = _call("a_for_tool", "{}", [branch_b, branch_c], observation=ok, expand_num=1, depth=2)
    tree = {"node_type": "Action Input", "description": "", "children": [root_call], "depth": 0}
    functions = [
        {
            "name": f"{x}_for_tool",
            "description": f'This is the subfunction for tool "tool", you can use this tool.'
            f'The description of this function is: "does {x}"',
            "parameters": {"properties": {"q": {"type": "string"}}, "required": ["q"]},
        }
        for x in "abc"
    ] + [{"name": "Finish", "description": "control"}]
    answer_dir = tmp_path / "answer" / "G9_answer"
    answer_dir.mkdir(parents=True)
    run = {
        "win": True,
        "tree": {"tree": tree, "size": 9},
        "answer_generation": {"query": "", "function": functions},
    }
    (answer_dir / "7_ChatGPT_DFS_woFilter_w2.json").write_text(json.dumps(run))
    (answer_dir / "8_ChatGPT_DFS_woFilter_w2.json").write_text(json.dumps({"win": True}))
    (tmp_path / "instruction").mkdir()
    (tmp_path / "instruction" / "G9_query.json").write_text(
        json.dumps([{"query_id": 7, "query": "do a then c"}])
    )

    records, rejected = _split(list(iter_records(tmp_path, "toolbench")))
    assert len(rejected) == 1 and "search tree" in rejected[0].reason
    by_id = {r.trace_id: r for r in records}
    assert set(by_id) == {"G9-7-final", "G9-7-branch-1"}
    final, branch = by_id["G9-7-final"], by_id["G9-7-branch-1"]
    assert final.used == ["tool-a", "tool-c"] and final.reward == 1.0 and final.attempt == 2
    assert final.extra["invalid_calls"] == ["ghost_api"]
    assert branch.used == ["tool-a", "tool-b"] and branch.reward == 0.0 and branch.attempt == 1
    assert branch.extra["end"] == "give_up_and_restart" and branch.extra["branch_of"] == "G9-7-final"
    assert final.queries[0].text == "do a then c"  # from the instruction file: the answer had no query
    assert final.agent == "toolbench-chatgpt-dfs"

    summary = write_library(tmp_path, "toolbench", tmp_path / "lib")
    assert summary["skills"] == 3 and summary["with_inputs"] == 3 and summary["with_outputs"] == 0
    assert set(parse_library(tmp_path / "lib").nodes["name"]) == {"tool-a", "tool-b", "tool-c"}


def test_rejected_raw_is_truncated(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("x" * 5000 + "\n")
    [bad] = list(iter_records(tmp_path / "t.jsonl", "native"))
    assert isinstance(bad, Rejected) and len(bad.raw) == 2000


# --------------------------------------------------------------- mutated inputs: rejected, never raised


def _answer(tree: object, functions: object = None, win: object = True) -> dict:
    return {
        "win": win,
        "tree": {"tree": tree, "size": 3},
        "answer_generation": {"query": "q", "function": functions},
    }


@pytest.mark.parametrize(
    "run, reason",
    [
        (_answer({"node_type": "Action", "expand_num": 1e308 * 10, "children": []}), "OverflowError"),
        (_answer({"node_type": "Action", "expand_num": "abc", "children": []}), "ValueError"),
        (_answer({"node_type": "Action", "children": 5}), "TypeError"),
        (_answer({"children": []}, functions=[{"name": ["x"]}]), "TypeError"),
        (_answer({"children": [{"depth": [1]}]}), "TypeError"),
    ],
)
def test_toolbench_mutated_answer_is_rejected_with_a_reason(tmp_path: Path, run: dict, reason: str) -> None:
    folder = tmp_path / "answer" / "G1_answer"
    folder.mkdir(parents=True)
    (folder / "1_ChatGPT_DFS_woFilter_w2.json").write_text(json.dumps(run).replace("Infinity", "1e999"))
    good = _answer({"node_type": "Action", "description": "x_for_t", "children": []})
    (folder / "2_ChatGPT_DFS_woFilter_w2.json").write_text(json.dumps(good))
    records, rejected = _split(list(iter_records(tmp_path, "toolbench")))
    assert [r.trace_id for r in records] == ["G1-2-final"]
    assert rejected and all(r.source.endswith("1_ChatGPT_DFS_woFilter_w2.json") for r in rejected)
    assert reason in " ".join(r.reason for r in rejected)


def test_toolbench_mutated_instruction_file_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "instruction").mkdir()
    (tmp_path / "instruction" / "G1_query.json").write_text(json.dumps([{"api_list": 5, "query_id": 1}]))
    (tmp_path / "answer" / "G1_answer").mkdir(parents=True)
    good = _answer({"node_type": "Action", "description": "x_for_t", "children": []})
    (tmp_path / "answer" / "G1_answer" / "1_m.json").write_text(json.dumps(good))
    records, rejected = _split(list(iter_records(tmp_path, "toolbench")))
    assert len(records) == 1 and len(rejected) == 1 and "instruction file skipped" in rejected[0].reason


def test_apibank_and_skillsbench_mutated_records_are_rejected(tmp_path: Path) -> None:
    tasks = [
        {"requirement": "r", "apis": [{"api_name": "A", "output": []}]},
        {"requirement": "r", "apis": [{"api_name": ["A"]}]},
        {"requirement": "r", "apis": [{"api_name": "A" * 1000}]},  # a skill name over the contract's cap
        {"requirement": "r", "apis": [{"api_name": "B"}]},
    ]
    (tmp_path / "level-3.json").write_text(json.dumps(tasks))
    records, rejected = _split(list(iter_records(tmp_path / "level-3.json", "apibank")))
    # the adapter itself yields records; the contract check at ingestion rejects the oversized name
    assert {r.source.rsplit("#", 1)[1] for r in records} == {"0", "2", "3"} and len(rejected) == 1
    trials = [
        {"task": "t", "trial_id": "a", "model": "m", "reward": 2**70},
        {
            "task": "t",
            "trial_id": "b",
            "model": "m",
            "reward": 1.0,
            "started_at": "0001-01-01T00:00:00+05:00",
        },
        {"task": 5, "trial_id": "c", "model": "m", "reward": 1.0},
        {"task": "t", "trial_id": "d", "model": "m", "reward": 1.0, "skills_loaded": [{"x": 1}]},
    ]
    path = tmp_path / "trials.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in trials) + "\n" + "[" * 5000 + "]" * 5000 + "\n")
    records, rejected = _split(list(iter_records(path, "skillsbench-trials")))
    assert not records and len(rejected) == 5 and all(r.reason for r in rejected)


@pytest.mark.shared
def test_generate_library_prints_a_summary_and_json_only_when_asked(
    apibank_file: Path, tmp_path: Path
) -> None:
    import json

    from click.testing import CliRunner

    from segos_pipeline.cli.main import main

    args = ["generate-library", str(apibank_file), str(tmp_path / "a"), "--format", "apibank"]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and text.stdout.startswith("wrote 21 skill package(s) from apibank to ")
    assert "excluded meta tools: ToolSearcher" in text.stdout and not text.stdout.lstrip().startswith("{")
    as_json = CliRunner().invoke(main, [*args[:2], str(tmp_path / "b"), *args[3:], "--json"])
    assert json.loads(as_json.stdout)["skills"] == 21
