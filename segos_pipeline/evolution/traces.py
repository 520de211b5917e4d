"""The trace contract (SPEC §7): one attempt of an agent at a task, validated into a typed record.

Native format, one JSON object a line (extra keys are kept in `extra`):

    {"trace_id": "t-0001", "task_id": "csv-report", "agent": "model-x/harness-y", "attempt": 1,
     "timestamp": "2026-11-29T02:00:00Z",
     "queries": [{"text": "...", "retrieved": ["csv-loader", ...], "seeds": ["csv-loader"]}],
     "used": ["csv-loader", "chart-plotter"],
     "reward": 1.0}

The contract is one pydantic model, `NativeTrace`; its JSON Schema ships as `trace.schema.json` beside this
module (`segos trace-schema` prints it). Every way a trace enters segos goes through it: `segos ingest`
validates each line with `validate_line` (pydantic-core's Rust JSON parser and validator, strict types) or,
for the lines it can vouch for, with `columnar.py`, which accepts exactly what the model accepts and leaves
it every line in doubt; `record_trace` (MCP) serialises its arguments to the line it would append and
validates that same line, and records made by the adapters of other formats are checked with
`check_record`. A record that fails gets a one-sentence reason (the quarantine row), never an exception
that stops the rest.

Choices the contract makes (docs/data-contracts.md lists every bound):
- ids (`trace_id`, `task_id`) are JSON strings; an integer id is rejected with a reason, so `0` and `"0"`
  can never name two traces or collide as one;
- integers and list sizes have ranges (`attempt` 1..MAX_ATTEMPT); strings are stripped, non-empty, at most
  MAX_ID_CHARS / MAX_NAME_CHARS / MAX_TEXT_CHARS characters; a line is at most MAX_LINE_BYTES of UTF-8 and
  nests at most MAX_DEPTH levels, both checked before it is parsed; invalid UTF-8 and lone surrogates are
  rejected (the parser refuses them, and a Python string with one cannot be encoded to the line);
- timestamps are ISO-8601, between TIMESTAMP_MIN and TIMESTAMP_MAX, and normalised to UTC (`...Z`).

Skills are named by id or name and resolved against a version; unknown names are reported on the record
(and dropped from its skill lists), never a reason to lose the trace. Instead of `reward` a trace may carry
`ctrf` (a CTRF report): reward = passed / tests, where failed, skipped, pending and other all stay in the
denominator; a trace that carries both is rejected (which one should count is not segos' to guess).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import numpy as np
import polars as pl
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ..config import (  # the contract's bounds live in config: the MCP schema advertises the same ones
    MAX_ATTEMPT,
    MAX_DEPTH,
    MAX_ID_CHARS,
    MAX_LINE_BYTES,
    MAX_NAME_CHARS,
    MAX_QUERIES,
    MAX_SKILLS,
    MAX_TEXT_CHARS,
)

# ------------------------------------------------------------------------------------ contract bounds
TIMESTAMP_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TIMESTAMP_MAX = datetime(2100, 1, 1, tzinfo=UTC)  # exclusive
TIMESTAMP_MAX_CHARS = 64  # longer is no ISO-8601 date-time; refused before it is parsed

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


# ------------------------------------------------------------------------------------------ the model


# The form segos writes (`YYYY-MM-DDTHH:MM:SSZ`, ASCII digits, each part in its clock range) and the years
# of [TIMESTAMP_MIN, TIMESTAMP_MAX): a timestamp of this form with a real calendar date is kept as given,
# any other is normalised. The one statement of that rule: the model checks it here, the columnar fast
# path (`columnar._timestamp_ok`) compiles the same pattern and years into polars expressions.
CANONICAL_TS = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z"
CANONICAL_YEARS = (f"{TIMESTAMP_MIN.year:04d}", f"{(TIMESTAMP_MAX - timedelta(microseconds=1)).year:04d}")
_CANONICAL_TS = re.compile(CANONICAL_TS)


def _utc_timestamp(value: str) -> str:
    """ISO-8601 → `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` in UTC; naive times are taken as UTC."""
    if _CANONICAL_TS.fullmatch(value) and CANONICAL_YEARS[0] <= value[:4] <= CANONICAL_YEARS[1]:
        try:  # already normalised (what segos writes): only the calendar check is left
            datetime.fromisoformat(value[:19])
            return value
        except ValueError:
            raise ValueError("not an ISO-8601 date-time") from None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("not an ISO-8601 date-time") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    try:
        utc = ts.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+05:00 falls before year 1 in UTC
        raise ValueError("out of range") from None
    if not TIMESTAMP_MIN <= utc < TIMESTAMP_MAX:
        raise ValueError(f"out of range [{TIMESTAMP_MIN:%Y-%m-%d}, {TIMESTAMP_MAX:%Y-%m-%d})")
    return utc.isoformat().replace("+00:00", "Z")


def _bounded_str(max_chars: int, description: str) -> Any:
    return Annotated[
        str,
        StringConstraints(strip_whitespace=True, min_length=1, max_length=max_chars),
        Field(description=description),
    ]


TraceId = _bounded_str(MAX_ID_CHARS, 'A JSON string id (integers are rejected: 0 and "0" never collide).')
AgentName = _bounded_str(MAX_NAME_CHARS, "The model/harness that ran the attempt.")
SkillRef = _bounded_str(MAX_NAME_CHARS, "A skill id or name (resolved against a version at ingestion).")
QueryText = _bounded_str(MAX_TEXT_CHARS, "The query text.")
SkillList = Annotated[list[SkillRef], Field(max_length=MAX_SKILLS)]
Timestamp = Annotated[
    str,
    StringConstraints(max_length=TIMESTAMP_MAX_CHARS),
    AfterValidator(_utc_timestamp),
    Field(
        description=f"ISO-8601 date-time in [{TIMESTAMP_MIN:%Y-%m-%d}, {TIMESTAMP_MAX:%Y-%m-%d}); "
        "normalised to UTC, naive times are UTC",
        json_schema_extra={"format": "date-time"},
    ),
]


class Query(BaseModel):
    """One query of the attempt; unknown keys of a query object are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")
    text: QueryText
    retrieved: SkillList | None = Field(default=None, description="What retrieval returned, best first.")
    seeds: SkillList | None = Field(default=None, description="The lexical seeds of the ranking.")


def _text_query(value: Any) -> Any:
    """A query given as bare text becomes `{"text": ...}`, so every stored query has one shape."""
    return {"text": value} if isinstance(value, str) else value


QueryItem = Annotated[Query, BeforeValidator(_text_query, json_schema_input_type=QueryText | Query)]


class NativeTrace(BaseModel):
    """One attempt of an agent at a task (SPEC §7), one JSON object a line. Keys beyond these are kept in
    `extra`. Exactly one of `reward` and `ctrf` is required."""

    model_config = ConfigDict(strict=True, extra="allow", title="segos trace", allow_inf_nan=False)
    trace_id: TraceId | None = Field(default=None, description="Default: derived from the content.")
    task_id: TraceId
    agent: AgentName = DEFAULT_AGENT
    attempt: Annotated[int, Field(ge=1, le=MAX_ATTEMPT)] = 1
    timestamp: Timestamp | None = None
    queries: Annotated[list[QueryItem], Field(max_length=MAX_QUERIES)] | None = Field(
        default=None, description="Queries issued: text, or {text, retrieved?, seeds?}."
    )
    used: SkillList = Field(description="Skills actually used, in first-use order (repeats dropped).")
    reward: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        default=None, description="Outcome in [0, 1]; success is reward >= 0.9."
    )
    ctrf: dict[str, Any] | None = Field(
        default=None, description="A CTRF report; reward = passed / tests when `reward` is absent."
    )
    simulated: bool = Field(default=False, description="True for traces written by the simulator.")

    @model_validator(mode="after")
    def _reward_given(self) -> NativeTrace:
        if self.reward is not None and self.ctrf is not None:  # which one would count is not for us to guess
            raise ValueError("give `reward` or `ctrf`, not both (the reward is derived from a CTRF report)")
        if self.reward is None:
            if self.ctrf is None:
                raise ValueError("missing `reward` (or a `ctrf` report to derive it from)")
            ctrf_reward(self.ctrf)  # raises with the reason when no reward can be derived
        return self


TRACE_ADAPTER: TypeAdapter[NativeTrace] = TypeAdapter(NativeTrace)
NATIVE_KEYS = frozenset(NativeTrace.model_fields)  # the contract's keys: any other key of a line is `extra`
# What the model gives a key a line leaves out, for the columnar fast path to fill in the same way.
NATIVE_DEFAULTS = {k: NativeTrace.model_fields[k].default for k in ("agent", "attempt", "simulated")}


def trace_json_schema() -> dict[str, Any]:
    """The JSON Schema of a native trace line, generated from the model."""
    return NativeTrace.model_json_schema()


# ------------------------------------------------------------------------------------------ records


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
        """The record as a row of TRACE_SCHEMA, whose columns are its fields."""
        row = {column: getattr(self, column) for column in TRACE_SCHEMA}
        row["queries"] = [{"text": q.text, "retrieved": q.retrieved, "seeds": q.seeds} for q in self.queries]
        row["extra"] = json.dumps(self.extra, sort_keys=True, default=str) if self.extra else ""
        return row


def trace_frame(records: list[TraceRecord]) -> pl.DataFrame:
    return pl.DataFrame([r.row() for r in records], schema=TRACE_SCHEMA)


def ctrf_reward(report: Any) -> float:
    """passed / tests of a CTRF report (`{"results": {"summary": {...}}}` or the summary itself)."""
    if not isinstance(report, dict):
        raise TraceError("`ctrf` must be a CTRF report object")
    results = report.get("results", report)
    summary = results.get("summary") if isinstance(results, dict) else None
    if not isinstance(summary, dict):
        raise TraceError("`ctrf` has no results.summary")
    passed, tests = summary.get("passed"), summary.get("tests")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (passed, tests)):
        raise TraceError("`ctrf` summary needs integer `passed` and `tests`")
    if tests == 0:
        raise TraceError("`ctrf` summary has no tests, so no reward can be derived")
    if passed > tests:
        raise TraceError(f"`ctrf` summary has more passed ({passed}) than tests ({tests})")
    return passed / tests


def parse_timestamp(value: Any) -> str:
    """A timestamp of any source normalised as the contract does (TraceError with the reason)."""
    if not isinstance(value, str) or len(value) > TIMESTAMP_MAX_CHARS:
        raise TraceError("`timestamp` must be an ISO-8601 string")
    try:
        return _utc_timestamp(value)
    except ValueError as exc:
        raise TraceError(
            f"`timestamp` {_short(value)} is not an ISO-8601 date-time in range ({exc})"
        ) from None


def derived_trace_id(obj: dict[str, Any]) -> str:
    """A stable id for a record that has none, so re-ingesting the same line is still idempotent."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return "h-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------- validation

_HINTS = {
    "trace_id": f"`trace_id` must be a non-empty JSON string of at most {MAX_ID_CHARS} characters "
    '(integer ids are rejected: write "0", not 0)',
    "task_id": f"`task_id` must be a non-empty JSON string of at most {MAX_ID_CHARS} characters "
    "(integer ids are rejected)",
    "agent": f"`agent` must be a non-empty string of at most {MAX_NAME_CHARS} characters",
    "attempt": f"`attempt` must be a positive integer of at most {MAX_ATTEMPT:,}",
    "timestamp": f"`timestamp` must be an ISO-8601 date-time in [{TIMESTAMP_MIN:%Y-%m-%d}, "
    f"{TIMESTAMP_MAX:%Y-%m-%d})",
    "queries": f"`queries` must be a list of at most {MAX_QUERIES} queries, each a non-empty text or "
    f"{{text, retrieved?, seeds?}} (text at most {MAX_TEXT_CHARS:,} characters)",
    "used": f"`used` must be a list of skill names (at most {MAX_SKILLS}, each a non-empty string of at most "
    f"{MAX_NAME_CHARS} characters)",
    "reward": "`reward` must be a number in [0, 1]",
    "ctrf": "`ctrf` must be a CTRF report object",
    "simulated": "`simulated` must be true or false",
}
_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN, _CLOSE = np.zeros(256, np.int8), np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_CLOSE[[ord("]"), ord("}")]] = 1


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 15]}...{text[-10:]} ({len(text):,} chars)"


def nesting_depth(line: bytes) -> int:
    """Deepest [ / { nesting of a JSON text, brackets inside strings ignored (vectorised over bytes)."""
    opened = line.count(b"[") + line.count(b"{")
    if opened <= MAX_DEPTH:
        return opened  # an upper bound that is already within the limit
    bare = np.frombuffer(_STRING_RE.sub(b"", line), dtype=np.uint8)
    if bare.size == 0:
        return 0
    level = np.cumsum(_OPEN[bare].astype(np.int32) - _CLOSE[bare])
    return int(level.max(initial=0))


def _reason(exc: ValidationError) -> str:
    """One sentence per failing field (at most three), never echoing more than a short input excerpt."""
    parts: list[str] = []
    for err in exc.errors(include_url=False)[:3]:
        loc = err.get("loc", ())
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            return f"line is not valid JSON ({msg.removeprefix('Invalid JSON: ')}); fix or drop it"
        if err.get("type") == "model_type" and not loc:
            return "a trace must be a JSON object"
        key = str(loc[0]) if loc else ""
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        hint = _HINTS.get(key)
        got = f", got {_short(err['input'])}" if "input" in err and key else ""
        if err.get("type") == "missing":
            parts.append(f"missing `{where}`" + (f": {hint}" if hint else ""))
        elif hint:
            parts.append(f"{hint}{got} ({where}: {msg})")
        else:
            parts.append(msg)
    return "; ".join(parts) or "the trace does not satisfy the contract"


def check_line(line: bytes) -> None:
    """The bounds checked before a line is parsed (length, nesting); TraceError with the reason."""
    if len(line) > MAX_LINE_BYTES:
        raise TraceError(f"line is longer than the {MAX_LINE_BYTES:,}-byte limit of a trace")
    depth = nesting_depth(line)
    if depth > MAX_DEPTH:
        raise TraceError(f"line nests {depth} levels deep, over the limit of {MAX_DEPTH}")


def validate_line(line: bytes | str) -> NativeTrace:
    """One native JSON line → the validated model (TraceError with the reason)."""
    data = line.encode("utf-8") if isinstance(line, str) else line
    check_line(data)
    try:
        return TRACE_ADAPTER.validate_json(data)
    except ValidationError as exc:
        raise TraceError(_reason(exc)) from None


def native_line(obj: Any) -> bytes:
    """The JSON line of an object (what `record_trace` appends); TraceError when it cannot be one."""
    try:
        text = json.dumps(obj, ensure_ascii=False, sort_keys=True, allow_nan=False, default=str)
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise TraceError("a string holds a lone surrogate, which is not valid UTF-8") from None
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, or nesting too deep to serialise
        raise TraceError(f"the trace cannot be written as a JSON line ({exc})") from None


def finish_native(model: NativeTrace) -> tuple[str, str]:
    """Complete a validated model in place (a derived id when it has none, the reward from `ctrf`) and
    return (reward_source, extra as JSON); TraceError when its extra keys are not plain JSON."""
    reward_source = "reward"
    if model.reward is None:
        model.reward, reward_source = ctrf_reward(model.ctrf), "ctrf"
    if model.trace_id is None:
        model.trace_id = derived_trace_id(model.model_dump(mode="json", exclude={"trace_id"}))
    extra = model.__pydantic_extra__
    if not extra:
        return reward_source, ""
    try:
        return reward_source, json.dumps(extra, sort_keys=True, allow_nan=False)  # as TraceRecord.row()
    except ValueError:
        raise TraceError("an extra key holds NaN or an infinite number, which JSON cannot carry") from None


def native_row(model: NativeTrace, source: str = "") -> dict[str, Any]:
    """A validated model as a row of TRACE_SCHEMA (skill names not yet resolved, no window)."""
    reward_source, extra = finish_native(model)
    return {
        "trace_id": model.trace_id,
        "task_id": model.task_id,
        "agent": model.agent,
        "attempt": model.attempt,
        "timestamp": model.timestamp,
        "window": None,
        "queries": [
            {"text": q.text, "retrieved": q.retrieved, "seeds": q.seeds} for q in model.queries or ()
        ],
        "used": list(dict.fromkeys(model.used)),  # first-use order: later repeats add nothing
        "used_ordered": True,
        "reward": float(model.reward or 0.0),
        "reward_source": reward_source,
        "unknown_skills": [],
        "source": source,
        # The simulator marks what it writes; the flag survives ingestion so simulated traces are never
        # mistaken for real ones.
        "source_format": "simulated" if model.simulated else "native",
        "simulated": model.simulated,
        "extra": extra,
    }


def record_of_row(row: dict[str, Any]) -> TraceRecord:
    """A row of TRACE_SCHEMA (whose columns are TraceRecord's fields) as a record."""
    queries = [QueryRecord(q["text"], q["retrieved"], q["seeds"]) for q in row["queries"]]
    extra = json.loads(row["extra"]) if row["extra"] else {}
    return TraceRecord(**{**row, "queries": queries, "extra": extra})


def native_dict(record: TraceRecord) -> dict[str, Any]:
    """A record in the native line's JSON form (the contract's keys; `extra` and flags left out)."""
    return {
        "trace_id": record.trace_id,
        "task_id": record.task_id,
        "agent": record.agent,
        "attempt": record.attempt,
        "timestamp": record.timestamp,
        "queries": [{"text": q.text, "retrieved": q.retrieved, "seeds": q.seeds} for q in record.queries],
        "used": record.used,
        "reward": record.reward,
    }


def check_record(record: TraceRecord) -> TraceRecord:
    """Check a record made by an adapter against the contract (ids, ranges, sizes, timestamp) and return
    it with the normalised values; TraceError with the reason when it breaks the contract."""
    model = validate_line(native_line(native_dict(record)))
    extra = native_line(record.extra) if record.extra else b""
    if len(extra) > MAX_LINE_BYTES:
        raise TraceError(f"`extra` is {len(extra):,} bytes of JSON, over the {MAX_LINE_BYTES:,}-byte limit")
    row = native_row(model, record.source)
    record.trace_id, record.task_id, record.agent = row["trace_id"], row["task_id"], row["agent"]
    record.timestamp, record.used, record.reward = row["timestamp"], row["used"], row["reward"]
    record.queries = [QueryRecord(q["text"], q["retrieved"], q["seeds"]) for q in row["queries"]]
    return record
