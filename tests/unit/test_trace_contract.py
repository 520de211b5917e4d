"""The trace contract (pydantic model + shipped JSON Schema) and ingestion that quarantines, never aborts:
each poison line a user found, through the real `segos ingest`; conflicts; streamed parts; record_trace
accepting only what ingest accepts."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segos_pipeline.cli import main
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.traces import (
    MAX_ATTEMPT,
    MAX_ID_CHARS,
    MAX_LINE_BYTES,
    TRACE_SCHEMA,
    TraceError,
    trace_json_schema,
    validate_line,
)
from segos_pipeline.paths import DEMO_DIR
from segos_pipeline.service.api import SegosService
from segos_pipeline.service.errors import TraceRejected

GOOD = {
    "task_id": "csv-report",
    "timestamp": "2026-11-29T02:00:00Z",
    "queries": [{"text": "load the sales csv", "retrieved": ["csv-loader"], "seeds": ["csv-loader"]}],
    "used": ["csv-loader"],
    "reward": 1.0,
}


def good(i: int, **patch) -> dict:
    return {**GOOD, "trace_id": f"good-{i}", **patch}


def run(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def store(demo_store_copy: Path) -> Path:
    return demo_store_copy


# ------------------------------------------------------------------------------------------ the schema


def test_shipped_schema_is_generated_from_the_model():
    shipped = resources.files("segos_pipeline.evolution").joinpath("trace.schema.json")  # as installed
    assert json.loads(shipped.read_text(encoding="utf-8")) == trace_json_schema()
    schema = trace_json_schema()
    assert schema["properties"]["attempt"]["maximum"] == MAX_ATTEMPT
    assert schema["properties"]["task_id"]["maxLength"] == MAX_ID_CHARS
    assert set(schema["required"]) == {"task_id", "used"}


def test_trace_schema_command_prints_the_schema():
    result = run("trace-schema")
    assert result.exit_code == 0 and json.loads(result.stdout) == trace_json_schema()


# ---------------------------------------------------------------------------- poison lines, real CLI

POISON = {
    "huge_attempt": ('{"trace_id": "p1", "attempt": 1180591620717411303424, %s', "`attempt`"),
    "lone_surrogate": ('{"trace_id": "p2", "task_id": "\\ud800", %s', "not valid JSON"),
    "year_one": ('{"trace_id": "p3", "timestamp": "0001-01-01T00:00:00+05:00", %s', "`timestamp`"),
    "deep": ('{"trace_id": "p4", "x": ' + "[" * 5000 + "]" * 5000 + ", %s", "nests 5001 levels"),
    "integer_id": ('{"trace_id": 0, %s', "`trace_id` must be a non-empty JSON string"),
    "long_line": ('{"trace_id": "p6", "pad": "' + "x" * (MAX_LINE_BYTES + 10) + '", %s', "-byte limit"),
    "invalid_utf8": ('{"trace_id": "p7", "agent": "\xff\xfe", %s', "not valid JSON"),
}


def _poison_line(template: str) -> bytes:
    rest = json.dumps({k: v for k, v in GOOD.items() if k != "trace_id"})[1:]  # without the opening brace
    if "task_id" in template:
        rest = json.dumps({k: v for k, v in GOOD.items() if k != "task_id"})[1:]
    if "timestamp" in template:
        rest = json.dumps({k: v for k, v in GOOD.items() if k != "timestamp"})[1:]
    text = template.replace("%s", rest)
    return text.encode("latin-1") if "\xff" in text else text.encode()


@pytest.mark.parametrize("name", sorted(POISON))
def test_poison_line_is_quarantined_and_the_good_ones_ingested(store: Path, tmp_path: Path, name: str):
    template, reason = POISON[name]
    path = tmp_path / "traces.jsonl"
    lines = [json.dumps(good(0)).encode(), _poison_line(template), json.dumps(good(1)).encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = run("ingest", path, "--store", store, "--json")
    assert result.exit_code == 0, result.output + repr(result.exception)
    report = json.loads(result.stdout)
    assert (report["read"], report["accepted"], report["rejected"]) == (3, 2, 1)
    ts = TraceStore(store)
    assert sorted(ts.load("2026-11-29")["trace_id"].to_list()) == ["good-0", "good-1"]
    (q,) = ts.quarantine("unplaced")
    assert q["source"].endswith("traces.jsonl:2") and reason in q["reason"], q["reason"]
    assert len(q["raw"]) <= 2000


def test_all_poison_lines_in_one_file(store: Path, tmp_path: Path):
    path = tmp_path / "traces.jsonl"
    lines = [json.dumps(good(i)).encode() for i in range(3)]
    lines[1:1] = [_poison_line(t) for t, _ in POISON.values()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = run("ingest", path, "--store", store)
    assert result.exit_code == 0, result.output
    assert f"read {len(lines)}: 3 accepted" in result.output
    assert len(TraceStore(store).quarantine("unplaced")) == len(POISON)


# -------------------------------------------------------------------------------- ids and conflicts


def test_same_id_different_content_is_a_quarantined_conflict(store: Path, tmp_path: Path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps(good(1)) + "\n" + json.dumps(good(2)) + "\n")
    # same id and content (a duplicate); same id, other reward (a conflict, also inside one file)
    second.write_text(
        "\n".join(
            json.dumps(x) for x in (good(1), good(2, reward=0.0), good(3), good(3, used=["chart-plotter"]))
        )
        + "\n"
    )
    ts = TraceStore(store)
    ts.ingest_path(first)
    report = ts.ingest_path(second)
    assert (report.accepted, report.duplicates, report.conflicts, report.rejected) == (1, 1, 2, 2)
    conflicts = ts.quarantine("2026-11-29")
    assert {q["source"].rsplit(":", 1)[1] for q in conflicts} == {"2", "4"}
    assert all(q["reason"].startswith("conflict: trace id") for q in conflicts)
    assert "reward differ" in conflicts[0]["reason"] and "used differ" in conflicts[1]["reason"]
    table = ts.load("2026-11-29")
    assert table.filter(pl.col("trace_id") == "good-2")["reward"].to_list() == [1.0]  # the first stays
    again = ts.ingest_path(second)  # idempotent: nothing new, no quarantine entry repeated
    assert (again.accepted, again.quarantined, again.conflicts) == (0, 0, 2)


def test_integer_and_string_zero_ids_cannot_collide(store: Path, tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({**GOOD, "trace_id": 0}) + "\n" + json.dumps({**GOOD, "trace_id": "0"}) + "\n")
    report = TraceStore(store).ingest_path(path)
    assert (report.accepted, report.rejected, report.duplicates) == (1, 1, 0)
    with pytest.raises(TraceError, match="integer ids are rejected"):
        validate_line(json.dumps({**GOOD, "task_id": 7}))


# ---------------------------------------------------------------------------- streaming and the layout


def test_batches_append_parts_and_scan_reads_them(store: Path, tmp_path: Path):
    path = tmp_path / "t.jsonl"
    rows = [good(i, used=["csv-loader", "no-such-skill", "csv-loader"]) for i in range(25)]
    rows[7] = {**rows[7], "reward": 3}  # one bad line in the second batch
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ts = TraceStore(store)
    report = ts.ingest_path(path, batch_size=10)
    assert (report.read, report.accepted, report.rejected) == (25, 24, 1)
    assert report.unknown_skills == {"no-such-skill": 24}
    parts = sorted((ts.window_dir("2026-11-29") / "parts").glob("*.parquet"))
    assert len(parts) == 3
    lazy = ts.scan("2026-11-29")
    assert isinstance(lazy, pl.LazyFrame) and lazy.collect_schema() == pl.Schema(TRACE_SCHEMA)
    table = ts.load("2026-11-29")
    assert table.schema == pl.Schema(TRACE_SCHEMA) and table.height == 24
    row = table.row(0, named=True)
    assert row["used"] == ["data-wrangling/csv-loader"] and row["unknown_skills"] == ["no-such-skill"]
    assert row["queries"][0]["retrieved"] == ["data-wrangling/csv-loader"]


def test_streamed_native_path_matches_the_record_path(store: Path, tmp_path: Path):
    """The columnar native path and the per-record path (what adapters use) store identical tables."""
    a, b = TraceStore(store), TraceStore(tmp_path / "other")
    import shutil

    shutil.copytree(store / "versions", tmp_path / "other" / "versions")
    a.ingest_path(DEMO_DIR / "traces")
    b.ingest(iter_records(DEMO_DIR / "traces", "native"))
    for w in a.windows():
        left, right = a.load(w).drop("source"), b.load(w).drop("source")
        assert left.equals(right), w
    assert a.windows() == b.windows() == ["2026-11-27", "2026-11-28"]
    reasons = [sorted(q["reason"] for q in ts.quarantine("unplaced")) for ts in (a, b)]
    assert reasons[0] == reasons[1] and len(reasons[0]) == 3


def test_legacy_whole_window_table_is_still_read(store: Path, tmp_path: Path):
    ts = TraceStore(store)
    ts.ingest_path(DEMO_DIR / "traces" / "2026-11-27.jsonl")
    folder = ts.window_dir("2026-11-27")
    table = ts.load("2026-11-27")
    for part in (folder / "parts").glob("*.parquet"):
        part.unlink()
    table.write_parquet(folder / "traces.parquet")  # the layout before parts
    assert ts.load("2026-11-27").equals(table)
    again = ts.ingest_path(DEMO_DIR / "traces" / "2026-11-27.jsonl")
    assert again.accepted == 0 and again.duplicates == table.height


# ------------------------------------------------------------------------------------- record_trace


@pytest.fixture
def service(store: Path, tmp_path: Path) -> SegosService:
    return SegosService(store, landing=tmp_path / "landing", reload="sync")


def test_record_trace_rejects_what_ingest_would_quarantine(service: SegosService):
    for kwargs, reason in [
        ({"attempt": 2**70}, "`attempt`"),
        ({"trace_id": "x" * 3_000_000}, "-byte limit"),
        ({"trace_id": "x" * 1_000}, "`trace_id`"),
        ({"used": ["s" * 5_000_000]}, "-byte limit"),
        ({"used": ["s" * 1_000]}, "`used`"),
        ({"agent": "a" * 300}, "`agent`"),
        ({"queries": ["q" * 10_000_000]}, "-byte limit"),
        ({"task_id": "\ud800"}, "lone surrogate"),
    ]:
        args = {"task_id": "t", "queries": ["q"], "used": ["csv-loader"], "reward": 1.0, **kwargs}
        with pytest.raises(TraceRejected, match=reason) as err:
            service.record_trace(**args)
        assert len(str(err.value)) < 1000  # never echoes the input back
    assert not service.landing.exists() or not any(service.landing.iterdir())


def test_record_trace_reply_is_bounded(service: SegosService):
    unknown = [f"no-such-skill-{i}-" + "x" * 200 for i in range(500)]
    reply = service.record_trace("t", ["q" * 30_000], unknown, 1.0, trace_id="i" * MAX_ID_CHARS)
    assert reply["unknown_skills_count"] == 500 and len(reply["unknown_skills"]) == 20
    assert len(json.dumps(reply)) < 8_000


_text = st.text(min_size=0, max_size=40)
_names = st.lists(_text, max_size=6)
_query = st.one_of(
    _text, st.fixed_dictionaries({"text": _text}, optional={"retrieved": _names, "seeds": _names})
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_id=_text,
    queries=st.lists(_query, max_size=4),
    used=_names,
    reward=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 3)),
    attempt=st.one_of(st.none(), st.integers(-5, 2**72)),
    agent=st.one_of(st.none(), _text),
    trace_id=st.one_of(st.none(), _text),
    ctrf=st.one_of(st.none(), st.fixed_dictionaries({"summary": st.dictionaries(_text, st.integers(-1, 5))})),
)
def test_what_record_trace_accepts_ingest_accepts(
    tmp_path_factory, demo_store, task_id, queries, used, reward, attempt, agent, trace_id, ctrf
):
    """Random payloads: every one record_trace accepts is ingested without quarantine (a rejected one
    writes nothing)."""
    root = tmp_path_factory.mktemp("prop")
    (root / "store").mkdir()
    # traces are written beside the versions, not into them
    (root / "store" / "versions").symlink_to(demo_store / "versions")
    service = SegosService(root / "store", landing=root / "landing", reload="sync")
    try:
        service.record_trace(task_id, queries, used, reward, ctrf, agent, trace_id=trace_id, attempt=attempt)
    except TraceRejected:
        assert not (root / "landing").exists() or not any((root / "landing").iterdir())
        return
    report = TraceStore(root / "store").ingest_path(root / "landing")
    assert (report.read, report.accepted, report.rejected) == (1, 1, 0), TraceStore(
        root / "store"
    ).quarantine("unplaced")


def test_validate_line_bounds_before_parsing():
    with pytest.raises(TraceError, match="nests 41 levels"):
        validate_line('{"task_id": "t", "used": [], "reward": 1, "x": ' + "[" * 40 + "]" * 40 + "}")
    # brackets inside strings are not nesting
    ok = validate_line(json.dumps({"task_id": "t", "used": [], "reward": 1, "x": "[" * 100}))
    assert ok.task_id == "t"


def test_both_paths_store_non_ascii_extras_alike(store: Path, tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good(1, note="café ✓", cost={"usd": 0.5})) + "\n", encoding="utf-8")
    a = TraceStore(store)
    a.ingest_path(path, window="fast")
    a.ingest(iter_records(path, "native"), window="slow")
    fast, slow = a.load("fast").row(0, named=True), a.load("slow").row(0, named=True)
    assert fast["extra"] == slow["extra"] and json.loads(fast["extra"])["note"] == "café ✓"
