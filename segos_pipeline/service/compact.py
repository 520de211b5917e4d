"""The compact forms of the service's answers: what an agent reads, without the figures behind them.

A full bundle carries every figure behind each member (evidence, graph mass, reasons, contracts, the
ordering's rule and constraints) for programs and people who audit a ranking. An agent acting on the
bundle needs less: the skills' texts in the order to use them, and one line of why each is there.

Two compact forms: the text a model reads (`bundle_text`, `search_text`: about half the characters of the
JSON for the same bundle), and the status and neighbour replies the MCP tools answer by default
(`brief_status`, `brief_neighbors`): the full object less deployment figures an agent has no use for (the
whole configuration, edge priors and evidence counts), reached again with `details=true`. A bundle's JSON
is never trimmed: it is the record `segos retrieve --json` and the Python API give, key for key, and its
compact form is the text.
"""

from __future__ import annotations

from typing import Any

NO_MATCH = (
    "No skill in this library is relevant to the request (none reaches relevance {floor:g}). "
    "Proceed without one, or rephrase the request."
)


def bundle_text(bundle: dict[str, Any]) -> str:
    """A `SegosService.retrieve_bundle` reply as Markdown: a header line, then each skill in execution
    order with why it is there and what to do first, then its hydrated text."""
    if bundle.get("no_match"):
        return NO_MATCH.format(floor=bundle.get("min_score", 0.0))
    skills = bundle["skills"]
    head = f"{len(skills)} skill(s) for this request, in the order to use them (version {bundle['version']})."
    lines = [head]
    for s in skills:
        after = f" Use after: {', '.join(s['after'])}." if s.get("after") else ""
        lines += ["", f"## {s['position']}. {s['name']} (`{s['id']}`)", f"Why: {s['why']}.{after}"]
        if s.get("folder"):  # where its scripts run from (absent: the package is not on this machine)
            lines.append(f"Folder: {s['folder']}")
        if s.get("text"):
            lines += ["", s["text"].strip()]
    if bundle.get("over_budget"):
        lines += ["", f"Not shown (character budget): {', '.join(bundle['over_budget'])}."]
    return "\n".join(lines) + "\n"


def search_text(result: dict[str, Any]) -> str:
    """A `SegosService.search` reply as one line per skill: rank, id, name and capability."""
    if result.get("no_match"):
        return NO_MATCH.format(floor=result.get("min_score", 0.0))
    rows = result["results"]
    lines = [f"{len(rows)} skill(s) (version {result['version']}):"]
    lines += [
        f"{r['rank']}. `{r['id']}` {r['name']}" + (f": {r['capability']}" if r.get("capability") else "")
        for r in rows
    ]
    return "\n".join(lines) + "\n"


# What the default status and neighbour replies leave out (`details=true` gives them): figures for auditing
# a deployment, which an agent neither needs nor should spend its context on.
STATUS_DETAILS = ("config",)
EDGE_DETAILS = ("w0", "n_e", "round_created", "round_updated")


def _without(obj: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


def brief_status(status: dict[str, Any]) -> dict[str, Any]:
    """A `get_status` reply without the whole configuration (the version, its counts, what is served)."""
    return _without(status, STATUS_DETAILS)


def brief_neighbors(neighbors: dict[str, Any]) -> dict[str, Any]:
    """A `get_skill_neighbors` reply whose edges keep id, name, relation and weight."""
    return {
        **neighbors,
        "out": [_without(e, EDGE_DETAILS) for e in neighbors["out"]],
        "in": [_without(e, EDGE_DETAILS) for e in neighbors["in"]],
    }
