"""Why a skill is in a bundle: every reason, strongest first, and a one-line headline.

One place for `Retriever.retrieve` (the CLI's `segos retrieve --json` and the Python API) and the service's
ordered bundles (MCP `retrieve_skill_bundle`), so both say the same thing. Reasons come from the ranking
(experience, co-use, seed and lexical evidence) and from the edges between a member and the other members
or the query's seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import AVOID, DEPENDENCY, SEMANTIC, WORKFLOW
from ..text.excerpts import one_line
from .experience import CoUse, ExperienceEvidence, ExperienceIndex
from .incidence import Edge

# Strongest first: the first that applies is the headline.
REASON_PRIORITY = (
    "experience",
    "co-use",
    "seed",
    "prerequisite",
    "consumer",
    "workflow",
    "lexical",
    "semantic",
    "alternative",
    "graph",
)

PHRASES = {
    "experience": "used on {tasks} successful task(s) like '{request}'",
    "co-use": "used with {via} on {tasks} successful task(s)",
    "seed": "lexical seed: among the query's best matches",
    "lexical": "matches the query's terms",
    "prerequisite": "prerequisite of {via}: its outputs feed it (dependency edge)",
    "consumer": "uses the outputs of {via} (dependency edge)",
    "workflow": "workflow neighbour of {via}: used together on successful tasks",
    "semantic": "semantic neighbour of {via}",
    "alternative": "alternative to {via}",
    "graph": "reached from the seeds through the skill graph",
}

REQUEST_CHARS = 80  # of a witnessing request quoted in a `why`
DIGITS = 6  # a reason's weight is rounded to this many decimals (replies stay short)


def learned(
    index: ExperienceIndex | None,
    evidence: ExperienceEvidence | None,
    co_use: CoUse | None,
    node: int,
    own: float,
    ids: Sequence[str],
) -> list[dict[str, Any]]:
    """What a bundle member learned from traces that put it there (the ranking's experience `evidence` and
    `co_use`): co-use, when the best candidate brought it along (the tasks they shared); experience, when
    it counted for this query as much as the skill's `own` evidence did (μ·m, its text's words and
    meaning) and as the co-use lift that replaced its score, if any, with the tasks and the closest
    request it served. A skill that its own text ranks, or that came along with another, is not said to be
    there by experience for the little experience added."""
    if index is None:
        return []
    out: list[dict[str, Any]] = []
    lift = co_use.of(node) if co_use is not None else 0.0
    value = evidence.at(node) if evidence is not None else 0.0
    explained = index.explain(node, evidence) if evidence is not None and value > 0 else None
    if explained is not None and value >= max(own, lift):
        tasks, request = explained
        out.append(
            _reason("experience", None, None, value, tasks=tasks, request=one_line(request, REQUEST_CHARS))
        )
    if co_use is not None and lift > 0:
        tasks = int(index.co_tasks[co_use.anchor, node])
        out.append(_reason("co-use", str(ids[co_use.anchor]), None, lift, tasks=tasks))
    return out


def reasons(
    sid: str,
    seed: bool,
    lexical: float,
    graph: float,
    link: set[str],
    touching: Sequence[Edge],
    from_traces: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Every reason a bundle member is there, strongest first: what it learned from traces (`learned`), its
    own query evidence, then its edges to other members or to the query's seeds (`link`)."""
    out = list(from_traces)
    if seed:
        out.append(_reason("seed", None, None, lexical))
    elif lexical > 0:
        out.append(_reason("lexical", None, None, lexical))
    for src, dst, rel, w in touching:
        other = dst if src == sid else src
        if other == sid or other not in link or rel == AVOID:
            continue
        if rel == DEPENDENCY:
            kind = "prerequisite" if src == sid else "consumer"
        elif rel == WORKFLOW:
            kind = "workflow"
        elif rel == SEMANTIC:
            kind = "semantic"
        else:
            kind = "alternative"
        out.append({**_reason(kind, other, rel, w), "direction": "out" if src == sid else "in"})
    if not out:
        out.append(_reason("graph", None, None, graph))
    out.sort(key=lambda r: (REASON_PRIORITY.index(r["kind"]), -(r["weight"] or 0.0), r["via"] or ""))
    return out


def headline(reasons: Sequence[dict[str, Any]]) -> str:
    top = reasons[0]
    return PHRASES[top["kind"]].format(**top)


def _reason(kind: str, via: str | None, relation: str | None, weight: float, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "via": via, "relation": relation, "weight": round(float(weight), DIGITS), **extra}
