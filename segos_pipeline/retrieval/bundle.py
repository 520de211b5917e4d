"""What a bundle is and how its skills are hydrated: the records `Retriever.retrieve` returns, the text an
agent reads for a skill, and the per-skill and global character budgets (SPEC §6, hydration)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..text.excerpts import clip


@dataclass
class BundleSkill:
    id: str
    name: str
    rank: int
    score: float  # ρ, the rerank score
    chars: int  # characters of the hydrated text (0 when not hydrated)
    seed: bool
    lexical: float  # m_i(q), field evidence
    graph: float  # s*_i, PPR mass
    source_path: str
    capability: str
    text: str = ""
    semantic: float = 0.0  # embedding evidence in [0, 1] (0 when semantic evidence is off)
    # Absolute, unlike the evidence above (normalised per query): see `Relevance`.
    relevance: float = 0.0
    words: float = 0.0
    cosine: float | None = None
    experience: float = 0.0  # what the skill's past successful requests added to ρ (0 without experience)
    co_use: float = 0.0  # its score when co-use completion raised it to that (0 otherwise)
    why: str = ""  # the strongest reason it is there, in words (why.py)
    reasons: list[dict[str, Any]] = field(default_factory=list)  # every reason, strongest first
    # The package folder on this machine (absolute), or None with why not (packages.py): an agent runs the
    # skill's scripts from there.
    folder: str | None = None
    folder_error: str | None = None


@dataclass
class Bundle:
    version: str
    query: str
    skills: list[BundleSkill]
    chars: int
    pruned: list[dict[str, str]] = field(default_factory=list)  # {"id", "avoided_with"} (avoid pruning)
    over_budget: list[str] = field(default_factory=list)  # ids cut by the global character budget
    seeds: list[str] = field(default_factory=list)  # ids of the query's seeds (members or not)
    # No skill reached the relevance floor `min_score`: the bundle is empty rather than padded with the
    # query's best of nothing.
    no_match: bool = False
    min_score: float = 0.0

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.skills]

    def to_dict(self, with_text: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not with_text:
            for s in out["skills"]:
                s.pop("text")
        return out


def render_skill(row: dict[str, Any]) -> str:
    """The hydrated form an agent reads: identity, provenance, contract, then the body."""
    lines = [f"### {row['name']} (`{row['id']}`)", f"Source: {row['source_path']}"]
    if row.get("capability"):
        lines.append(f"Capability: {row['capability']}")
    for label, key in (("Inputs", "inputs"), ("Outputs", "outputs"), ("Entrypoints", "entrypoints")):
        if row.get(key):
            lines.append(f"{label}: {'; '.join(row[key])}")
    return "\n".join(lines) + "\n\n" + (row.get("body") or row.get("description") or "")


def hydrate_rows(
    rows: list[dict[str, Any]], per_skill_chars: int, total_chars: int
) -> tuple[list[tuple[int, str]], list[str]]:
    """Hydrated texts under the budgets, in the given order: ([(position in rows, text)], ids that no
    longer fit the global budget). Earlier rows get the budget first."""
    return hydrate_texts([(row["id"], render_skill(row)) for row in rows], per_skill_chars, total_chars)


def hydrate_texts(
    texts: list[tuple[str, str]], per_skill_chars: int, total_chars: int
) -> tuple[list[tuple[int, str]], list[str]]:
    """`hydrate_rows` over already rendered (id, text) pairs; a text clipped to the per-skill budget
    before gives the same result (clipping to a smaller budget after it is the same cut)."""
    kept: list[tuple[int, str]] = []
    over: list[str] = []
    used = 0
    for pos, (skill_id, rendered) in enumerate(texts):
        budget = min(per_skill_chars, total_chars - used)
        if budget <= 0:
            over.append(skill_id)
            continue
        text = clip(rendered, budget)
        used += len(text)
        kept.append((pos, text))
    return kept, over
