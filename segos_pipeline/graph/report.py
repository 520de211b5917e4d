"""The build report (SPEC §3): one row per problem found while reading a library, and what was done."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

REPORT_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.String,
    "problem": pl.String,
    "action": pl.String,
    "severity": pl.String,  # "error": content lost or replaced; "warning": derived a missing field
}


@dataclass
class Problem:
    file: str
    problem: str
    action: str
    severity: str = "warning"
    code: str = ""


def report_frame(problems: list[Problem]) -> pl.DataFrame:
    """Problems as build-report rows (REPORT_SCHEMA)."""
    return pl.DataFrame(
        [(p.file, p.problem, p.action, p.severity) for p in problems], schema=REPORT_SCHEMA, orient="row"
    )
