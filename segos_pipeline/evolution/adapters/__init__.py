"""Adapters: real public trace formats → the trace contract (`segos_pipeline.evolution.traces`, SPEC §7).

Each format yields `TraceRecord`s that carry skill NAMES (ingestion resolves them against a version)
and a `Rejected` for every input that cannot become one, with a reason a user can act on. Formats that
define their own skill library (API-Bank, ToolBench) can also write it as SKILL.md packages.

- `native`: the project's own JSONL (SPEC §7), each line validated by `traces.validate_line`.
- `skillsbench-trials`: SkillsBench harness trials; query text from the eval file given as `queries=`.
- `apibank`: API-Bank level-3 tasks (ordered, all successful plans); `plans()` gives the true orders.
- `toolbench`: ToolBench DFS answer trees: the final try and one failed trace per abandoned branch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...config import TRACE_FORMATS
from ..traces import TraceRecord
from . import apibank, skillsbench_trials, toolbench
from .common import Rejected, Skipped, native_records

__all__ = ["FORMATS", "Rejected", "Skipped", "iter_records", "plans", "write_library"]

FORMATS = TRACE_FORMATS
plans = apibank.plans


def iter_records(
    path: Path, fmt: str, *, queries: Path | None = None
) -> Iterator[TraceRecord | Rejected | Skipped]:
    """Every trace of `path` in format `fmt`, or a Rejected for input that cannot become one.

    `queries` (the eval JSONL with `task` and `instruction`) is read by `skillsbench-trials` only; the
    other formats carry their query text themselves and ignore it.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace source not found: {path}")
    if fmt == "native":
        return native_records(path)
    if fmt == "skillsbench-trials":
        return skillsbench_trials.iter_records(path, Path(queries) if queries is not None else None)
    if fmt == "apibank":
        return apibank.iter_records(path)
    if fmt == "toolbench":
        return toolbench.iter_records(path)
    raise ValueError(f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")


def write_library(path: Path, fmt: str, out_dir: Path) -> dict[str, Any]:
    """For formats that define their own skill library (apibank, toolbench): write SKILL.md packages
    generated from the source into out_dir and return a summary (skills written, with/without I/O ...).
    Raises ValueError for formats that have no library (native, skillsbench-trials)."""
    path, out_dir = Path(path), Path(out_dir)
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt in ("native", "skillsbench-trials"):
        raise ValueError(f"format {fmt!r} has no skill library of its own: its traces name skills of yours")
    if not path.exists():
        raise FileNotFoundError(f"trace source not found: {path}")
    if fmt == "apibank":
        return apibank.write_library(path, out_dir)
    return toolbench.write_library(path, out_dir)
