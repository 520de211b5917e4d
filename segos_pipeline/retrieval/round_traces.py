"""The round traces an evolved version stores, and how they are read back (SPEC §9).

An evolved version read from a window of stored traces does not copy them: it stores what the round adds
per selected trace (trace id, success, retrieval reconstructed, and the queries where their retrieval was
reconstructed) in bucket files `round-NNNNN.parquet` by a hash of trace id (written by the engines,
`evolution/engines/round_parts.py`; one `round.parquet` in versions written before the buckets) and lists
the window's Parquet files under `window_files` in its manifest (`store.layout.window_refs`), checked on
every read (`round_traces`, which scans the buckets). A version evolved from a table in memory, and every
version written before this layout, stores the selected traces whole (`traces.parquet`), still read.
Every layout here was the one main wrote for a while (installed from main, as the README says), so each is
still read: a user's store may hold it.

Here rather than in the store, which knows files and hashes but not a trace's columns; here rather than in
evolution, which writes them, because execution order (`ordering.py`) reads them and sits below it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..store.errors import DamagedSnapshot, SnapshotError
from ..store.oserrors import explain
from ..store.version_files import VersionFiles

ROUND_TRACES = "traces.parquet"  # the selected traces whole (a round over a table in memory)
ROUND_ADDED = "round.parquet"  # per selected trace what the round adds, one file (versions before buckets)
# ... in buckets by a hash of trace id (`evolution/engines/round_parts.py`), what versions store now
ROUND_PART_RE = re.compile(r"^round-(\d{5,})\.parquet$")


def round_part_name(bucket: int) -> str:
    return f"round-{bucket:05d}.parquet"


def round_part_names(files: Mapping[str, Any]) -> list[str]:
    """A manifest's round bucket files, in bucket order."""
    return sorted((n for n in files if ROUND_PART_RE.match(n)), key=lambda n: int(ROUND_PART_RE.match(n)[1]))


def joined_round_traces(
    window: Sequence[Path], added: pl.DataFrame | pl.LazyFrame, columns: Sequence[str] | None = None
) -> pl.DataFrame:
    """A round's selected traces from its window's files and what the round added to them (a table, or a
    scan over its bucket files): the window's row of each selected trace, its outcome, and its queries
    with retrieval filled where it was reconstructed (queries without text are dropped, as reconstruction
    does), in trace-id order."""
    wanted = list(columns) if columns else None
    if not window:
        raise ValueError("the version lists no window files")
    scan = pl.scan_parquet(list(window))
    have = scan.collect_schema().names()
    take = [c for c in have if c not in ("success", "retrieval_reconstructed")]
    if wanted is not None:
        take = [c for c in take if c in wanted or c == "trace_id"]
    added_cols = ["trace_id", "success", "retrieval_reconstructed"]
    if "queries" in take:
        added_cols.append(pl.col("queries").alias("_added_queries"))
    added = added.lazy()
    joined = scan.select(take).join(added.select(added_cols), on="trace_id", how="inner")
    if "queries" in take:
        queries_type = added.collect_schema()["queries"]
        text_kept = pl.element().filter(pl.element().struct.field("text").is_not_null())
        joined = joined.with_columns(
            queries=pl.coalesce(
                "_added_queries",
                pl.col("queries").fill_null(pl.lit([], dtype=queries_type)).list.eval(text_kept),
            )
        ).drop("_added_queries")
    order = [c for c in take if c != "queries"] + ["success"]
    order += ["queries"] if "queries" in take else []
    order += ["retrieval_reconstructed"]
    if wanted is not None:
        order = [c for c in order if c in wanted]
    return joined.select(order).sort("trace_id").collect()


def has_round_traces(files: VersionFiles) -> bool:
    names = files.manifest.get("files", {})
    return ROUND_TRACES in names or ROUND_ADDED in names or bool(round_part_names(names))


def round_added(files: VersionFiles) -> pl.LazyFrame:
    """What the round added to each selected trace (ADDED_SCHEMA): a scan over its bucket files (or its
    one `round.parquet`, older versions), each checked against the manifest first."""
    names = files.manifest.get("files", {})
    stored = round_part_names(names) or ([ROUND_ADDED] if ROUND_ADDED in names else [])
    if not stored:
        raise SnapshotError(f"version {files.version} stores no round traces")
    files.check(stored)
    return pl.scan_parquet([files.path / n for n in stored])


def round_traces(files: VersionFiles, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The round's selected traces (of `columns`, default all), stored whole or as what the round added to
    its window's traces. Every file read is checked against its manifest hash first: `DamagedSnapshot`
    names the ones that fail (a window file gone or rewritten included)."""
    if ROUND_TRACES in files.manifest.get("files", {}):
        files.check([ROUND_TRACES])
        with files.reading(ROUND_TRACES):
            path = files.path / ROUND_TRACES
            have = pl.read_parquet_schema(path)
            return pl.read_parquet(path, columns=[c for c in columns if c in have] if columns else None)
    added = round_added(files)  # raises for a version that stores no round traces
    window = files.window_files()
    try:
        return joined_round_traces(window, added, columns)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise DamagedSnapshot(
            f"version {files.version}: cannot read its window's traces: {explain(exc)}"
        ) from exc
