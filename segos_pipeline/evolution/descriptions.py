"""L3 description update (SPEC §8): candidates → critic → editor → gates → committed revisions.

- Candidate: a skill used on a successful trace whose rank for that trace's query is outside the top-N.
- Critic: names what the description lacks: words of the skill's own package that the witnessing query
  needs and the description, capability and name do not contain (rarest first).
- Editor: proposes a revision. The default `GroundedEditor` needs no model and may only add words that
  occur in the package text; a model-backed editor (OpenAI-compatible endpoint) sits behind the same
  interface and its output must pass the same grounding check, so neither can paste a query's
  vocabulary into a description.
- Gate 1: commit only if replaying the witnessing query lifts the skill's rank.
- Gate 2: no committed revision may lower the skill's rank on any other query of the window on which
  the skill was used.
Revisions are tried against the round's graph with a patched lexical row (cheap); the chosen set is then
verified against an index rebuilt with all revisions applied, and any revision that fails there is
dropped (until the set is stable). Only revised skills are re-tokenised (`patch_tokens`), so the cost
follows the candidates, not the library. Every attempt is recorded: before, after, evidence, ranks,
outcome; an editor failure (`editor.EditorError`: deadline, size cap, malformed reply, ...) is the
outcome of its revision and never ends the round. The editors themselves live in `editor.py`.
"""

from __future__ import annotations

import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ..config import EvolutionConfig
from ..progress import Progress, Tick
from ..retrieval.ranker import Retriever, RowPatch
from ..text.token_rows import token_table
from ..text.tokens import keep_word, stem
from .editor import Critique, Editor, EditorError, make_editor
from .evidence import WindowEvidence, l3_partials

_WORD = re.compile(r"[^\W_]+")

REVISION_SCHEMA: dict[str, pl.DataType] = {
    "skill": pl.String,
    "query": pl.String,
    "evidence_traces": pl.List(pl.String),
    "missing_terms": pl.List(pl.String),
    "before": pl.String,
    "after": pl.String,
    "editor": pl.String,
    "rank_before": pl.Int64,  # null: the skill had no evidence for the query at all
    "rank_after": pl.Int64,
    "other_queries": pl.Int64,
    "worst_other_change": pl.Int64,  # max over other queries of (rank_after − rank_before); > 0 is a loss
    "committed": pl.Boolean,
    "outcome": pl.String,
}


# ------------------------------------------------------------------------------------------------ critic


def package_text(row: dict[str, Any]) -> str:
    parts = [row["name"], row["description"] or "", row["capability"] or "", row["body"] or ""]
    for key in ("domain_tags", "tooling", "inputs", "outputs", "example_tasks", "entrypoints"):
        parts.extend(row[key] or [])
    return "\n".join(parts)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ungrounded_words(before: str, after: str, package: str) -> set[str]:
    """Content words of `after` that are neither in `before` nor anywhere in the package text.

    Stopwords and numbers are exempt: the tokenizer drops them, so they cannot move a skill's rank.
    """
    return {w for w in words(after) if keep_word(w)} - set(words(before)) - set(words(package))


def critique(row: dict[str, Any], query: str, idf: Callable[[str], float]) -> Critique:
    """Package words the query needs that the description, capability and name lack (rarest first)."""
    described = {
        stem(w) for w in words(" ".join([row["name"], row["description"] or "", row["capability"] or ""]))
    }
    surface: dict[str, Counter[str]] = {}
    for w in words(package_text(row)):
        if keep_word(w):
            surface.setdefault(stem(w), Counter())[w] += 1
    wanted = {stem(w) for w in words(query) if keep_word(w)}
    missing = [t for t in wanted if t in surface and t not in described]
    missing.sort(key=lambda t: (-idf(t), t))
    chosen = [surface[t].most_common(1)[0][0] for t in missing]
    note = f"the description lacks {', '.join(chosen)}" if chosen else "nothing in the package fits the query"
    return Critique(row["id"], query, chosen, note)


# ------------------------------------------------------------------------------------------------- round


L3_STAGE = "L3: skills whose description is tried"


@dataclass
class L3Result:
    nodes: pl.DataFrame
    tokens: pl.DataFrame
    revisions: pl.DataFrame
    counters: dict[str, int] = field(default_factory=dict)


def description_update(
    retriever: Retriever,
    traces: pl.DataFrame | WindowEvidence,
    config: EvolutionConfig,
    top_n: int,
    editor: Editor | None = None,
    rebuild: Callable[[pl.DataFrame, pl.DataFrame, np.ndarray], Retriever] | None = None,
    progress: Progress | None = None,
) -> L3Result:
    """Run L3 on the round's graph (`retriever`); `rebuild(nodes, revised skills' token rows, their row
    numbers)` gives a retriever over revised nodes for the exact verification pass. `traces` is the
    round's selected traces, or the window's evidence whose `witnesses` and `usage` the engine summed from
    them (the same candidates, without holding the traces).

    The cost follows the candidates, not the library: revisions are tried on patched rows of
    `retriever`'s index, only the revised skills are re-tokenised (`revised_tokens`, `patch_tokens`), and
    `rebuild` is called once when some revision passed both gates (again only in a round where that exact
    pass reverts one, for the smaller set), never when none did. `progress` hears each skill examined (a
    `Tick` out of the skills that will be): its gates replay every other request the skill served.
    """
    editor = editor or make_editor(config)
    nodes, tokens = retriever.snapshot.nodes, retriever.snapshot.tokens
    # Candidates from what the retriever returned on the trace (recorded or reconstructed): a skill used
    # on a successful trace but absent from that query's top-N. No replay is needed to find them.
    if isinstance(traces, pl.DataFrame):
        missed, usage = l3_partials(traces, top_n)
    else:
        missed, usage = traces.witnesses, traces.usage
    witnessed = missed.group_by("skill", "text").agg(traces=pl.col("trace_id").unique().sort())
    positions = RankPositions(retriever)
    # Only the skills of the window's traces need a row number: a dict over the whole library would be
    # the one part of L3 that grows with it.
    index = _row_numbers(nodes, usage["skill"].unique())

    def rank(text: str, skill: str) -> int | None:
        return positions.of(text, index[skill])

    cands = [
        row
        for row in witnessed.sort(
            pl.col("traces").list.len(), "skill", "text", descending=[True, False, False]
        ).iter_rows()
        if row[0] in index
    ]
    counters = {
        "candidates": len(cands),
        "examined": 0,
        "already_in_top_n": 0,
        "no_missing_words": 0,
        "editor_declined": 0,
        "editor_errors": 0,
        "editor_over_budget": 0,
        "rejected_ungrounded": 0,
        "failed_gate_rank": 0,
        "failed_gate_other_queries": 0,
        "committed": 0,
        "reverted_on_verification": 0,
    }
    idf = retriever.lexical.idf
    records: list[dict[str, Any]] = []
    accepted: dict[str, dict[str, Any]] = {}
    seen_skills: set[str] = set()
    other_by_skill = usage.group_by("skill").agg(texts=pl.col("text").unique().sort())
    others = dict(other_by_skill.iter_rows())
    editor_spent = 0.0  # seconds inside editor.propose this round
    to_examine = min(len({row[0] for row in cands}), config.l3_max_candidates)

    def reject(counter: str, record: dict[str, Any], outcome: str) -> None:
        """Count a revision that stops at `counter` and record why."""
        counters[counter] += 1
        records.append({**record, "outcome": outcome})

    for skill, text, trace_ids in cands:
        if skill in seen_skills:
            continue  # one revision per skill per round, for its most witnessed query
        if counters["examined"] >= config.l3_max_candidates:
            break
        seen_skills.add(skill)
        counters["examined"] += 1
        if progress is not None:
            progress(Tick(L3_STAGE, counters["examined"], to_examine))
        i = index[skill]
        r_before = rank(text, skill)
        if r_before is not None and r_before <= top_n:
            counters["already_in_top_n"] += 1  # this round's edges already lifted it: nothing to rewrite
            continue
        row = nodes.row(i, named=True)
        crit = critique(row, text, idf)
        base = {
            "skill": skill,
            "query": text,
            "evidence_traces": trace_ids,
            "missing_terms": crit.missing,
            "before": row["description"],
            "after": None,
            "editor": editor.name,
            "rank_before": r_before,
            "rank_after": None,
            "other_queries": 0,
            "worst_other_change": None,
            "committed": False,
        }
        if not crit.missing and editor.name == "grounded":
            reject("no_missing_words", base, "critic found no package word the query needs")
            continue
        if editor_spent >= config.editor_round_budget_s:
            budget = f"the round's editor budget ({config.editor_round_budget_s:g} s)"
            reject("editor_over_budget", base, f"editor not asked: {budget} is spent")
            continue
        pkg = package_text(row)
        t_edit = time.perf_counter()
        try:
            after = editor.propose(row["description"] or "", crit, pkg)
        except (EditorError, OSError, ValueError) as exc:  # a failed edit costs one revision, not the round
            reject("editor_errors", base, f"editor error: {exc}"[:300])
            continue
        finally:
            editor_spent += time.perf_counter() - t_edit
        if not after or after == row["description"]:
            reject("editor_declined", base, "editor proposed no change")
            continue
        stray = ungrounded_words(row["description"] or "", after, pkg)
        if stray:
            shown = ", ".join(sorted(stray)[:8])
            reject("rejected_ungrounded", {**base, "after": after}, f"ungrounded words: {shown}")
            continue
        revised = nodes.slice(i, 1).with_columns(description=pl.lit(after))
        patch = retriever.revision_patch(i, revised, token_table(revised).drop("node"))
        r_after = positions.of(text, i, patch)
        base = {**base, "after": after, "rank_after": r_after}
        if not _improves(r_before, r_after):
            reject("failed_gate_rank", base, "gate 1: witnessing query rank did not improve")
            continue
        other_texts = [t for t in others.get(skill, []) if t != text]
        worst = max((_delta(rank(t, skill), positions.of(t, i, patch)) for t in other_texts), default=0)
        base = {**base, "other_queries": len(other_texts), "worst_other_change": worst}
        if worst > 0:
            reject("failed_gate_other_queries", base, "gate 2: lowered the skill's rank on another query")
            continue
        accepted[skill] = {
            **base,
            "other_texts": other_texts,
            "rank_before_others": {t: rank(t, skill) for t in other_texts},
        }

    new_nodes, revised_rows = nodes, {}
    while accepted:  # exact verification with every accepted revision applied at once
        revised_rows = {index[s]: a["after"] for s, a in accepted.items()}
        new_nodes = _apply(nodes, revised_rows)
        if rebuild is None:
            break
        changed = np.array(sorted(revised_rows), dtype=np.int64)
        fresh = revised_tokens(new_nodes, changed).select(tokens.columns)
        exact = RankPositions(rebuild(new_nodes, fresh, changed))
        failed = []
        for skill, a in accepted.items():
            i = index[skill]
            r_after = exact.of(a["query"], i)
            before = a["rank_before_others"]
            worst = max((_delta(before[t], exact.of(t, i)) for t in a["other_texts"]), default=0)
            a["rank_after"], a["worst_other_change"] = r_after, worst
            if not _improves(a["rank_before"], r_after) or worst > 0:
                failed.append(skill)
        if not failed:
            break
        for skill in failed:
            why = "reverted: failed a gate on the rebuilt index"
            reject("reverted_on_verification", _record(accepted.pop(skill)), why)
        new_nodes, revised_rows = nodes, {}
    # the token table of the set kept, made once: a set reverted on verification never needs one
    new_tokens = patch_tokens(tokens, new_nodes, revised_rows)
    for a in accepted.values():
        records.append({**_record(a), "committed": True, "outcome": "committed"})
    counters["committed"] = len(accepted)
    revisions = (
        pl.DataFrame(records, schema=REVISION_SCHEMA) if records else pl.DataFrame(schema=REVISION_SCHEMA)
    )
    return L3Result(nodes=new_nodes, tokens=new_tokens, revisions=revisions, counters=counters)


class RankPositions:
    """`Retriever.rank_of` for many (query, skill) pairs: the same numbers, without sorting every
    candidate of a query (a count of the candidates ahead is enough), and with the unpatched ranking of
    a query kept for the other skills asked about it (a bounded number of queries)."""

    def __init__(self, retriever: Retriever, keep: int = 128):
        self.retriever = retriever
        self.keep = keep
        self._kept: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def of(self, query: str, node: int, patch: RowPatch | None = None) -> int | None:
        """1-based position of `node` in the ranking of `query` (None when it has no evidence)."""
        if patch is not None:
            ranking = self.retriever.rank(query, patch)
            return position(ranking.candidates, ranking.scores, node)
        kept = self._kept.get(query)
        if kept is None:
            ranking = self.retriever.rank(query)
            kept = (ranking.candidates, ranking.scores)
            self._kept[query] = kept
            if len(self._kept) > self.keep:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(query)
        return position(kept[0], kept[1], node)


def position(candidates: np.ndarray, scores: np.ndarray, node: int) -> int | None:
    """1-based place of `node` among `candidates` ordered by score, ties to the smaller index (the order
    of `Ranking.order`), or None when it is no candidate."""
    hit = np.flatnonzero(candidates == node)
    if len(hit) == 0:
        return None
    score = scores[hit[0]]
    ahead = np.count_nonzero(scores > score) + np.count_nonzero((scores == score) & (candidates < node))
    return int(ahead) + 1


def _record(a: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in a.items() if k in REVISION_SCHEMA}


def _row_numbers(nodes: pl.DataFrame, ids: pl.Series) -> dict[str, int]:
    """{id: row in `nodes`} for the given ids that are skills of `nodes` (unknown ids are left out)."""
    rows = (
        nodes.select("id")
        .with_row_index("row")
        .join(pl.DataFrame({"id": ids.cast(pl.String)}).unique(), on="id", how="inner")
    )
    return dict(zip(rows["id"].to_list(), rows["row"].to_list(), strict=True))


def _apply(nodes: pl.DataFrame, revised: dict[int, str]) -> pl.DataFrame:
    """`nodes` with the descriptions of the given rows replaced."""
    rows = sorted(revised)
    description = nodes["description"].cast(pl.String).scatter(rows, [revised[r] for r in rows])
    return nodes.with_columns(description=description)


def patch_tokens(tokens: pl.DataFrame, nodes: pl.DataFrame, changed: Iterable[int]) -> pl.DataFrame:
    """The token table of `nodes` given the table `tokens` of the same nodes before the rows `changed`
    were edited: those rows are re-tokenised and spliced in, every other row is kept as it is.

    Equal to `token_table(nodes)` (tokenising is row-local; tested), at a cost that follows the changed
    rows rather than the library.
    """
    rows = np.unique(np.fromiter(changed, dtype=np.int64))
    if len(rows) == 0:
        return tokens
    node = tokens["node"].to_numpy()
    if len(node) > 1 and np.any(node[1:] < node[:-1]):
        tokens = tokens.sort("node", "field", "token")  # splicing needs rows grouped by node, in order
        node = tokens["node"].to_numpy()
    fresh = revised_tokens(nodes, rows)
    local = np.searchsorted(rows, fresh["node"].to_numpy())
    starts = np.searchsorted(node, rows, side="left")
    ends = np.searchsorted(node, rows, side="right")
    fresh_bounds = np.searchsorted(local, np.arange(len(rows) + 1), side="left")
    pieces: list[pl.DataFrame] = []
    kept_from = 0
    for k in range(len(rows)):
        pieces.append(tokens.slice(kept_from, int(starts[k]) - kept_from))
        pieces.append(fresh.slice(int(fresh_bounds[k]), int(fresh_bounds[k + 1] - fresh_bounds[k])))
        kept_from = int(ends[k])
    pieces.append(tokens.slice(kept_from))
    return pl.concat(pieces, rechunk=True).select(tokens.columns)


def revised_tokens(nodes: pl.DataFrame, rows: np.ndarray) -> pl.DataFrame:
    """The token rows of the given rows of `nodes` (sorted, distinct), numbered by their row in `nodes`."""
    fresh = token_table(nodes[rows.tolist()])
    local = fresh["node"].to_numpy()
    return fresh.with_columns(node=pl.Series(rows[local], dtype=pl.UInt32))


def _improves(before: int | None, after: int | None) -> bool:
    if after is None:
        return False
    return before is None or after < before


def _delta(before: int | None, after: int | None) -> int:
    """Rank change (positive = worse); losing all evidence counts as a large loss."""
    if before is None:
        return 0 if after is None else -1
    if after is None:
        return 10**6
    return after - before
