"""SkillsBench trial records (one JSON object a line) → traces.

A line: `task`, `trial_id`, `model`, `harness`, `condition`, `skills_loaded`, `skills_status`, `reward`,
`reward_source`, `exception_type`, `started_at`, ... The harness stores `skills_loaded` sorted, so the
records carry no first-use order (`used_ordered=False`), and a null `skills_loaded` means "unknown", not
"none" (said in `extra`). The query is the task's `instruction` from the eval file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..traces import QueryRecord, TraceError, TraceRecord, parse_timestamp
from .common import Rejected, files_under, json_lines, jsonl_records

FORMAT = "skillsbench-trials"
# Keys that become record fields; everything else of the line is kept in `extra`.
_CONSUMED = {"task", "trial_id", "model", "skills_loaded", "reward", "started_at"}


def load_instructions(queries: Path | None) -> dict[str, str]:
    """task → instruction from the eval JSONL; unreadable lines are skipped (the trace keeps a note)."""
    if queries is None:
        return {}
    out: dict[str, str] = {}
    for path in files_under(queries, "*.jsonl"):
        for _source, _line, obj in json_lines(path):
            if isinstance(obj, dict) and isinstance(obj.get("task"), str):
                text = obj.get("instruction")
                if isinstance(text, str) and text.strip():
                    out.setdefault(obj["task"], text)
    return out


def iter_records(path: Path, queries: Path | None = None) -> Iterator[TraceRecord | Rejected]:
    instructions = load_instructions(queries)
    return jsonl_records(path, lambda obj, source: trial_record(obj, source, instructions, queries))


def _required_str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise TraceError(f"missing `{key}`: a SkillsBench trial needs task, trial_id and model")
    return value.strip()


def trial_record(
    obj: Any, source: str, instructions: dict[str, str], queries: Path | None = None
) -> TraceRecord:
    if not isinstance(obj, dict):
        raise TraceError("a trial must be a JSON object")
    task, trial_id, model = (_required_str(obj, k) for k in ("task", "trial_id", "model"))
    reward = obj.get("reward")
    if reward is None:
        raise TraceError("missing `reward`: the trial has no verifier score, so it cannot be scored")
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not 0.0 <= float(reward) <= 1.0:
        raise TraceError(f"`reward` must be a number in [0, 1], got {reward!r}")
    loaded = obj.get("skills_loaded")
    if loaded is not None and (
        not isinstance(loaded, list) or not all(isinstance(s, str) and s.strip() for s in loaded)
    ):
        raise TraceError("`skills_loaded` must be a list of skill names or null")
    timestamp = parse_timestamp(obj["started_at"]) if obj.get("started_at") is not None else None

    extra = {k: v for k, v in obj.items() if k not in _CONSUMED}
    if loaded is None:
        # null is the harness failing to record the skills (skills_status says why), not "no skills"
        extra["note_used"] = (
            f"skills_loaded is null (skills_status={obj.get('skills_status')!r}): the skills loaded are "
            "unknown, so `used` is empty"
        )
    query_list: list[QueryRecord] = []
    if task in instructions:
        query_list = [QueryRecord(instructions[task])]
    elif queries is None:
        extra["note_queries"] = "no eval file given (queries=None): the trace has no query text"
    else:
        extra["note_queries"] = f"task {task!r} has no instruction in {queries}: the trace has no query text"
    return TraceRecord(
        trace_id=trial_id,
        task_id=task,
        used=list(dict.fromkeys(s.strip() for s in loaded or [])),
        reward=float(reward),
        queries=query_list,
        # SPEC §7: attempts are keyed by (task, agent); the model is what differs between trials here
        agent=model,
        attempt=1,
        timestamp=timestamp,
        used_ordered=False,  # the harness sorts skills_loaded alphabetically: no first-use order survives
        reward_source=f"{FORMAT}: {obj.get('reward_source') or 'reward'}",
        source=source,
        source_format=FORMAT,
        extra=json.loads(json.dumps(extra, default=str)),
    )
