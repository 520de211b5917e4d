"""Trace contract validation, CTRF rewards, and per-window ingestion (idempotent, with quarantine)."""

import json

import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.traces import (
    TraceError,
    TraceRecord,
    ctrf_reward,
    native_line,
    native_row,
    record_of_row,
    validate_line,
)
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR

from ..conftest import demo_library_with_malformed

OK = {"trace_id": "t1", "task_id": "task", "queries": [{"text": "q"}], "used": ["a"], "reward": 1.0}


def parse_native(obj: object, source: str = "") -> TraceRecord:
    """One native object validated as the JSON line it stands for, as record_trace does."""
    return record_of_row(native_row(validate_line(native_line(obj)), source))


def test_ctrf_reward_keeps_every_outcome_in_the_denominator():
    summary = {"tests": 10, "passed": 7, "failed": 1, "skipped": 1, "pending": 1, "other": 0}
    assert ctrf_reward({"results": {"summary": summary}}) == 0.7
    assert ctrf_reward({"summary": summary}) == 0.7
    with pytest.raises(TraceError, match="no tests"):
        ctrf_reward({"results": {"summary": {"tests": 0, "passed": 0}}})
    with pytest.raises(TraceError, match="more passed"):
        ctrf_reward({"results": {"summary": {"tests": 1, "passed": 2}}})


def test_native_record_defaults_and_extras():
    r = parse_native({**OK, "model_cost": 0.3, "timestamp": "2026-11-29T02:00:00+01:00"}, "f:1")
    assert (r.agent, r.attempt, r.reward_source) == ("default", 1, "reward")
    assert r.timestamp == "2026-11-29T01:00:00Z" and r.extra == {"model_cost": 0.3}
    assert parse_native({**OK, "used": ["a", "b", "a"]}).used == ["a", "b"]  # first-use order
    r = parse_native(
        {k: v for k, v in OK.items() if k != "reward"}
        | {"ctrf": {"results": {"summary": {"tests": 4, "passed": 3}}}}
    )
    assert r.reward == 0.75 and r.reward_source == "ctrf"
    no_id = {k: v for k, v in OK.items() if k != "trace_id"}
    assert parse_native(no_id).trace_id == parse_native(dict(no_id)).trace_id  # stable derived id


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"task_id": None}, "task_id"),
        ({"reward": 1.7}, r"\[0, 1\]"),
        ({"reward": True}, r"\[0, 1\]"),
        ({"reward": None}, "missing `reward`"),
        ({"used": "a"}, "list of skill names"),
        ({"attempt": 0}, "positive integer"),
        ({"queries": [{"text": ""}]}, r"queries\[0\]\.text"),
        ({"timestamp": "yesterday"}, "ISO-8601"),
    ],
)
def test_invalid_records_say_why(patch, message):
    with pytest.raises(TraceError, match=message):
        parse_native({**OK, **patch})


@pytest.fixture
def store(tmp_path):
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, st)
    return st


@pytest.fixture
def store_with_malformed(tmp_path):
    """The demo library plus the malformed fixture, whose `duplicate-name` package is named `csv-loader`."""
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(demo_library_with_malformed(tmp_path / "lib"), st)
    return st


def test_demo_windows_ingest_idempotently_with_quarantine(store_with_malformed):
    store = store_with_malformed
    ts = TraceStore(store)
    first = ts.ingest(iter_records(DEMO_DIR / "traces", "native"))
    assert set(ts.windows()) == {"2026-11-27", "2026-11-28"}
    assert first.duplicates == 1  # t-0005 repeated in the second file
    assert first.quarantined == 3 and first.unknown_skills == {"pdf-magic-polisher": 1}
    reasons = " ".join(q["reason"] for q in ts.quarantine("unplaced"))
    assert "not valid JSON" in reasons and "task_id" in reasons and "1.7" in reasons
    sizes = {w: ts.load(w).height for w in ts.windows()}
    again = ts.ingest(iter_records(DEMO_DIR / "traces", "native"))
    assert again.accepted == 0 and again.quarantined == 0
    assert {w: ts.load(w).height for w in ts.windows()} == sizes
    t = ts.load("2026-11-28").filter(ts.load("2026-11-28")["trace_id"] == "t-0142").row(0, named=True)
    assert t["unknown_skills"] == ["pdf-magic-polisher"] and "pdf-magic-polisher" not in t["used"]
    # names were resolved to ids, preferring the package whose folder is named (not a duplicate `name`)
    used = ts.load("2026-11-27").explode("used")["used"].drop_nulls().unique().to_list()
    assert "data-wrangling/csv-loader" in used and "_malformed/duplicate-name" not in used


def test_explicit_window_and_unknown_window(store, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(OK) + "\n")
    ts = TraceStore(store)
    report = ts.ingest(iter_records(path, "native"), window="2026-12-01")
    assert report.windows["2026-12-01"]["accepted"] == 1
    from segos_pipeline.store.snapshot import SnapshotError

    with pytest.raises(SnapshotError, match="no traces ingested"):
        ts.load("2030-01-01")
    with pytest.raises(ValueError, match="invalid window"):
        ts.ingest([], window="../escape")


def test_record_without_timestamp_or_window_is_quarantined(store, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(OK) + "\n")
    report = TraceStore(store).ingest(iter_records(path, "native"))
    assert report.accepted == 0 and report.quarantined == 1


def test_quarantine_reasons_are_counted_by_whole_words():
    from segos_pipeline.evolution.ingest import reason_kind

    assert reason_kind("missing `task_id`: `task_id` must be a non-empty JSON string") == "missing `task_id`"
    assert reason_kind("`reward` must be a number in [0, 1], got 1.7 (reward: Input should be <= 1)") == (
        "`reward` must be a number in [0, 1], got 1.7…"
    )
    long = (
        "line is not valid JSON (control character (\\u0000-\\u001F) found while parsing a string at line 2)"
    )
    assert reason_kind(long) == "line is not valid JSON…"
    words = " ".join(["word"] * 40)
    kind = reason_kind(words)
    assert len(kind) <= 80 and kind.endswith("word…") and kind[:-1] == " ".join(["word"] * (len(kind) // 5))
