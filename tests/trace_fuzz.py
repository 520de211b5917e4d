"""Mutated trace inputs in every format the adapters read, and the check that ingestion loses none.

`write_corpus` writes valid records of each format (native, skillsbench-trials, apibank, toolbench) with
random mutations: a value swapped for a hostile one (huge or negative integers, non-finite numbers, lone
surrogates, out-of-range timestamps, deep nesting, long strings, wrong types), a key dropped or added,
the serialised line cut short or given invalid bytes. `ingest_and_account` ingests each format and checks
the bar: nothing raised, and every input is either stored, quarantined with a reason, or a counted
duplicate of a stored trace (none silently dropped).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore

_DEEP = "\u0000DEEP\u0000"  # placeholder replaced by deep nesting in the serialised text
HOSTILE: list[Any] = [
    2**70,
    -(2**70),
    -1,
    0,
    1e308,
    float("nan"),
    float("inf"),
    True,
    None,
    "",
    " ",
    "0",
    "\ud800",
    "\udfff tail",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-12:00",
    "yesterday",
    [],
    {},
    [None],
    [1, 2],
    {"text": None},
    "x" * 70_000,
    ["s"] * 700,
    _DEEP,
]


def _native(i: int) -> dict[str, Any]:
    return {
        "trace_id": f"n-{i}",
        "task_id": f"task-{i % 50}",
        "agent": "agent-a",
        "attempt": 1 + i % 3,
        "timestamp": f"2026-11-29T0{i % 10}:00:00Z",
        "queries": [
            {"text": "load the csv", "retrieved": ["csv-loader", "chart-plotter"], "seeds": ["csv-loader"]}
        ],
        "used": ["csv-loader", "chart-plotter"],
        "reward": 0.5,
        "cost": {"usd": 0.1},
    }


def _trial(i: int) -> dict[str, Any]:
    return {
        "task": f"task-{i % 40}",
        "trial_id": f"trial-{i}",
        "model": "model-a",
        "harness": "h",
        "skills_loaded": ["csv-loader", "chart-plotter"],
        "skills_status": "ok",
        "reward": 1.0,
        "reward_source": "verifier",
        "started_at": "2026-11-29T01:00:00Z",
    }


def _apibank_task(i: int) -> dict[str, Any]:
    found = {
        "name": f"GetThing{i % 7}",
        "description": "Get a thing.",
        "input_parameters": {"id": {"type": "str", "description": "id"}},
        "output_parameters": {"thing": {"type": "str", "description": "the thing"}},
    }
    return {
        "requirement": f"get thing {i}",
        "response": "done",
        "apis": [
            {"api_name": "ToolSearcher", "input": {"keywords": "thing"}, "output": {"output": found}},
            {
                "api_name": f"GetThing{i % 7}",
                "input": {"id": str(i)},
                "output": {"output": {"thing": "t"}, "exception": None},
            },
        ],
    }


def _toolbench_answer(i: int) -> dict[str, Any]:
    fn = f"get_thing_for_tool{i % 5}"
    action = {
        "node_type": "Action",
        "description": fn,
        "expand_num": 1,
        "depth": 1,
        "children": [
            {
                "node_type": "Action Input",
                "description": "{}",
                "observation": '{"error": "", "response": "ok"}',
                "depth": 2,
                "children": [
                    {
                        "node_type": "Action",
                        "description": "Finish",
                        "depth": 3,
                        "children": [
                            {
                                "node_type": "Action Input",
                                "description": '{"return_type": "give_answer"}',
                                "depth": 4,
                                "children": [],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    return {
        "win": True,
        "answer_generation": {
            "query": f"find thing {i}",
            "function": [
                {
                    "name": fn,
                    "description": f'This is the subfunction for tool "tool{i % 5}". The description of this '
                    'function is: "gets a thing"',
                    "parameters": {"type": "object", "properties": {}, "required": []},
                },
                {"name": "Finish", "description": "finish", "parameters": {}},
            ],
            "finish_type": "give_answer",
        },
        "tree": {"size": 5, "tree": {"node_type": "root", "depth": 0, "children": [action]}},
    }


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def mutate(obj: Any, rng: random.Random) -> Any:
    """One to three random mutations of a (deep-copied) JSON value."""
    obj = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            return copy.deepcopy(rng.choice(HOSTILE))
        path = rng.choice(paths)
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        kind = rng.random()
        if kind < 0.7:
            parent[path[-1]] = copy.deepcopy(rng.choice(HOSTILE))
        elif kind < 0.85 and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[f"extra_{rng.randint(0, 9)}"] = copy.deepcopy(rng.choice(HOSTILE))
        else:
            parent[path[-1]] = str(parent[path[-1]])
    return obj


def serialise(
    obj: Any, rng: random.Random, damage: float = 0.1, depths: tuple[int, ...] = (40, 300, 5000)
) -> bytes:
    text = json.dumps(obj)  # ensure_ascii: a lone surrogate becomes a \\ud800 escape, as a client sends it
    text = text.replace(json.dumps(_DEEP), "[" * (depth := rng.choice(depths)) + "]" * depth)
    data = text.encode()
    roll = rng.random()
    if roll < damage / 2:
        data = data[: rng.randint(1, max(len(data) - 1, 1))]  # cut short
    elif roll < damage:
        at = rng.randint(0, len(data))
        data = data[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]) + data[at:]
    return data


@dataclass
class Corpus:
    root: Path
    items: dict[str, int] = field(default_factory=dict)  # format -> inputs written
    sources: dict[str, Path] = field(default_factory=dict)


def write_corpus(root: Path, n: int, seed: int = 0, valid_share: float = 0.3) -> Corpus:
    """About n inputs spread over the four formats; `valid_share` of them unmutated."""
    rng = random.Random(seed)
    corpus = Corpus(root)
    per = {"native": n * 4 // 10, "skillsbench-trials": n * 3 // 10, "apibank": n * 2 // 10}
    per["toolbench"] = n - sum(per.values())

    def maybe(obj: Any) -> Any:
        return obj if rng.random() < valid_share else mutate(obj, rng)

    for fmt, make in (("native", _native), ("skillsbench-trials", _trial)):
        path = root / fmt / "traces.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            for i in range(per[fmt]):
                fh.write(serialise(maybe(make(i)), rng).replace(b"\n", b" ") + b"\n")
        corpus.items[fmt], corpus.sources[fmt] = per[fmt], path
    folder = root / "apibank"
    folder.mkdir(parents=True, exist_ok=True)
    tasks = [maybe(_apibank_task(i)) for i in range(per["apibank"])]
    for j in range(4):  # four files; the list itself stays valid JSON so each task is its own input
        chunk = tasks[j::4]
        text = "[" + ",".join(serialise(t, rng, damage=0, depths=(40, 300)).decode() for t in chunk) + "]"
        (folder / f"level-{j}.json").write_text(text, encoding="utf-8")
    corpus.items["apibank"], corpus.sources["apibank"] = per["apibank"], folder
    answers = root / "toolbench" / "answer" / "G1_answer"
    answers.mkdir(parents=True, exist_ok=True)
    for i in range(per["toolbench"]):
        (answers / f"{i}_ChatGPT_DFS_woFilter_w2.json").write_bytes(
            serialise(maybe(_toolbench_answer(i)), rng)
        )
    corpus.items["toolbench"], corpus.sources["toolbench"] = per["toolbench"], root / "toolbench"
    return corpus


def _input_of(fmt: str, source: str) -> str:
    """The input (line, task or answer file) a record's or rejection's source names."""
    if fmt == "toolbench":
        return source.split("#", 1)[0]
    return source


def ingest_and_account(traces: TraceStore, corpus: Corpus) -> dict[str, dict[str, int]]:
    """Ingest every format; per format: inputs, stored, quarantined, duplicates, crashes, silently dropped."""
    out: dict[str, dict[str, int]] = {}
    for fmt, path in corpus.sources.items():
        window = f"fuzz-{fmt}"
        crashes = 0
        try:
            if fmt == "native":
                report = traces.ingest_path(path, fmt, window=window)
            else:
                report = traces.ingest(iter_records(path, fmt), window=window)
        except Exception:  # the bar is that nothing escapes; count it instead of stopping the run
            crashes += 1
            out[fmt] = {
                "inputs": corpus.items[fmt],
                "crashes": crashes,
                "silently_dropped": corpus.items[fmt],
            }
            continue
        stored = (
            traces.scan(window).select("source").collect()["source"].to_list()
            if window in traces.windows()
            else []
        )
        quarantined = [q for q in traces.quarantine(window) if q.get("reason")]
        seen = {_input_of(fmt, s) for s in stored} | {_input_of(fmt, q["source"]) for q in quarantined}
        expected = _expected_inputs(fmt, corpus)
        missing = expected - seen
        # an input neither stored nor quarantined must be a counted duplicate of a stored trace
        dropped = max(len(missing) - report.duplicates, 0)
        out[fmt] = {
            "inputs": len(expected),
            "read": report.read,
            "stored": report.accepted,
            "quarantined": len(quarantined),
            "duplicates": report.duplicates,
            "conflicts": report.conflicts,
            "crashes": crashes,
            "silently_dropped": dropped
            + (report.read - report.accepted - report.duplicates - report.rejected != 0),
        }
    return out


def _expected_inputs(fmt: str, corpus: Corpus) -> set[str]:
    path = corpus.sources[fmt]
    if fmt in ("native", "skillsbench-trials"):
        lines = path.read_bytes().split(b"\n")
        return {f"{path}:{i}" for i, line in enumerate(lines, start=1) if line.strip()}
    if fmt == "apibank":
        out = set()
        for file in sorted(path.glob("*.json")):
            n = len(json.loads(file.read_text(encoding="utf-8")))
            out |= {f"{file}#{i}" for i in range(n)}
        return out
    return {str(p) for p in sorted((path / "answer").rglob("*.json"))}
