"""Text cut to a budget of characters: a hydrated skill under its budget, a request quoted in a `why` or a
diff, a value echoed in an error. One rule everywhere: at most `budget` characters, "…" where it was cut."""

from __future__ import annotations


def clip(text: str, budget: int) -> str:
    """`text` cut to at most `budget` characters, its last one "…" when something was cut."""
    if len(text) <= budget:
        return text
    return text[: max(budget - 1, 0)] + "…"


def one_line(text: str, budget: int) -> str:
    """`text` on one line (each run of whitespace one space), clipped to `budget` characters."""
    return clip(" ".join(text.split()), budget)
