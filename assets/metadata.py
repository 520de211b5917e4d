"""What the Dagster UI shows of the assets: owners, kinds, tags, column schemas, tables, rounded numbers.

Dagster plots every numeric metadata entry across materializations, so only the numbers worth a plot are
numbers here (row counts, edges by relation, recall and COMP); the rest goes into JSON or table entries.
Tables (problems, revisions, a diff's largest changes) are `MetadataValue.table` with their schema, which
the UI renders as sortable tables; column schemas of the fixed tables come from the library's own
schemas, so they cannot drift from what is written, and each column's description from the column tables
of docs/data-contracts.md (the code location runs from a checkout, which holds docs/), so the UI says what
the documentation says.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl
from dagster import DataVersion, MetadataValue, Output, TableColumn, TableRecord, TableSchema

from segos_pipeline.graph.edges import counts_by_relation
from segos_pipeline.pipeline.stages import content_hash

from .locations import PROJECT_ROOT

OWNERS = ["team:segos"]
CONTRACTS = PROJECT_ROOT / "docs" / "data-contracts.md"
DIGITS = 4  # plotted floats: 0.9635 rather than 0.9635416666666667

# `kinds` are the badges (and icons) the asset graph shows; Dagster knows polars, parquet and scipy.
TABLE_KINDS = {"polars", "parquet"}
MATRIX_KINDS = {"scipy"}
RECORD_KINDS = {"json"}


def tags(stage: str, layer: str) -> dict[str, str]:
    """Tags to filter the catalog by: the SPEC stage and the layer of the pipeline."""
    return {"segos/stage": stage, "segos/layer": layer}


def _dtype(dtype: Any) -> str:
    return str(dtype) if not isinstance(dtype, type) else dtype.__name__


def table_schema(schema: Mapping[str, Any], descriptions: Mapping[str, str] | None = None) -> TableSchema:
    """A polars schema (column → dtype) as a Dagster TableSchema (types named as polars names them)."""
    notes = descriptions or {}
    return TableSchema(
        columns=[
            TableColumn(name=name, type=_dtype(dtype), description=notes.get(name))
            for name, dtype in schema.items()
        ]
    )


def _plain(markdown: str) -> str:
    """Markdown cell text as the UI shows plain text: no backticks, links as their text."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown).replace("`", "").strip()


def contract_columns(text: str) -> dict[str, dict[str, str]]:
    """{section heading: {column: meaning}} of every column table in data-contracts.md: a table whose
    header's first cell is `column` and last `meaning`; a row naming several columns gives each of them
    its meaning."""
    tables: dict[str, dict[str, str]] = {}
    heading, in_table = "", False
    for line in text.splitlines():
        if line.startswith("#"):
            heading, in_table = line.lstrip("#").strip(), False
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "column" and cells[-1] == "meaning":
            in_table = True
            continue
        if not in_table or set(cells[0]) <= set("-:"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            tables.setdefault(heading, {})[name] = _plain(cells[-1])
    return tables


def column_schema(schema: Mapping[str, Any], table: str, contracts: Path = CONTRACTS) -> dict[str, Any]:
    """Definition metadata declaring an asset's columns (`dagster/column_schema`), each with its meaning
    from the data-contracts.md section whose heading starts with `table`."""
    tables = contract_columns(contracts.read_text(encoding="utf-8"))
    found = [cols for heading, cols in tables.items() if heading.startswith(table)]
    if not found:
        raise ValueError(f"{contracts} has no column table under a heading starting {table!r}")
    return {"dagster/column_schema": table_schema(schema, found[0])}


def _cell(value: Any) -> str | int | float | bool | None:
    """A value a TableRecord accepts (str, int, float, bool or None): lists joined, floats rounded."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, DIGITS)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def table(rows: Iterable[Mapping[str, Any]], schema: Mapping[str, Any]) -> MetadataValue:
    """Rows (dicts) as a `MetadataValue.table` with the columns of `schema`, in its order."""
    records = [TableRecord({name: _cell(row.get(name)) for name in schema}) for row in rows]
    return MetadataValue.table(records, schema=table_schema(schema))


def frame_table(frame: pl.DataFrame, columns: list[str], limit: int) -> MetadataValue:
    """The first `limit` rows of a polars frame as a table, with the frame's own column types."""
    head = frame.select(columns).head(limit)
    return table(head.iter_rows(named=True), {c: head.schema[c] for c in columns})


def rounded(value: float) -> float:
    return round(float(value), DIGITS)


def edge_output(
    name: str, edges: pl.DataFrame, record: dict[str, Any] | None = None, **metadata: Any
) -> Output[dict[str, Any]]:
    """An edge-table stage's output: its counts as the record (plus `record`), versioned by the table's
    content, with the row count and the edges by relation (plus `metadata`) as metadata."""
    by_relation = counts_by_relation(edges)
    return Output(
        {"edges": edges.height, "edges_by_relation": by_relation, **(record or {})},
        output_name=name,
        data_version=DataVersion(content_hash(edges)),
        metadata={
            "dagster/row_count": edges.height,
            "edges_by_relation": MetadataValue.json(by_relation),
            **metadata,
        },
    )
