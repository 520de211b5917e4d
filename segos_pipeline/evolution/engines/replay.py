"""Retrieval reconstruction against the parent version: query texts replayed through its Retriever."""

from __future__ import annotations

from collections.abc import Callable

from ...progress import Progress, Tick
from ...retrieval.ranker import Retriever

MEMO_LIMIT = 200_000  # distinct texts remembered per process; past it the memo starts again
# Texts between two progress ticks: a window of 17k requests replays in about 20 s, so a tick is a few
# hundred milliseconds of work, and the ticks cost nothing next to it.
TICK_EVERY = 256
REPLAY_STAGE = "replay queries against the parent"


class Replay:
    """Replays query texts against one version, each distinct text once per process (a window cut into
    partitions meets the same text in several of them). The Retriever is built on first need, so a window
    whose traces all recorded their retrieval never pays for it."""

    def __init__(self, make_retriever: Callable[[], Retriever], progress: Progress | None = None):
        """`progress` hears how many query texts have been replayed so far (a `Tick` with no total: the
        texts that need it are found partition by partition)."""
        self._make = make_retriever
        self._retriever: Retriever | None = None
        self._memo: dict[str, tuple[list[str], list[str]]] = {}
        self._progress = progress
        self._replayed = 0

    @property
    def retriever(self) -> Retriever:
        if self._retriever is None:
            self._retriever = self._make()
        return self._retriever

    def __call__(self, texts: list[str]) -> list[tuple[list[str], list[str]]]:
        out = []
        for t in texts:
            out.append(self._one(t))
            self._replayed += 1
            if self._progress is not None and self._replayed % TICK_EVERY == 0:
                self._progress(Tick(REPLAY_STAGE, self._replayed))
        if self._progress is not None and texts:
            self._progress(Tick(REPLAY_STAGE, self._replayed))
        return out

    def _one(self, text: str) -> tuple[list[str], list[str]]:
        hit = self._memo.get(text)
        if hit is None:
            r = self.retriever
            ranking = r.rank(text, depth=r.config.top_n)
            chosen, _ = r.select(ranking, r.config.top_n)
            hit = ([str(r.ids[i]) for i in chosen], [str(r.ids[i]) for i in ranking.seeds])
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            self._memo[text] = hit
        return hit
