"""Checks and bounds of the arguments a service request takes (query, counts, budgets, relevance floor)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import MAX_TEXT_CHARS, MAX_TOP, RetrievalConfig
from .errors import ServiceError

MAX_ECHO_CHARS = 200  # of a query, repeated in a reply


def checked_query(query: Any) -> str:
    """`query` stripped, unless it is empty or longer than a trace may record one (MAX_TEXT_CHARS): a query
    is read in full and echoed in replies, so its length is what bounds a request's work and its reply.
    The one check of a query, for the service's requests and the CLI's commands alike."""
    if not isinstance(query, str) or not query.strip():
        raise ServiceError("the query is empty; describe the task to retrieve skills for")
    query = query.strip()
    if len(query) > MAX_TEXT_CHARS:
        raise ServiceError(
            f"the query is {len(query):,} characters; at most {MAX_TEXT_CHARS:,} are accepted: "
            "describe the task, not its data"
        )
    return query


def echoed(query: str) -> str:
    """The query as a reply repeats it: a bounded prefix (the client has the rest), so that a reply never
    grows with what a client sends."""
    return query if len(query) <= MAX_ECHO_CHARS else query[:MAX_ECHO_CHARS] + "…"


def bounded_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= int(value) <= MAX_TOP:
        raise ServiceError(f"{name} must be an integer between 1 and {MAX_TOP}, got {value!r}")
    return int(value)


def checked_min_score(value: float | None) -> float | None:
    """A relevance floor from a client: a finite number from 0 (off) up, or None for the configured one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ServiceError(f"min_score must be a number from 0 (no floor) up, got {value!r}")
    return float(value)


def char_budget(config: RetrievalConfig, max_chars: int | None) -> int:
    """The global character budget of a request (the configured one unless given)."""
    total = config.total_chars if max_chars is None else int(max_chars)
    if total < 1:
        raise ServiceError("max_chars must be a positive number of characters")
    return total
