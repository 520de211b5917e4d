"""Both ways a trace enters segos meet one contract: the same trace sent as MCP `record_trace` arguments (the
real server, through the SDK's client), passed to `SegosService.record_trace`, and written as a line of a
file for `segos ingest` (columnar fast path and per-line model) is accepted or rejected alike, with the same
reason and, once ingested, the same normalised values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import polars as pl
import pytest
from mcp import Client

from segos_pipeline.config import (
    MAX_ATTEMPT,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_QUERIES,
    MAX_SKILLS,
    MAX_TEXT_CHARS,
)
from segos_pipeline.evolution import columnar
from segos_pipeline.evolution.trace_batches import native_batches
from segos_pipeline.evolution.traces import (
    CANONICAL_YEARS,
    NATIVE_DEFAULTS,
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    NativeTrace,
    TraceError,
    parse_timestamp,
)
from segos_pipeline.service.api import SegosService
from segos_pipeline.service.errors import TraceRejected
from segos_pipeline.service.mcp_server import build_server

CTRF = {"results": {"summary": {"tests": 4, "passed": 3}}}
BASE: dict[str, Any] = {
    "task_id": "task",
    "queries": [{"text": "load the csv", "retrieved": ["csv-loader"], "seeds": ["csv-loader"]}],
    "used": ["csv-loader", "chart-plotter", "csv-loader"],
    "reward": 1.0,
}
_DROP = object()

# (name, patch of BASE): every edge an agent's arguments can reach; each becomes its own trace.
PATCHES: list[tuple[str, dict[str, Any]]] = [
    ("plain", {}),
    ("reward-int", {"reward": 1}),
    ("reward-zero", {"reward": 0}),
    ("reward-string", {"reward": "0.5"}),
    ("reward-bool", {"reward": True}),
    ("reward-over", {"reward": 1.5}),
    ("reward-under", {"reward": -0.1}),
    ("reward-tiny-over", {"reward": 1.0000001}),
    ("ctrf-only", {"reward": _DROP, "ctrf": CTRF}),
    ("ctrf-and-reward", {"ctrf": CTRF}),
    ("ctrf-no-tests", {"reward": _DROP, "ctrf": {"summary": {"tests": 0, "passed": 0}}}),
    ("no-reward", {"reward": _DROP}),
    ("task-padded", {"task_id": "  task  "}),
    ("task-empty", {"task_id": ""}),
    ("task-blank", {"task_id": "   "}),
    ("task-int", {"task_id": 7}),
    ("task-max", {"task_id": "x" * MAX_ID_CHARS}),
    ("task-over", {"task_id": "x" * (MAX_ID_CHARS + 1)}),
    ("task-max-padded", {"task_id": " " + "x" * MAX_ID_CHARS + " "}),  # the bound is on the stripped id
    ("agent", {"agent": "model-x/harness-y"}),
    ("agent-empty", {"agent": ""}),
    ("agent-over", {"agent": "a" * (MAX_NAME_CHARS + 1)}),
    ("attempt-2", {"attempt": 2}),
    ("attempt-zero", {"attempt": 0}),
    ("attempt-max", {"attempt": MAX_ATTEMPT}),
    ("attempt-over", {"attempt": MAX_ATTEMPT + 1}),
    ("attempt-float", {"attempt": 2.0}),
    ("attempt-string", {"attempt": "2"}),
    ("attempt-bool", {"attempt": True}),
    ("used-empty", {"used": []}),
    ("used-blank-name", {"used": [""]}),
    ("used-padded-name", {"used": [" csv-loader "]}),
    ("used-int", {"used": [1]}),
    ("used-string", {"used": "csv-loader"}),
    ("used-unknown", {"used": ["no-such-skill", "csv-loader"]}),
    ("used-max", {"used": [f"s{i}" for i in range(MAX_SKILLS)]}),
    ("used-over", {"used": [f"s{i}" for i in range(MAX_SKILLS + 1)]}),
    ("used-name-over", {"used": ["n" * (MAX_NAME_CHARS + 1)]}),
    ("queries-bare", {"queries": ["bare text", {"text": "q"}]}),
    ("queries-empty", {"queries": []}),
    ("queries-padded", {"queries": ["  q  "]}),
    ("queries-blank", {"queries": [{"text": ""}]}),
    ("queries-null", {"queries": [None]}),
    ("queries-int-text", {"queries": [{"text": 1}]}),
    ("queries-extra-key", {"queries": [{"text": "q", "other": 1}]}),
    ("queries-max", {"queries": ["q"] * MAX_QUERIES}),
    ("queries-over", {"queries": ["q"] * (MAX_QUERIES + 1)}),
    ("queries-text-max-padded", {"queries": [" " + "q" * MAX_TEXT_CHARS]}),
    ("queries-text-over", {"queries": ["q" * (MAX_TEXT_CHARS + 1)]}),
    ("trace-id-padded", {"trace_id": " tid "}),
    ("trace-id-empty", {"trace_id": ""}),
]
# Timestamps reach the service's record_trace (the MCP tool stamps the time of the call itself).
TIMESTAMPS = [
    "2026-11-29T01:02:03Z",
    "2026-11-29T01:02:03+05:00",
    "2026-11-29T01:02:03.250Z",
    "2026-11-29T01:02:03",
    "2026-11-29",
    "2026-11-29 01:02:03Z",
    "1969-12-31T23:59:59-01:00",
    "1969-12-31T23:59:59Z",
    "2099-12-31T23:59:59Z",
    "2100-01-01T00:00:00Z",
    "2026-02-29T00:00:00Z",
    "2026-11-29T23:59:60Z",
    "2026-11-29T24:00:00Z",
    "2026-11-29t01:02:03z",
    "2026-11-29T1\u0661:02:03Z",
    " 2026-11-29T01:02:03Z",
    "",
    "yesterday",
]
COMPARED = (
    "trace_id",
    "task_id",
    "agent",
    "attempt",
    "queries",
    "used",
    "reward",
    "reward_source",
    "simulated",
)


def _cases() -> list[dict[str, Any]]:
    out = []
    for name, patch in PATCHES:
        case = {"trace_id": f"p-{name}", "timestamp": TIMESTAMPS[0], **BASE, **patch}
        out.append({k: v for k, v in case.items() if v is not _DROP})
    for i, ts in enumerate(TIMESTAMPS):
        out.append({"trace_id": f"ts-{i}", **BASE, "timestamp": ts})
    return out


def _ingested(folder: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Rows (by trace_id) and rejection reasons (by line) of every JSONL file under `folder`, as `segos
    ingest` validates them; the fast and the per-line path must agree."""
    both = []
    for fast in (True, False):
        frames, reasons = [], {}
        for batch in native_batches(folder, 16, fast=fast):
            frames.append(batch.frame)
            reasons.update({r.source: r.reason for r in batch.rejected})
        both.append((pl.concat(frames), reasons))
    (fast_rows, fast_reasons), (slow_rows, slow_reasons) = both
    assert fast_rows.sort("trace_id").equals(slow_rows.sort("trace_id")) and fast_reasons == slow_reasons
    return {r["trace_id"]: r for r in fast_rows.iter_rows(named=True)}, fast_reasons


def _file_side(tmp_path: Path, cases: list[dict[str, Any]]) -> dict[str, tuple[str, Any]]:
    """Each case written as a line of a file and ingested: ("ok", row) or ("rejected", reason)."""
    folder = tmp_path / "file"
    folder.mkdir()
    path = folder / "traces.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    rows, reasons = _ingested(folder)
    out: dict[str, tuple[str, Any]] = {}
    for lineno, case in enumerate(cases, 1):
        key = case["trace_id"]
        reason = reasons.get(f"{path}:{lineno}")
        if reason is not None:
            out[key] = ("rejected", reason)
        else:
            stripped = key.strip()  # the stored id is the stripped one
            out[key] = ("ok", rows[stripped])
    return out


def _arguments(case: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in case.items() if k != "timestamp"}


@pytest.fixture
def file_side(tmp_path: Path) -> tuple[list[dict[str, Any]], dict[str, tuple[str, Any]]]:
    cases = _cases()
    return cases, _file_side(tmp_path, cases)


def _same_values(got: dict[str, Any], want: dict[str, Any], *, timestamp: bool) -> None:
    keys = COMPARED + (("timestamp",) if timestamp else ())
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}, want["trace_id"]
    extra = {k: v for k, v in json.loads(got["extra"] or "{}").items() if k != "served_version"}
    assert extra == json.loads(want["extra"] or "{}"), want["trace_id"]


def test_service_record_trace_and_file_ingest_agree(demo_store: Path, tmp_path: Path, file_side) -> None:
    cases, expected = file_side
    service = SegosService(demo_store, landing=tmp_path / "service-landing", reload="sync")
    accepted = set()
    for case in cases:
        key = case["trace_id"]
        kind, want = expected[key]
        try:
            reply = service.record_trace(**_arguments(case), timestamp=case["timestamp"])
        except TraceRejected as exc:
            assert kind == "rejected", f"{key}: record_trace refused what a file line passes: {exc}"
            assert str(exc) == f"trace rejected: {want}", key
        else:
            assert kind == "ok", f"{key}: record_trace accepted what ingest quarantines: {want}"
            assert reply["reward"] == want["reward"] and reply["window"] == (want["timestamp"] or "")[:10]
            accepted.add(want["trace_id"])
    rows, reasons = _ingested(service.landing)
    assert not reasons and set(rows) == accepted  # what record_trace took is ingested without quarantine
    by_id = {row["trace_id"]: row for kind, row in expected.values() if kind == "ok"}
    for key in accepted:
        _same_values(rows[key], by_id[key], timestamp=True)
    assert len(accepted) >= 25 and len(cases) - len(accepted) >= 25  # both sides of the contract exercised


def _call_all(app: Any, cases: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    async def scenario() -> dict[str, tuple[bool, str]]:
        out = {}
        async with Client(app) as client:
            for case in cases:
                result = await client.call_tool("record_trace", _arguments(case))
                out[case["trace_id"]] = (result.is_error, result.content[0].text)  # type: ignore[union-attr]
        return out

    return anyio.run(scenario)


def test_mcp_record_trace_and_file_ingest_agree(demo_store: Path, tmp_path: Path, file_side) -> None:
    """Through the MCP server: the SDK checks each argument's JSON type strictly (no coercion, as in a file)
    and nothing else; every value rule is the contract's, with its own reason."""
    cases, expected = file_side
    cases = [c for c in cases if c["trace_id"].startswith("p-")]
    service = SegosService(demo_store, landing=tmp_path / "mcp-landing", reload="sync")
    replies = _call_all(build_server(service), cases)
    accepted = set()
    for case in cases:
        key = case["trace_id"]
        kind, want = expected[key]
        is_error, text = replies[key]
        if is_error:
            assert kind == "rejected", f"{key}: MCP refused what a file line passes: {text}"
            # the contract's own reason, or the SDK's type check naming the same argument
            field = want.split("`")[1] if "`" in want else None
            assert want in text or (
                text.startswith("invalid arguments for record_trace:") and field in text
            ), (
                key,
                text,
                want,
            )
        else:
            assert kind == "ok", f"{key}: MCP accepted what ingest quarantines: {want}"
            accepted.add(json.loads(text)["trace_id"])
    rows, reasons = _ingested(service.landing)
    assert not reasons and set(rows) == accepted
    by_id = {row["trace_id"]: row for kind, row in expected.values() if kind == "ok"}
    for key in accepted:
        _same_values(rows[key], by_id[key], timestamp=False)


def test_the_timestamp_rule_is_stated_once() -> None:
    """The canonical form the fast path keeps as given is the model's own: its years are those of the
    contract's range (which starts and ends on a new year), and a canonical timestamp is kept as it is."""
    assert TIMESTAMP_MIN.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0) == TIMESTAMP_MIN
    assert TIMESTAMP_MAX.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0) == TIMESTAMP_MAX
    assert (str(TIMESTAMP_MIN.year), str(TIMESTAMP_MAX.year - 1)) == CANONICAL_YEARS
    for ts in (f"{CANONICAL_YEARS[0]}-01-01T00:00:00Z", f"{CANONICAL_YEARS[1]}-12-31T23:59:59Z"):
        assert parse_timestamp(ts) == ts
    for ts in (
        f"{int(CANONICAL_YEARS[0]) - 1}-12-31T23:59:59Z",
        f"{int(CANONICAL_YEARS[1]) + 1}-01-01T00:00:00Z",
    ):
        with pytest.raises(TraceError, match="out of range"):
            parse_timestamp(ts)
    # the defaults the fast path fills in for absent keys are the model's
    line = json.dumps({"trace_id": "t", "task_id": "k", "used": [], "reward": 1}).encode() + b"\n"
    assert columnar.vouch([line] * 64).frame.height == 64  # the fast path takes such lines
    model = NativeTrace.model_validate_json(line)
    assert (
        NATIVE_DEFAULTS
        == {k: getattr(model, k) for k in NATIVE_DEFAULTS}
        == {
            "agent": "default",
            "attempt": 1,
            "simulated": False,
        }
    )


def test_extra_cannot_set_a_trace_field(demo_store: Path, tmp_path: Path) -> None:
    """`extra` carries keys beyond the contract; a contract key there would bypass its argument."""
    service = SegosService(demo_store, landing=tmp_path / "landing", reload="sync")
    with pytest.raises(TraceRejected, match=r"`extra` may not set trace fields \(attempt, reward\)"):
        service.record_trace("t", ["q"], ["csv-loader"], extra={"attempt": 3, "reward": 0.5, "note": 1})
    assert not service.landing.exists()
    reply = service.record_trace("t", ["q"], ["csv-loader"], 1.0, extra={"note": "kept"})
    row = _ingested(service.landing)[0][reply["trace_id"]]
    assert json.loads(row["extra"])["note"] == "kept" and row["attempt"] == 1
