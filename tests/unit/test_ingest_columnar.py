"""The columnar fast path of native ingest gives exactly what the per-line model gives: the same stored rows,
the same quarantine entries with the same reasons, the same report, on crafted edge cases, the fuzz
corpus, the demo traces and the real traces of ../shared/data (as native lines)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from segos_pipeline.config import MAX_ATTEMPT, MAX_ID_CHARS, MAX_LINE_BYTES, MAX_NAME_CHARS, MAX_SKILLS
from segos_pipeline.evolution import columnar
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import IngestReport, TraceStore
from segos_pipeline.evolution.trace_batches import native_batches
from segos_pipeline.evolution.traces import TRACE_SCHEMA, TraceRecord, native_dict
from segos_pipeline.paths import DEMO_TRACES

from ..trace_fuzz import write_corpus

BASE: dict[str, Any] = {
    "trace_id": "t",
    "task_id": "task",
    "agent": "agent-a",
    "attempt": 1,
    "timestamp": "2026-11-29T01:02:03Z",
    "queries": [
        {"text": "load the csv", "retrieved": ["csv-loader", "excel-reader"], "seeds": ["csv-loader"]}
    ],
    "used": ["csv-loader", "chart-plotter", "csv-loader"],
    "reward": 1.0,
}


def _line(**patch: Any) -> str:
    return json.dumps({k: v for k, v in {**BASE, **patch}.items() if v is not _DROP})


_DROP = object()


def _crafted() -> list[str]:
    """Lines at every edge the fast path must either vouch for exactly or leave to the model."""
    out: list[str] = []
    patches: list[dict[str, Any]] = [
        {},
        {"trace_id": _DROP},
        {"trace_id": None},
        {"agent": _DROP, "attempt": _DROP},
        {"agent": None},
        {"attempt": None},
        {"simulated": None},
        {"simulated": True},
        {"simulated": False},
        {"simulated": 1},
        {"simulated": "true"},
        {"task_id": " task"},
        {"task_id": "task\u3000"},
        {"task_id": "\x1ctask"},
        {"task_id": "task\xa0"},
        {"task_id": "ta sk"},
        {"task_id": "\u200btask"},
        {"task_id": ""},
        {"task_id": 7},
        {"task_id": "x" * MAX_ID_CHARS},
        {"task_id": "x" * (MAX_ID_CHARS + 1)},
        {"task_id": "é" * MAX_ID_CHARS},
        {"task_id": "tâche-😀"},
        {"agent": "a" * (MAX_NAME_CHARS + 1)},
        {"agent": ""},
        {"used": []},
        {"used": None},
        {"used": _DROP},
        {"used": [""]},
        {"used": [None]},
        {"used": [" csv-loader"]},
        {"used": ["s"] * MAX_SKILLS},
        {"used": ["s"] * (MAX_SKILLS + 1)},
        {"used": ["n" * (MAX_NAME_CHARS + 1)]},
        {"used": "csv-loader"},
        {"queries": None},
        {"queries": []},
        {"queries": [None]},
        {"queries": ["bare text"]},
        {"queries": [{"text": "q"}, "bare"]},
        {"queries": [{"text": "q", "other": 1}]},
        {"queries": [{"text": " q"}]},
        {"queries": [{"text": ""}]},
        {"queries": [{"text": None}]},
        {"queries": [{"retrieved": ["a"]}]},
        {"queries": [{"text": "q", "retrieved": None, "seeds": []}]},
        {"queries": [{"text": "q", "retrieved": [None]}]},
        {"queries": [{"text": "q", "seeds": ["s"] * (MAX_SKILLS + 1)}]},
        {"queries": [{"text": "q"}] * 64},
        {"queries": [{"text": "q"}] * 65},
        {"reward": 1},
        {"reward": 0},
        {"reward": -0.0},
        {"reward": 1.0000001},
        {"reward": -1e-300},
        {"reward": 5e-324},
        {"reward": 0.1},
        {"reward": True},
        {"reward": "1"},
        {"reward": None},
        {"reward": _DROP},
        {"reward": _DROP, "ctrf": {"results": {"summary": {"tests": 4, "passed": 3}}}},
        {"ctrf": {"results": {"summary": {"tests": 4, "passed": 3}}}},
        {"attempt": 0},
        {"attempt": MAX_ATTEMPT},
        {"attempt": MAX_ATTEMPT + 1},
        {"attempt": 1.0},
        {"attempt": True},
        {"attempt": 2**63},
        {"attempt": -(2**70)},
        {"timestamp": None},
        {"timestamp": _DROP},
        {"timestamp": "2026-02-29T00:00:00Z"},
        {"timestamp": "2024-02-29T00:00:00Z"},
        {"timestamp": "2026-11-29T23:59:60Z"},
        {"timestamp": "2026-11-29T24:00:00Z"},
        {"timestamp": "2026-11-29T01:02:03+01:00"},
        {"timestamp": "2026-11-29T01:02:03.250Z"},
        {"timestamp": "2026-11-29T01:02:03"},
        {"timestamp": "2026-11-29t01:02:03z"},
        {"timestamp": "1969-12-31T23:59:59Z"},
        {"timestamp": "1970-01-01T00:00:00Z"},
        {"timestamp": "2099-12-31T23:59:59Z"},
        {"timestamp": "2100-01-01T00:00:00Z"},
        {"timestamp": "2026-13-01T00:00:00Z"},
        {"timestamp": "yesterday"},
        {"timestamp": 1700000000},
        {"extra_key": 1},
        {"cost": {"usd": 0.25, "nested": [[[1]]]}},
    ]
    for k, patch in enumerate(patches):
        out.append(_line(**{"trace_id": f"c-{k}", **patch}))
    n = len(out)
    raw = [
        '{"trace_id": "r-1", "task_id": "k", "used": [], "reward": 1, "task_id": "k2"}',  # repeated key
        '{"trace_id": "r-2", "task_id": "k", "used": [], "reward": NaN}',
        '{"trace_id": "r-3", "task_id": "k", "used": [], "reward": Infinity}',
        '{"trace_id": "r-4", "task_id": "k", "used": [], "reward": 1e-400}',
        '{"trace_id": "r-5", "task_id": "k", "used": [], "reward": 1}{"trace_id": "r-5b", "task_id": "k"}',
        '{"trace_id": "r-6", "task_id": "k", "used": [], "reward": 1} trailing',
        '   {"trace_id": "r-7", "task_id": "k", "used": [], "reward": 1}   ',
        '{"trace_id": "r-8", "\\u0061gent": null, "task_id": "k", "used": [], "reward": 1}',
        '{"trace_id": "r-9", "\\u0061gent": "esc", "task_id": "k", "used": [], "reward": 1}',
        '{"trace_id": "r-10", "agent" : null, "task_id": "k", "used": [], "reward": 1}',
        '{"trace_id": "r-11", "task_id": "\\ud800", "used": [], "reward": 1}',
        '{"trace_id": "r-12", "task_id": "\\ud83d\\ude00", "used": [], "reward": 1}',
        '{"trace_id": "r-13", "task_id": "\\udc00x", "used": [], "reward": 1}',
        '{"trace_id": "r-14", "task_id": "k\\u0000", "used": [], "reward": 1}',
        '{"trace_id": "r-15", "task_id": "k\\n", "used": [], "reward": 1}',
        '{"trace_id": "r-16", "task_id": "a\\"b", "used": ["x\\\\y"], "reward": 1}',
        '{"trace_id": "r-17", "task_id": "k", "used": [], "reward": 1,}',
        "{'trace_id': 'r-18'}",
        '["r-19"]',
        '"r-20"',
        "null",
        "{}",
        '{"trace_id": "r-23", "task_id": "k", "used": [], "reward": 01}',
        '{"trace_id": "r-24", "task_id": "k", "used": [], "reward": 1, "x": ' + "[" * 40 + "]" * 40 + "}",
        '{"trace_id": "r-25", "task_id": "k", "used": [], "reward": 1}\r',
        '\ufeff{"trace_id": "r-26", "task_id": "k", "used": [], "reward": 1}',
        '{"trace_id": "r-27", "task_id": "k", "used": [], "reward": 1, "attempt": 1e0}',
        '{"trace_id": "r-28", "task_id": "k\u2028", "used": [], "reward": 1}',
        '{"trace_id": "r-29", "task_id": "k\x7f", "used": [], "reward": 1}',
        '{"trace_id": "r-30", "task_id": "k", "used": [], "reward": 1, '
        '"queries": [{"text": "a", "text": "b"}]}',
        '{"trace_id": "r-31", "task_id": "k", "used": [], "reward": 1, "queries": {"text": "a"}}',
        '{"trace_id": "r-32", "task_id": "k", "used": [], "reward": 1, "timestamp": "2026-11-29T01:02:03Z"}',
        '{"trace_id": "r-33", "task_id": "k", "used": [], "reward": 1, "timestamp": '
        '"\\u0032026-11-29T01:02:03Z"}',
    ]
    out += raw
    # the same id again: identical content (a duplicate), then different content (a conflict)
    out += [out[0], _line(trace_id="c-0", reward=0.5), out[n + 6]]
    rng = random.Random(7)
    out += [_line(trace_id=f"f-{i}", reward=rng.random() ** rng.choice([1, 3, 17])) for i in range(200)]
    return out


def _write(path: Path, lines: list[str], extra: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n" + extra)
    return path


def _ingest_both(
    demo_store: Path, tmp_path: Path, source: Path, window: str | None
) -> tuple[TraceStore, IngestReport, TraceStore, IngestReport]:
    out = []
    for fast in (True, False):
        root = tmp_path / f"store-{fast}"
        shutil.copytree(demo_store, root)
        traces = TraceStore(root)
        report = traces.ingest_batches(native_batches(source, 64, fast=fast), window=window)
        out += [traces, report]
    return out[0], out[1], out[2], out[3]


def _assert_same(demo_store: Path, tmp_path: Path, source: Path, window: str | None = None) -> IngestReport:
    fast, fast_report, slow, slow_report = _ingest_both(demo_store, tmp_path, source, window)
    assert fast_report.to_dict() == slow_report.to_dict()
    assert fast.windows() == slow.windows()
    for w in slow.windows():
        assert_frame_equal(fast.load(w), slow.load(w))
    folders = {p.name for p in slow.root.iterdir() if p.is_dir()}
    assert folders == {p.name for p in fast.root.iterdir() if p.is_dir()}
    for w in folders:
        strip = [{k: v for k, v in q.items() if k != "at"} for q in slow.quarantine(w)]
        assert [{k: v for k, v in q.items() if k != "at"} for q in fast.quarantine(w)] == strip
    return slow_report


def test_crafted_edges_give_the_models_rows_and_reasons(demo_store: Path, tmp_path: Path) -> None:
    lines = _crafted()
    source = _write(tmp_path / "in" / "crafted.jsonl", lines, b"\n   \n" + b"\xff{}\n" + b"{" * 10 + b"\n")
    report = _assert_same(demo_store, tmp_path, source)
    # trace_id null and absent derive the same id: one of them is a duplicate, as is the repeated first line
    assert report.accepted > 200 and report.rejected > 60 and report.duplicates == 2 and report.conflicts == 1


def test_vouches_for_valid_canonical_lines_and_leaves_the_doubtful(tmp_path: Path) -> None:
    """The fast path really takes the plain lines (else the equality above would hold trivially) and leaves
    every line needing the model's judgement."""
    plain = [_line(trace_id=f"p-{i}").encode() + b"\n" for i in range(2000)]
    doubtful = [
        _line(trace_id="d-1", agent=None),
        _line(trace_id="d-2", task_id=" padded"),
        _line(trace_id="d-3", timestamp="2026-11-29T01:02:03+01:00"),
        _line(trace_id="d-4", cost=1),
        _line(trace_id=_DROP),
        _line(trace_id="d-6", reward=float("nan")),
        '{"trace_id": "d-7", "task_id": "k", "used": [], "reward": 1}{"trace_id": "x"}',
        '{"trace_id": "d-8", "\\u0061ttempt": null, "task_id": "k", "used": [], "reward": 1}',
    ]
    assert len(columnar.vouch(plain).frame) == len(plain)
    lines = list(plain)
    at = [100 + 230 * k for k in range(len(doubtful))]
    for k, d in zip(at, doubtful, strict=True):
        lines.insert(k, d.encode() + b"\n")
    vouched = columnar.vouch(lines)
    taken = set(vouched.frame["_i"].to_list())
    assert not taken & set(at)
    # a refused chunk is halved down to PARSE_MIN_CHUNK lines: only lines near a refused one go along
    assert len(taken) >= len(plain) - 4 * columnar.PARSE_MIN_CHUNK * len(doubtful)
    assert vouched.refused <= 4 * columnar.PARSE_MIN_CHUNK * len(doubtful)


def test_fuzz_corpus_same_on_both_paths(demo_store: Path, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus", 3000, seed=3, valid_share=0.5)
    report = _assert_same(demo_store, tmp_path, corpus.sources["native"], window="fuzz")
    assert report.accepted > 100 and report.rejected > 100


def test_oversized_line_same_on_both_paths(demo_store: Path, tmp_path: Path) -> None:
    big = _line(trace_id="big", task_id="k", cost="x" * (MAX_LINE_BYTES + 10))
    edge = _line(trace_id="edge", cost="")
    edge = edge[:-1] + " " * (MAX_LINE_BYTES - len(edge.encode())) + "}"  # exactly the limit, newline over
    source = _write(tmp_path / "in" / "big.jsonl", [_line(trace_id="a"), big, edge, _line(trace_id="b")])
    report = _assert_same(demo_store, tmp_path, source)
    assert report.accepted == 2 and report.rejected == 2


def test_demo_traces_same_on_both_paths(demo_store: Path, tmp_path: Path) -> None:
    report = _assert_same(demo_store, tmp_path, DEMO_TRACES)
    assert report.accepted > 10


def _native_lines(records: list[TraceRecord], with_extra: bool) -> list[str]:
    out = []
    for r in records:
        obj = native_dict(r)
        if with_extra:
            obj |= {k: v for k, v in r.extra.items() if k not in obj}
        out.append(json.dumps(obj, ensure_ascii=with_extra))
    return out


@pytest.mark.shared
@pytest.mark.parametrize("with_extra", [False, True])
def test_real_traces_same_on_both_paths(
    shared_data: Path, demo_store: Path, tmp_path: Path, with_extra: bool
) -> None:
    traces = shared_data / "traces"
    records: list[TraceRecord] = []
    for path, fmt in (
        (traces / "skillsbench-trials", "skillsbench-trials"),
        (traces / "apibank", "apibank"),
        (traces / "toolbench-example", "toolbench"),
    ):
        records += [r for r in iter_records(path, fmt) if isinstance(r, TraceRecord)]
    assert len(records) > 100
    source = _write(tmp_path / "in" / "real.jsonl", _native_lines(records, with_extra))
    report = _assert_same(demo_store, tmp_path, source, window="real")
    assert report.accepted == len({r.trace_id for r in records})


def test_simulated_lines_are_all_vouched_for(demo_store: Path, tmp_path: Path) -> None:
    """What the simulator writes (the benchmark's input) never needs the model."""
    from segos_pipeline import SnapshotStore
    from segos_pipeline.evaluation.replay import load_queries
    from segos_pipeline.evaluation.simulate import SimulationConfig, simulate, to_native
    from segos_pipeline.paths import DEFAULT_QUERIES
    from segos_pipeline.retrieval.ranker import Retriever

    retriever = Retriever(SnapshotStore(demo_store).load())
    tasks = load_queries(DEFAULT_QUERIES).queries
    records = simulate(retriever, tasks, SimulationConfig(traces=300, seed=5))
    lines = [json.dumps(to_native(r)).encode() + b"\n" for r in records]
    vouched = columnar.vouch(lines)
    assert vouched.frame.height == len(lines) == 300 and vouched.refused == 0


def test_frames_from_both_paths_have_the_trace_schema(tmp_path: Path) -> None:
    source = _write(tmp_path / "in" / "few.jsonl", [_line(trace_id=f"s-{i}") for i in range(5)])
    frames = [next(native_batches(source, fast=fast)).frame for fast in (True, False)]
    assert frames[0].schema == frames[1].schema == pl.Schema(TRACE_SCHEMA)
    assert_frame_equal(frames[0], frames[1])


def test_input_the_fast_path_cannot_take_costs_a_probe_not_several_parses() -> None:
    """Every line with an extra key (left to the model): the first batch costs one parse and a probe, the
    next only a probe; a clean batch after them is taken whole again."""
    extra = [_line(trace_id=f"e-{i}", cost=i).encode() + b"\n" for i in range(4000)]
    reader = columnar.Reader()
    first = columnar.vouch(extra[:2000], reader)
    spent = reader.lines_read
    probe = max(2000 // columnar.PROBE_SHARE, 4 * columnar.PARSE_MIN_CHUNK)
    assert first.frame.height == 0 and first.refused == 2000 and reader.refusing
    assert spent <= 2000 + columnar.PARSE_BUDGET * probe
    second = columnar.vouch(extra[2000:], reader)
    assert second.frame.height == 0 and reader.lines_read - spent <= columnar.PARSE_BUDGET * probe
    plain = [_line(trace_id=f"p-{i}").encode() + b"\n" for i in range(2000)]
    third = columnar.vouch(plain, reader)
    assert third.frame.height == 2000 and not reader.refusing


def test_stored_ids_find_what_was_added() -> None:
    from segos_pipeline.evolution.ingest import StoredIds, id_hashes

    ids = StoredIds(id_hashes(pl.Series(["a", "b"])))
    ids.add(id_hashes(pl.Series(["z", "c"])))
    assert len(ids) == 4
    found = ids.contains(id_hashes(pl.Series(["c", "x", "a", "z", "y"])))
    assert found.tolist() == [True, False, True, True, False]


def test_colliding_id_hashes_never_lose_a_trace(demo_store: Path, tmp_path: Path, monkeypatch) -> None:
    """Every id given the same hash: each hash match is checked against the stored ids, so new traces are
    still stored and only true repeats count as duplicates (the same figures as with real hashes)."""
    import numpy as np

    from segos_pipeline.evolution import ingest

    source = _write(tmp_path / "in" / "crafted.jsonl", _crafted())
    reports = []
    for collide in (False, True):
        if collide:
            monkeypatch.setattr(ingest, "id_hashes", lambda s: np.zeros(len(s), dtype=np.uint64))
        root = tmp_path / f"store-{collide}"
        shutil.copytree(demo_store, root)
        traces = TraceStore(root)
        traces.ingest_batches(native_batches(source, 40))
        again = traces.ingest_batches(native_batches(source, 40))  # everything is a repeat now
        reports.append((traces.ingest_batches(native_batches(DEMO_TRACES, 7)).to_dict(), again.to_dict()))
        reports.append({w: traces.load(w).height for w in traces.windows()})
    assert reports[0] == reports[2] and reports[1] == reports[3]


def test_prefetched_keeps_order_raises_the_producers_error_and_stops_with_the_consumer() -> None:
    import threading

    from segos_pipeline.evolution.trace_batches import prefetched

    assert list(prefetched(iter(range(100)), depth=3)) == list(range(100))

    def failing():
        yield 1
        raise ValueError("bad batch")

    got = []
    with pytest.raises(ValueError, match="bad batch"):
        for item in prefetched(failing()):
            got.append(item)
    assert got == [1]

    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    stream = prefetched(endless(), depth=2)
    assert [next(stream) for _ in range(5)] == list(range(5))
    stream.close()  # the consumer stops: the producer thread ends too, a few items ahead at most
    assert not any(t.name == "ingest-prefetch" for t in threading.enumerate())
    assert len(produced) <= 5 + 2 + 1


def test_reader_schema_follows_the_contract() -> None:
    """The reader's schema is the model's keys (less `ctrf`, left to the model) with the trace table's types,
    and the whitespace set covers every character Python strips (none beyond the BMP)."""
    import sys

    from segos_pipeline.evolution.traces import NativeTrace, Query

    arrow = columnar.NATIVE_ARROW
    assert set(arrow.names) == set(NativeTrace.model_fields) - {"ctrf"}
    assert {f.name for f in arrow.field("queries").type.value_type} == set(Query.model_fields)
    frame = pl.from_arrow(arrow.empty_table())
    assert isinstance(frame, pl.DataFrame)
    assert all(TRACE_SCHEMA[k] == dtype for k, dtype in frame.schema.items())
    beyond = [c for c in range(0x10000, sys.maxunicode + 1) if chr(c).isspace()]
    assert not beyond and all(c in columnar.EDGE_WHITESPACE for c in " \t\n\x0b\x0c\r\x1c\x85\xa0\u3000")
