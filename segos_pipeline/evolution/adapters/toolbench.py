"""ToolBench (the `toolbench-example` folder) → a skill library of its APIs and traces from DFS trees.

Inputs:
- `instruction/*.json`: lists of queries, each with `api_list` entries (`tool_name`, `api_name`,
  `api_description`, `required_parameters`, `optional_parameters`, sometimes `template_response`).
- `answer/G*_answer/{query_id}_{method}.json`: one DFSDT run: `win`, `answer_generation` (the query, the
  `function` list the model was offered, `finish_type`, ...) and `tree`, the search tree.

The tree alternates `Action` nodes (description = the function called), `Action Input` nodes (its
arguments and `observation`) and `Thought` nodes. Every root-to-leaf path is one complete try: it ends
with `Finish` (`give_answer`, or `give_up_and_restart`, after which DFS backtracks and tries a sibling),
or it is cut off at the step limit (`pruned`), or stops after a thought. So the leaves are the attempts:
- the *final* trace is the path whose leaf gave the answer (reward 1.0 if `win` else 0.0); when no path
  gave one (the run gave up or ran out of budget), the last explored path stands as the final attempt;
- every other leaf is a failed branch (reward 0.0): its `used` is the whole path from the root, because
  the calls shared with other paths were part of that try too.
`attempt` numbers the leaves in exploration order (DFS `expand_num`), so the final trace is the last.

Functions are named `{api}_for_{tool}` after ToolBench's `standardize`; the library names each skill
`{tool}-{api}` from the same standardized parts so both sides meet. `Finish` (and its `give_up_and_restart`
return type) is the run's control action, not a skill: excluded. Calls to names the model was not offered
(ToolBench answers "No such function name") are hallucinations: excluded from `used`, listed in `extra`.
"""

from __future__ import annotations

import json
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
    io_fields,
    io_section,
    load_json_file,
    rejected,
    slugify,
    type_name,
    write_skill_md,
)

FORMAT = "toolbench"
MAX_FILE_BYTES = 64 << 20  # one instruction or answer file
CONTROL_FUNCTIONS = frozenset({"Finish"})
_TOOL_IN_DESC = re.compile(r'subfunction for tool "([^"]+)"')
_FUNC_DESC = re.compile(r'The description of this function is: "(.*)"\s*$', re.DOTALL)
_BOILERPLATE = re.compile(r'This is the subfunction for tool "[^"]*"(?:, you can use this tool\.?)?')
_STD_BAD = re.compile("[^\u4e00-\u9fa5a-zA-Z0-9_]")


def standardize(text: str) -> str:
    """ToolBench's `standardize`: how tool and API names become function-name parts."""
    text = re.sub(r"(_)\1+", "_", _STD_BAD.sub("_", text)).lower().strip("_")
    return "get_" + text if text[:1].isdigit() else text


# -------------------------------------------------------------------------------------------- catalogue


@dataclass
class _ApiDef:
    tool: str  # standardized tool name
    api: str  # standardized API name
    tool_name: str = ""  # as published (instruction files), else the standardized name
    api_name: str = ""
    category: str = ""
    description: str = ""
    inputs: list[dict[str, str]] = field(default_factory=list)
    outputs: list[dict[str, str]] = field(default_factory=list)
    seen_in: set[str] = field(default_factory=set)

    @property
    def skill(self) -> str:
        return slugify(f"{self.tool}-{self.api}")

    @property
    def function(self) -> str:
        return f"{self.api}_for_{self.tool}"


def _params(required: Any, optional: Any) -> list[dict[str, str]]:
    fields = []
    for params, kind in ((required, "required"), (optional, "optional")):
        for f in io_fields(params if isinstance(params, list) else []):
            f["description"] = f"({kind}) {f.get('description', '')}".strip()
            fields.append(f)
    return fields


def _load_json(path: Path) -> Any:
    """The file's JSON, or None when it cannot be read (the callers say what that costs)."""
    try:
        return load_json_file(path, MAX_FILE_BYTES)
    except TraceError:
        return None


def _instruction_files(root: Path) -> list[Path]:
    folder = root / "instruction"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _answer_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    folder = root / "answer"
    return sorted(folder.rglob("*.json")) if folder.is_dir() else []


def _catalogue(root: Path) -> tuple[dict[tuple[str, str], _ApiDef], dict[str, str], list[Rejected]]:
    """(tool, api) → API definition, function name → (tool, api) key as a skill name, and a Rejected for
    each instruction or answer file whose API list cannot be read (its APIs are then missing from the
    catalogue, so the traces that call them say so)."""
    apis: dict[tuple[str, str], _ApiDef] = {}
    problems: list[Rejected] = []

    def entry(tool: str, api: str) -> _ApiDef:
        return apis.setdefault((tool, api), _ApiDef(tool, api, tool, api))

    for file in _instruction_files(root):
        try:
            _read_instruction_apis(file, entry)
        except DATA_ERRORS as exc:
            problems.append(rejected(str(file), f"instruction file skipped: {data_error_reason(exc)}", ""))
    # ToolBench keeps only the last 64 characters of a function name, so a long one seen in an answer
    # file is matched to the full name from the instruction files before being taken as a new API.
    truncated = {d.function[-64:]: key for key, d in apis.items() if len(d.function) > 64}
    for file in _answer_files(root):
        try:
            _read_offered_apis(file, apis, truncated, entry)
        except DATA_ERRORS as exc:
            problems.append(rejected(str(file), f"offered functions skipped: {data_error_reason(exc)}", ""))
    by_function: dict[str, str] = {}
    for d in apis.values():
        by_function[d.function] = d.skill
        by_function.setdefault(d.function[-64:], d.skill)  # ToolBench keeps the last 64 characters
    return apis, by_function, problems


def _read_instruction_apis(file: Path, entry: Any) -> None:
    data = _load_json(file)
    for query in data if isinstance(data, list) else []:
        for item in query.get("api_list", []) if isinstance(query, dict) else []:
            if not isinstance(item, dict) or not item.get("tool_name") or not item.get("api_name"):
                continue
            d = entry(standardize(str(item["tool_name"])), standardize(str(item["api_name"])))
            d.tool_name, d.api_name = str(item["tool_name"]), str(item["api_name"])
            d.category = d.category or str(item.get("category_name") or "")
            d.description = d.description or " ".join(str(item.get("api_description") or "").split())
            d.inputs = d.inputs or _params(item.get("required_parameters"), item.get("optional_parameters"))
            template = item.get("template_response")
            if not d.outputs and isinstance(template, dict):
                # the only output schema ToolBench publishes: a sample response's top-level keys
                d.outputs = [{"name": str(k), "type": type_name(v)} for k, v in template.items()]
            d.seen_in.add("instruction")


def _read_offered_apis(
    file: Path, apis: dict[tuple[str, str], _ApiDef], truncated: dict[str, tuple[str, str]], entry: Any
) -> None:
    data = _load_json(file)
    generation = data.get("answer_generation") if isinstance(data, dict) else None
    functions = generation.get("function") if isinstance(generation, dict) else None
    for fn in functions if isinstance(functions, list) else []:
        parsed = _function_def(fn)
        if parsed is None:
            continue
        d = apis[truncated[fn["name"]]] if fn["name"] in truncated else entry(parsed.tool, parsed.api)
        d.description = d.description or parsed.description
        d.inputs = d.inputs or parsed.inputs
        d.seen_in.add("answer")


def _function_def(fn: Any) -> _ApiDef | None:
    """An offered function (`{name, description, parameters}`) as an API definition; None for control."""
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or fn["name"] in CONTROL_FUNCTIONS:
        return None
    name, desc = fn["name"], str(fn.get("description") or "")
    m = _TOOL_IN_DESC.search(desc)
    if m and name.endswith(f"_for_{m.group(1)}"):
        tool, api = m.group(1), name[: -len(f"_for_{m.group(1)}")]
    elif "_for_" in name:
        api, tool = name.rsplit("_for_", 1)
    else:
        tool, api = "unknown_tool", name
    inner = _FUNC_DESC.search(desc)
    # without the inner description only ToolBench's boilerplate is left, which describes nothing
    text = inner.group(1) if inner else _BOILERPLATE.sub("", desc)
    params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = set(params.get("required") or [])
    inputs = io_fields(props)
    for f in inputs:
        kind = "required" if f["name"] in required else "optional"
        f["description"] = f"({kind}) {f.get('description', '')}".strip()
    return _ApiDef(tool, api, description=" ".join(text.split()), inputs=inputs)


def _display_description(d: _ApiDef) -> str:
    if d.description:
        return d.description
    where = f" ({d.category})" if d.category else ""
    return f"The {d.api_name} endpoint of the {d.tool_name} API{where}."


def write_library(root: Path, out_dir: Path) -> dict[str, Any]:
    apis = _catalogue(root)[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    for d in apis.values():
        fm: dict[str, Any] = {"name": d.skill, "description": _display_description(d)}
        fm["tags"] = [
            t for t in ("toolbench", slugify(d.category) if d.category else "", slugify(d.tool)) if t
        ]
        if d.inputs:
            fm["inputs"] = d.inputs
        if d.outputs:
            fm["outputs"] = d.outputs
        fm["metadata"] = {
            "source": "ToolBench (OpenBMB/ToolBench)",
            "tool": d.tool_name,
            "api": d.api_name,
            "function": d.function,
            "generated": True,
        }
        body = "\n".join(
            [
                f"# {d.tool_name}: {d.api_name}",
                "",
                _display_description(d),
                "",
                f"Called as the function `{d.function}`.",
                "",
                io_section("Parameters", d.inputs, "Takes no parameters."),
                io_section(
                    "Returns",
                    d.outputs,
                    "ToolBench publishes no response schema for this API.",
                ),
            ]
        )
        write_skill_md(out_dir, d.skill, fm, body)
    return {
        "format": FORMAT,
        "out_dir": str(out_dir),
        "skills": len(apis),
        "with_inputs": sum(1 for d in apis.values() if d.inputs),
        "with_outputs": sum(1 for d in apis.values() if d.outputs),
        "with_description": sum(1 for d in apis.values() if d.description),
        "from_instruction_files": sum(1 for d in apis.values() if "instruction" in d.seen_in),
        "from_answer_files_only": sum(1 for d in apis.values() if d.seen_in == {"answer"}),
        "excluded_control_functions": sorted(CONTROL_FUNCTIONS),
        "note": "outputs come only from `template_response` (instruction files); APIs seen only in answer "
        "files have no published response schema, so they have no outputs. `Finish` is the run's control "
        "action, not a skill.",
    }


# ------------------------------------------------------------------------------------------------ traces


@dataclass
class _Leaf:
    path: list[dict[str, Any]]
    order: tuple[int, int]  # (largest expand_num on the path, pre-order index): exploration order


def _leaves(root: dict[str, Any]) -> list[_Leaf]:
    leaves: list[_Leaf] = []
    stack: list[tuple[dict[str, Any], list[dict[str, Any]], int]] = [(root, [root], 0)]
    counter = 0
    while stack:  # iterative DFS: deep trees must not hit the recursion limit
        node, path, best = stack.pop()
        best = max(best, int(node.get("expand_num") or 0))
        children = [c for c in node.get("children") or [] if isinstance(c, dict)]
        if not children:
            leaves.append(_Leaf(path, (best, counter)))
        counter += 1
        for child in reversed(children):  # reversed so children are visited in stored order
            stack.append((child, [*path, child], best))
    return sorted(leaves, key=lambda leaf: leaf.order)


def _observation_error(node: dict[str, Any] | None) -> str:
    if node is None:
        return ""
    try:
        obs = json.loads(node.get("observation") or "{}")
    except (json.JSONDecodeError, TypeError):
        return ""
    return str(obs.get("error") or "") if isinstance(obs, dict) else ""


def _finish_type(node: dict[str, Any] | None) -> str:
    if node is None:
        return ""
    try:
        args = json.loads(node.get("description") or "{}", strict=False)
    except json.JSONDecodeError:
        return "give_answer" if "give_answer" in str(node.get("description")) else ""
    return str(args.get("return_type") or "") if isinstance(args, dict) else ""


@dataclass
class _Path:
    calls: list[str]  # functions called, in order, control functions removed
    failed_calls: int  # calls whose observation carried an error
    end: str  # give_answer | give_up_and_restart | cut_off | stopped_after_thought
    depth: int


def _read_path(leaf: _Leaf) -> _Path:
    calls: list[str] = []
    failed, end = 0, ""
    nodes = leaf.path
    for i, node in enumerate(nodes):
        if node.get("node_type") != "Action":
            continue
        name = str(node.get("description") or "")
        nxt = nodes[i + 1] if i + 1 < len(nodes) and nodes[i + 1].get("node_type") == "Action Input" else None
        if name in CONTROL_FUNCTIONS:
            end = _finish_type(nxt) or end
            continue
        calls.append(name)
        failed += bool(_observation_error(nxt))
    last = nodes[-1]
    if not end:
        end = "stopped_after_thought" if last.get("node_type") == "Thought" else "cut_off"
    return _Path(calls, failed, end, int(last.get("depth") or len(nodes) - 1))


def _instruction_queries(root: Path) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for file in _instruction_files(root):
        group = file.stem.removesuffix("_query")
        data = _load_json(file)
        for q in data if isinstance(data, list) else []:
            if isinstance(q, dict) and isinstance(q.get("query"), str) and "query_id" in q:
                out[(group, str(q["query_id"]))] = q["query"]
    return out


def _agent(method: str) -> str:
    # "ChatGPT_DFS_woFilter_w2" → "toolbench-chatgpt-dfs": filter and width are run settings, kept in extra
    core = re.sub(r"_w(?:o)?Filter.*$", "", method)
    return f"toolbench-{slugify(core)}"


def iter_records(root: Path) -> Iterator[TraceRecord | Rejected]:
    _, by_function, problems = _catalogue(root)
    yield from problems
    try:
        queries = _instruction_queries(root)
    except DATA_ERRORS as exc:
        yield rejected(str(root), f"instruction queries skipped: {data_error_reason(exc)}", "")
        queries = {}
    for file in _answer_files(root):
        try:
            # whole or not at all: a file that fails half way yields no partial set of its traces
            records = list(_file_records(file, by_function, queries))
        except DATA_ERRORS as exc:
            yield rejected(str(file), data_error_reason(exc), "")
            continue
        yield from records


def _file_records(
    file: Path, by_function: dict[str, str], queries: dict[tuple[str, str], str]
) -> Iterator[TraceRecord | Rejected]:
    data = _load_json(file)
    if not isinstance(data, dict):
        yield rejected(str(file), "answer file is not a JSON object (expected `win`, `tree`, ...)", "")
        return
    tree = data.get("tree", {}).get("tree") if isinstance(data.get("tree"), dict) else None
    if not isinstance(tree, dict):
        yield rejected(str(file), "answer file has no search tree (`tree.tree`); nothing to read", "")
        return
    if not isinstance(data.get("win"), bool):
        yield rejected(str(file), "answer file has no boolean `win`, so the run cannot be scored", "")
        return
    group = file.parent.name.removesuffix("_answer")
    query_id, _, method = file.stem.partition("_")
    task_id = f"{group}-{query_id}"
    generation = data.get("answer_generation") if isinstance(data.get("answer_generation"), dict) else {}
    offered = {fn["name"] for fn in generation.get("function") or [] if isinstance(fn, dict) and "name" in fn}

    text = generation.get("query") if isinstance(generation.get("query"), str) else ""
    run_extra: dict[str, Any] = {
        "win": data["win"],
        "finish_type": generation.get("finish_type"),
        "valid_data": generation.get("valid_data"),
        "query_count": generation.get("query_count"),
        "total_tokens": generation.get("total_tokens"),
        "method": method,
        "tree_size": data["tree"].get("size"),
        "note_used": "`Finish`/give_up_and_restart are control actions, not skills; calls to functions "
        "the model was not offered are hallucinations and are listed in invalid_calls, not used",
    }
    if not text.strip():
        text = queries.get((group, query_id), "")
        run_extra["note_queries"] = (
            "query text taken from the instruction file by query_id"
            if text
            else f"no query text: the answer file has none and no instruction file has {group} {query_id}"
        )
    text = " ".join(text.split())

    leaves = _leaves(tree)
    paths = [_read_path(leaf) for leaf in leaves]
    answered = [i for i, p in enumerate(paths) if p.end == "give_answer"]
    final = answered[-1] if answered else len(leaves) - 1
    final_ids = {id(n) for n in leaves[final].path}
    agent = _agent(method)
    branch = 0
    for i, (leaf, p) in enumerate(zip(leaves, paths, strict=True)):
        is_final = i == final
        used, invalid = [], []
        for name in p.calls:
            skill = by_function.get(name) if name in offered else None
            (used if skill else invalid).append(skill or name)
        extra = {
            **run_extra,
            "calls": p.calls,
            "failed_calls": p.failed_calls,
            "end": p.end,
            "leaf_depth": p.depth,
            "pruned": bool(leaf.path[-1].get("pruned")),
        }
        if invalid:
            extra["invalid_calls"] = invalid
        if is_final:
            trace_id = f"{task_id}-final"
            extra["kind"] = "final"
            if not answered:
                extra["note_final"] = "no path gave an answer; the last explored path stands as the final try"
            reward, reward_source = (1.0 if data["win"] else 0.0), "toolbench: win"
        else:
            branch += 1
            trace_id = f"{task_id}-branch-{branch}"
            shared = [n for n in leaf.path if id(n) in final_ids]
            extra.update(
                kind="failed_branch",
                branch_of=f"{task_id}-final",
                diverges_at_depth=int(shared[-1].get("depth") or 0) if shared else 0,
            )
            reward, reward_source = 0.0, "toolbench: failed branch of the DFS tree"
        yield TraceRecord(
            trace_id=trace_id,
            task_id=task_id,
            used=list(dict.fromkeys(used)),
            reward=reward,
            queries=[QueryRecord(text)] if text else [],  # one object per record: ingestion mutates it
            agent=agent,
            attempt=i + 1,  # exploration order: the final try is the last
            timestamp=None,  # the source has no time; a window must be given on ingestion
            used_ordered=True,
            reward_source=reward_source,
            source=f"{file}#{'final' if is_final else f'branch-{branch}'}",
            source_format=FORMAT,
            extra=extra,
        )
