"""What the Dagster UI shows of the assets: owners, kinds, tags, column schemas, tables, rounded numbers.

Dagster plots every numeric metadata entry across materializations, so only the numbers worth a plot are
numbers here (row counts, edges by relation, recall and COMP); the rest goes into JSON or table entries.
Tables (problems, revisions, a diff's largest changes) are `MetadataValue.table` with their schema, which
the UI renders as sortable tables; column schemas of the fixed tables come from the library's own
schemas, so they cannot drift from what is written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl
from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

OWNERS = ["team:segos"]
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


def column_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Definition metadata declaring an asset's columns (`dagster/column_schema`)."""
    return {"dagster/column_schema": table_schema(schema)}


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
