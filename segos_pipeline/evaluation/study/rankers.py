"""The rankers the study compares beside segos: flat BM25 and the naive trace probe (SPEC §8)."""

from __future__ import annotations

from typing import Protocol

import polars as pl

from ..metrics import rank_by_score
from .queries import StudyQuery


class Ranker(Protocol):
    def ranked_ids(self, query: str, k: int) -> list[str]: ...


class BM25Ranker:
    """Flat BM25 (`bm25s`) over each skill's name + description + body, English stopwords removed."""

    def __init__(self, nodes: pl.DataFrame):
        import bm25s  # imported here: only the study needs it, and it is slow to import

        self._bm25s = bm25s
        corpus = [
            f"{n} {d or ''} {b or ''}" for n, d, b in nodes.select("name", "description", "body").iter_rows()
        ]
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
        self.ids = nodes["id"].to_list()

    def ranked_ids(self, query: str, k: int) -> list[str]:
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if not tokens:
            return []
        # Full score vector + our own tie rule, not bm25s' top-k, so ties order the same way every run.
        return [self.ids[i] for i in rank_by_score(self.model.get_scores(tokens), k)]


# The naive probe of SPEC §8 ("Experience"): flat BM25 over each skill's text with the requests of the
# successful traces that used it appended. It learns the traced requests' words, and starves the skills
# without traces; the study measures both beside segos.
PROBE = "bm25+traces"
PROBE_LABEL = (
    "flat BM25 over each skill's text with its successful traces' requests appended (the naive probe)"
)


def with_requests(nodes: pl.DataFrame, frame: pl.DataFrame, success: float) -> pl.DataFrame:
    """The node table with each skill's body followed by the requests of the successful traces of `frame`
    (the trace contract's `queries`, `used`, `reward`) that used it."""
    asked = (
        frame.filter(pl.col("reward") >= success)
        .select(pl.col("queries").list.eval(pl.element().struct.field("text")).alias("text"), "used")
        .explode("used")
        .explode("text")
        .drop_nulls()
        .group_by("used")
        .agg(pl.col("text").sort().str.join(" "))
    )
    return (
        nodes.join(asked, left_on="id", right_on="used", how="left", maintain_order="left")
        .with_columns(
            body=pl.concat_str([pl.col("body").fill_null(""), pl.col("text").fill_null("")], separator=" ")
        )
        .drop("text")
    )


def traced_skills(frame: pl.DataFrame, success: float) -> set[str]:
    """The skills used on a successful trace of `frame`."""
    used = frame.filter(pl.col("reward") >= success)["used"].explode().drop_nulls()
    return set(used.to_list())


def gold_traced(q: StudyQuery, traced: set[str]) -> str:
    """ "traced" when every gold skill of the query was used on a successful trace of the evolution side,
    "untraced" when none was, "mixed" otherwise (a gold name may match several skills: any counts)."""
    hits = [bool(g & traced) for g in q.gold]
    return "traced" if all(hits) else "untraced" if not any(hits) else "mixed"
