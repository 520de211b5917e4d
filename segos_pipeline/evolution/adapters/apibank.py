"""API-Bank level-3 tasks (a JSON list) → a skill library of its APIs, traces and ordered plans.

A task: `requirement` (the user's request), `response`, and `apis`: the calls in order, each
`{api_name, input, output: {api_name, input, output, exception}}`. The meta tool `ToolSearcher` finds an
API and returns its description (`name`, `description`, `input_parameters`, `output_parameters`); it is
how the agent *looks up* a skill, not a skill it uses, so it is left out of the library and of `used`.
Every task in the published file succeeded, so every trace has reward 1.0.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..traces import QueryRecord, TraceError, TraceRecord
from .common import (
    DATA_ERRORS,
    Rejected,
    data_error_reason,
    files_under,
    io_fields,
    io_section,
    load_json_file,
    rejected,
    type_name,
    write_skill_md,
)

MAX_FILE_BYTES = 256 << 20  # one API-Bank task list

FORMAT = "apibank"
META_TOOLS = frozenset({"ToolSearcher"})
REWARD_SOURCE = "apibank: all plans succeed"


@dataclass
class _Task:
    source: str
    trace_id: str
    agent: str
    requirement: str
    calls: list[dict[str, Any]]  # real API calls in order (meta tools removed), repeats kept
    searches: int
    obj: dict[str, Any]


@dataclass
class _Api:
    name: str
    description: str = ""
    inputs: list[dict[str, str]] = field(default_factory=list)
    outputs: list[dict[str, str]] = field(default_factory=list)
    described: bool = False


def _level(file: Path) -> str:
    m = re.search(r"level-?(\d+)", file.stem)
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", file.stem.lower())


def _tasks(path: Path) -> Iterator[_Task | Rejected]:
    for file in files_under(path, "*.json"):
        try:
            data = load_json_file(file, MAX_FILE_BYTES)
        except TraceError as exc:
            yield rejected(str(file), f"{exc}; expected a JSON list of API-Bank tasks", "")
            continue
        if not isinstance(data, list):
            yield rejected(str(file), "expected a JSON list of API-Bank tasks", str(data)[:200])
            continue
        level = _level(file)
        for index, obj in enumerate(data):
            source = f"{file}#{index}"
            try:
                yield _task(obj, source, f"apibank-l{level}-{index:03d}", f"apibank-level{level}")
            except DATA_ERRORS as exc:
                yield rejected(source, data_error_reason(exc), obj)


def _task(obj: Any, source: str, trace_id: str, agent: str) -> _Task:
    if not isinstance(obj, dict):
        raise TraceError("a task must be a JSON object with `requirement` and `apis`")
    requirement = obj.get("requirement")
    if not isinstance(requirement, str) or not requirement.strip():
        raise TraceError("missing `requirement`: the task has no query text")
    apis = obj.get("apis")
    if not isinstance(apis, list) or not apis:
        raise TraceError("missing `apis`: the task has no API calls")
    calls, searches = [], 0
    for i, call in enumerate(apis):
        if not isinstance(call, dict) or not isinstance(call.get("api_name"), str) or not call["api_name"]:
            raise TraceError(f"apis[{i}] has no `api_name`")
        if call["api_name"] in META_TOOLS:
            searches += 1
        else:
            calls.append(call)
    if not calls:
        raise TraceError("the task calls no API besides the ToolSearcher meta tool, so no skill was used")
    return _Task(source, trace_id, agent, " ".join(requirement.split()), calls, searches, obj)


def _result(call: dict[str, Any]) -> dict[str, Any]:
    """The `{api_name, input, output, exception}` result wrapper of a call ({} when absent)."""
    out = call.get("output")
    return out if isinstance(out, dict) else {}


def _catalogue(tasks: list[_Task]) -> tuple[dict[str, _Api], list[str]]:
    """API name → its description (from ToolSearcher results) or a minimal one from observed calls."""
    apis: dict[str, _Api] = {}
    conflicts: list[str] = []
    for task in tasks:
        for call in task.obj["apis"]:
            if call.get("api_name") not in META_TOOLS:
                continue
            found = _result(call).get("output")
            if not isinstance(found, dict) or not isinstance(found.get("name"), str):
                continue  # a search that found nothing describes no API
            api = _Api(
                name=found["name"],
                description=" ".join(str(found.get("description") or "").split()),
                inputs=io_fields(found.get("input_parameters")),
                outputs=io_fields(found.get("output_parameters")),
                described=True,
            )
            prev = apis.get(api.name)
            if prev is None:
                apis[api.name] = api
            elif (prev.description, prev.inputs, prev.outputs) != (api.description, api.inputs, api.outputs):
                conflicts.append(api.name)  # first description wins; the summary lists the rest
    for task in tasks:
        for call in task.calls:
            name = call["api_name"]
            if name in apis:
                continue
            # Called but never described: only what the call shows (its input and output keys) is known.
            inputs = call.get("input") if isinstance(call.get("input"), dict) else {}
            result = _result(call).get("output")
            outputs = result if isinstance(result, dict) else {}
            apis[name] = _Api(
                name=name,
                inputs=[{"name": k, "type": type_name(type(v).__name__)} for k, v in inputs.items()],
                outputs=[{"name": k, "type": type_name(type(v).__name__)} for k, v in outputs.items()],
            )
    return apis, sorted(set(conflicts))


def _valid_tasks(path: Path) -> list[_Task]:
    return [t for t in _tasks(path) if isinstance(t, _Task)]


def _order(task: _Task) -> list[str]:
    return list(dict.fromkeys(c["api_name"] for c in task.calls))  # first-use order


def iter_records(path: Path) -> Iterator[TraceRecord | Rejected]:
    for task in _tasks(path):
        if isinstance(task, Rejected):
            yield task
            continue
        try:
            yield _record(task)
        except DATA_ERRORS as exc:
            yield rejected(task.source, data_error_reason(exc), task.obj)


def _record(task: _Task) -> TraceRecord:
    exceptions = [
        {"api": c["api_name"], "exception": _result(c)["exception"]}
        for c in task.calls
        if _result(c).get("exception")
    ]
    extra: dict[str, Any] = {
        "response": task.obj.get("response"),
        "calls": [c["api_name"] for c in task.calls],  # with repeats, for anyone needing them
        "tool_searches": task.searches,
        "note_used": "ToolSearcher (the meta tool that looks APIs up) is not a skill and is left out",
    }
    if exceptions:
        extra["exceptions"] = exceptions
    return TraceRecord(
        trace_id=task.trace_id,
        task_id=task.trace_id,
        used=_order(task),
        reward=1.0,
        queries=[QueryRecord(task.requirement)],
        agent=task.agent,
        attempt=1,
        timestamp=None,  # the source has no time; a window must be given on ingestion
        used_ordered=True,
        reward_source=REWARD_SOURCE,
        source=task.source,
        source_format=FORMAT,
        extra=extra,
    )


def plans(path: Path) -> list[dict[str, Any]]:
    """Every valid task's true plan: {"task_id", "query", "apis": API names in first-use order}."""
    return [{"task_id": t.trace_id, "query": t.requirement, "apis": _order(t)} for t in _valid_tasks(path)]


def _body(api: _Api) -> str:
    intro = api.description or f"The {api.name} API (seen in API-Bank calls; no description was published)."
    parts = [f"# {api.name}", "", intro, ""]
    if not api.described:
        parts += ["Fields below are the keys observed in its calls; types are inferred from values.", ""]
    parts.append(io_section("Parameters", api.inputs, "Takes no parameters."))
    parts.append(io_section("Returns", api.outputs, "Returns no named fields."))
    return "\n".join(parts)


def write_library(path: Path, out_dir: Path) -> dict[str, Any]:
    tasks = _valid_tasks(path)
    apis, conflicts = _catalogue(tasks)
    out_dir.mkdir(parents=True, exist_ok=True)
    for api in apis.values():
        fm: dict[str, Any] = {
            "name": api.name,
            "description": api.description or f"The {api.name} API (undocumented in API-Bank).",
            "tags": ["api-bank", "tool-api"],
        }
        if api.inputs:
            fm["inputs"] = api.inputs
        if api.outputs:
            fm["outputs"] = api.outputs
        fm["metadata"] = {"source": "API-Bank level-3 (AlibabaResearch/DAMO-ConvAI)", "generated": True}
        # API-Bank names are CamelCase identifiers; the substitution only guards the folder name
        write_skill_md(out_dir, re.sub(r"[^A-Za-z0-9_.-]+", "-", api.name), fm, _body(api))
    return {
        "format": FORMAT,
        "out_dir": str(out_dir),
        "skills": len(apis),
        "with_inputs": sum(1 for a in apis.values() if a.inputs),
        "with_outputs": sum(1 for a in apis.values() if a.outputs),
        "described": sum(1 for a in apis.values() if a.described),
        "minimal_from_calls": sorted(a.name for a in apis.values() if not a.described),
        "conflicting_descriptions": conflicts,
        "excluded_meta_tools": sorted(META_TOOLS),
        "note": "ToolSearcher is the API-Bank meta tool that looks APIs up; it is not a skill, so it is "
        "excluded from the library and from every trace's `used`",
    }
