"""Progress events of long work (build, ingest, evolve), for whoever shows them.

The library never prints: a long function takes an optional `progress` callable and sends it events. A
plain `str` is a message; a `Tick` says how far a counted stage is (a progress bar's input); a `StageDone`
closes a stage with its wall time (a summary's input). `None` means silence.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Tick:
    stage: str
    done: int
    total: int | None = None  # None: the total is not known up front


@dataclass(frozen=True)
class StageDone:
    stage: str
    seconds: float
    detail: str = ""


Event = str | Tick | StageDone
Progress = Callable[[Event], None]


def emit(progress: Progress | None, event: Event) -> None:
    if progress is not None:
        progress(event)


@contextmanager
def stage(progress: Progress | None, name: str, detail: Callable[[], str] | None = None) -> Iterator[None]:
    """Time a stage and report it as done (with an optional detail computed at the end)."""
    t0 = time.perf_counter()
    yield
    emit(progress, StageDone(name, time.perf_counter() - t0, detail() if detail else ""))
