"""The trace contract (SPEC §7): one attempt of an agent at a task, validated into a typed record.

Native format, one JSON object a line (extra keys are kept in `extra`):

    {"trace_id": "t-0001", "task_id": "csv-report", "agent": "model-x/harness-y", "attempt": 1,
     "timestamp": "2026-11-29T02:00:00Z",
     "queries": [{"text": "...", "retrieved": ["csv-loader", ...], "seeds": ["csv-loader"]}],
     "used": ["csv-loader", "chart-plotter"],
     "reward": 1.0}

Skills are named by id or name and resolved against a version; unknown names are reported on the record
(and dropped from its skill lists), never a reason to lose the trace. Instead of `reward` a trace may carry
`ctrf` (a CTRF report): reward = passed / tests, where failed, skipped, pending and other all stay in the
denominator.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl

from ..text.names import SkillNames

NATIVE_KEYS = {
    "trace_id",
    "task_id",
    "agent",
    "attempt",
    "timestamp",
    "queries",
    "used",
    "reward",
    "ctrf",
    "simulated",
}
DEFAULT_AGENT = "default"

QUERY_STRUCT = pl.Struct({"text": pl.String, "retrieved": pl.List(pl.String), "seeds": pl.List(pl.String)})
TRACE_SCHEMA: dict[str, pl.DataType] = {
    "trace_id": pl.String,
    "task_id": pl.String,
    "agent": pl.String,
    "attempt": pl.Int64,
    "timestamp": pl.String,  # ISO-8601 UTC, or null
    "window": pl.String,
    "queries": pl.List(QUERY_STRUCT),  # retrieved/seeds are null when the trace did not record them
    "used": pl.List(pl.String),  # skill ids in first-use order
    "used_ordered": pl.Boolean,  # False when the source stores `used` without order (e.g. sorted)
    "reward": pl.Float64,
    "reward_source": pl.String,  # "reward" | "ctrf" | a format-specific note
    "unknown_skills": pl.List(pl.String),  # names that resolved to no skill of the version
    "source": pl.String,  # file:line the record came from
    "source_format": pl.String,  # native | skillsbench-trials | apibank | toolbench | simulated
    "simulated": pl.Boolean,  # True for traces written by the simulator: never reported as real
    "extra": pl.String,  # JSON of keys beyond the contract
}


class TraceError(ValueError):
    """A record that cannot be accepted; the message says why (it goes to the quarantine file)."""


@dataclass
class QueryRecord:
    text: str
    retrieved: list[str] | None = None
    seeds: list[str] | None = None


@dataclass
class TraceRecord:
    trace_id: str
    task_id: str
    used: list[str]
    reward: float
    queries: list[QueryRecord] = field(default_factory=list)
    agent: str = DEFAULT_AGENT
    attempt: int = 1
    timestamp: str | None = None
    window: str | None = None
    used_ordered: bool = True
    reward_source: str = "reward"
    unknown_skills: list[str] = field(default_factory=list)
    source: str = ""
    source_format: str = "native"
    simulated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "task_id": self.task_id,
            "agent": self.agent,
            "attempt": self.attempt,
            "timestamp": self.timestamp,
            "window": self.window,
            "queries": [{"text": q.text, "retrieved": q.retrieved, "seeds": q.seeds} for q in self.queries],
            "used": self.used,
            "used_ordered": self.used_ordered,
            "reward": self.reward,
            "reward_source": self.reward_source,
            "unknown_skills": self.unknown_skills,
            "source": self.source,
            "source_format": self.source_format,
            "simulated": self.simulated,
            "extra": json.dumps(self.extra, sort_keys=True, default=str) if self.extra else "",
        }


def trace_frame(records: list[TraceRecord]) -> pl.DataFrame:
    return pl.DataFrame([r.row() for r in records], schema=TRACE_SCHEMA)


def ctrf_reward(report: Any) -> float:
    """passed / tests of a CTRF report (`{"results": {"summary": {...}}}` or the summary itself)."""
    if not isinstance(report, dict):
        raise TraceError("`ctrf` must be a CTRF report object")
    summary = (
        report.get("results", report).get("summary")
        if isinstance(report.get("results", report), dict)
        else None
    )
    if not isinstance(summary, dict):
        raise TraceError("`ctrf` has no results.summary")
    passed, tests = summary.get("passed"), summary.get("tests")
    if not isinstance(passed, int) or not isinstance(tests, int) or passed < 0 or tests < 0:
        raise TraceError("`ctrf` summary needs integer `passed` and `tests`")
    if tests == 0:
        raise TraceError("`ctrf` summary has no tests, so no reward can be derived")
    if passed > tests:
        raise TraceError(f"`ctrf` summary has more passed ({passed}) than tests ({tests})")
    return passed / tests


def parse_timestamp(value: Any) -> str:
    if not isinstance(value, str):
        raise TraceError("`timestamp` must be an ISO-8601 string")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TraceError(f"`timestamp` is not ISO-8601: {value!r}") from exc
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _str_list(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise TraceError(f"`{key}` must be a list of skill names")
    return [v.strip() for v in value]


def _queries(value: Any) -> list[QueryRecord]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TraceError("`queries` must be a list")
    out = []
    for i, q in enumerate(value):
        if isinstance(q, str):
            q = {"text": q}
        if not isinstance(q, dict) or not isinstance(q.get("text"), str) or not q["text"].strip():
            raise TraceError(f"queries[{i}] needs a non-empty `text`")
        retrieved = (
            _str_list(q["retrieved"], f"queries[{i}].retrieved") if q.get("retrieved") is not None else None
        )
        seeds = _str_list(q["seeds"], f"queries[{i}].seeds") if q.get("seeds") is not None else None
        out.append(QueryRecord(q["text"], retrieved, seeds))
    return out


def derived_trace_id(obj: dict[str, Any]) -> str:
    """A stable id for a record that has none, so re-ingesting the same line is still idempotent."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return "h-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def parse_native(obj: Any, source: str = "") -> TraceRecord:
    """Validate one native-format object into a record (skill names not yet resolved)."""
    if not isinstance(obj, dict):
        raise TraceError("a trace must be a JSON object")
    task_id = obj.get("task_id")
    if not isinstance(task_id, str | int) or not str(task_id).strip():
        raise TraceError("missing `task_id`")
    trace_id = obj.get("trace_id")
    if trace_id is None:
        trace_id = derived_trace_id(obj)
    elif not isinstance(trace_id, str | int) or not str(trace_id).strip():
        raise TraceError("`trace_id` must be a non-empty string")
    attempt = obj.get("attempt", 1)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise TraceError("`attempt` must be a positive integer")
    agent = obj.get("agent", DEFAULT_AGENT)
    if not isinstance(agent, str) or not agent.strip():
        raise TraceError("`agent` must be a non-empty string")
    if "used" not in obj:
        raise TraceError("missing `used` (the skills the agent used, in first-use order)")
    used = _str_list(obj["used"], "used")
    reward, reward_source = obj.get("reward"), "reward"
    if reward is None:
        if "ctrf" not in obj:
            raise TraceError("missing `reward` (or a `ctrf` report to derive it from)")
        reward, reward_source = ctrf_reward(obj["ctrf"]), "ctrf"
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not 0.0 <= float(reward) <= 1.0:
        raise TraceError(f"`reward` must be a number in [0, 1], got {reward!r}")
    timestamp = parse_timestamp(obj["timestamp"]) if obj.get("timestamp") is not None else None
    return TraceRecord(
        trace_id=str(trace_id).strip(),
        task_id=str(task_id).strip(),
        used=list(dict.fromkeys(used)),  # first-use order: later repeats add nothing
        reward=float(reward),
        queries=_queries(obj.get("queries")),
        agent=agent.strip(),
        attempt=attempt,
        timestamp=timestamp,
        reward_source=reward_source,
        source=source,
        # The simulator marks what it writes; the flag survives ingestion so simulated traces are never
        # mistaken for real ones.
        simulated=obj.get("simulated") is True,
        source_format="simulated" if obj.get("simulated") is True else "native",
        extra={k: v for k, v in obj.items() if k not in NATIVE_KEYS},
    )


def resolve_skills(record: TraceRecord, names: SkillNames) -> TraceRecord:
    """Replace skill names by ids of the version; unknown names are moved to `unknown_skills`.

    A name shared by several packages resolves to the first id (sorted), deterministically.
    """
    unknown: list[str] = []

    def ids(refs: list[str] | None) -> list[str] | None:
        if refs is None:
            return None
        out = []
        for ref in refs:
            found = names.resolve_one(ref)
            if found is None:
                unknown.append(ref)
            else:
                out.append(names.ids[found])
        return list(dict.fromkeys(out))

    record.used = ids(record.used) or []
    for q in record.queries:
        q.retrieved, q.seeds = ids(q.retrieved), ids(q.seeds)
    record.unknown_skills = sorted(set(unknown))
    return record


def window_of(record: TraceRecord) -> str | None:
    """The daily window (UTC date) a record's timestamp places it in."""
    return record.timestamp[:10] if record.timestamp else None
