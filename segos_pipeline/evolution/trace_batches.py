"""Trace inputs read as validated batches: native JSONL lines (the columnar fast path, the model for the
rest) and adapter records, each batch with its rejections; `prefetched` reads the next batch ahead."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import polars as pl

from . import columnar
from .adapters.common import RAW_LIMIT, Rejected, Skipped, files_under, read_lines, rejected
from .traces import (
    NATIVE_DEFAULTS,
    NATIVE_KEYS,
    TRACE_ADAPTER,
    TRACE_SCHEMA,
    TraceError,
    TraceRecord,
    check_record,
    finish_native,
    validate_line,
)

T = TypeVar("T")
INGEST_BATCH = 50_000  # lines per batch: bounds memory (about 1 KB of Python objects per trace in flight)
# The trace-table columns a native line carries itself (`ctrf` becomes `reward` before the table).
_NATIVE_FIELDS = tuple(k for k in TRACE_SCHEMA if k in NATIVE_KEYS)
_NATIVE_SCHEMA = {k: TRACE_SCHEMA[k] for k in _NATIVE_FIELDS}
_NATIVE_INCLUDE = set(_NATIVE_FIELDS)  # extras are carried apart: they may hold what polars cannot read


@dataclass
class Batch:
    """Validated rows (TRACE_SCHEMA, skill names unresolved) and the inputs rejected on the way."""

    frame: pl.DataFrame
    rejected: list[Rejected]
    read: int
    skipped: list[Skipped] = field(default_factory=list)


def native_batches(path: Path, batch_size: int = INGEST_BATCH, *, fast: bool = True) -> Iterator[Batch]:
    """Every native JSONL line under `path`, validated, in batches of at most `batch_size` lines.

    With `fast` (the default) the lines the columnar path vouches for (`columnar.vouch`) skip the model;
    the rest, and every line when `fast` is off, are validated one by one by the model. Both give the same
    rows and the same rejections."""
    reader = columnar.Reader() if fast else None
    for file in files_under(Path(path), "*.jsonl"):
        lines: list[bytes] = []
        linenos: list[int] = []
        skipped: list[Skipped] = []  # a refused file, or a torn last line: after every line of the file
        for item in read_lines(file):
            if isinstance(item, Skipped):
                skipped.append(item)
                continue
            lines.append(item[1])
            linenos.append(item[0])
            if len(lines) >= batch_size:
                yield _native_batch(file, lines, linenos, reader)
                lines, linenos = [], []
        if lines:
            batch = _native_batch(file, lines, linenos, reader)
            batch.skipped = skipped
            yield batch
        elif skipped:
            yield Batch(pl.DataFrame(schema=TRACE_SCHEMA), [], 0, skipped)


def _native_batch(
    file: Path, lines: list[bytes], linenos: list[int], reader: columnar.Reader | None
) -> Batch:
    """One batch of lines: the vouched rows as they are, every other line through the model (every line
    when `reader` is None), in line order."""
    vouched = None if reader is None else columnar.vouch(lines, reader)
    rest = range(len(lines)) if vouched is None else _rest(len(lines), vouched.frame["_i"])
    rows: list[bytes] = []  # compact JSON of each valid trace: about 1 KB, where a model is several
    kept: list[int] = []
    sources: list[str] = []
    extras: list[str] = []
    bad: list[Rejected] = []
    for i in rest:
        line = lines[i]
        try:
            model = validate_line(line)
            reward_source, extra = finish_native(model)
        except TraceError as exc:
            bad.append(rejected(f"{file}:{linenos[i]}", str(exc), line.decode("utf-8", "replace")))
        else:
            rows.append(TRACE_ADAPTER.dump_json(model, include=_NATIVE_INCLUDE))
            kept.append(i)
            sources.append(reward_source)
            extras.append(extra)
    frames = [_model_frame(rows, kept, sources, extras)]
    if vouched is not None and vouched.frame.height:
        frames.append(_vouched_frame(vouched.frame))
    native = pl.concat(frames, how="vertical").sort("_i")
    return Batch(_native_frame(file, native, linenos), bad, len(lines))


def _rest(n: int, vouched: pl.Series) -> list[int]:
    """Positions 0..n-1 not vouched for, in order."""
    keep = np.ones(n, dtype=bool)
    keep[vouched.to_numpy()] = False
    return np.flatnonzero(keep).tolist()


_NATIVE_ROW = {**_NATIVE_SCHEMA, "reward_source": pl.String, "extra": pl.String, "_i": pl.Int64}


def _model_frame(rows: list[bytes], kept: list[int], sources: list[str], extras: list[str]) -> pl.DataFrame:
    """The traces the model validated (their contract fields as compact JSON, written by pydantic-core) as
    native columns, parsed by polars in one call."""
    if not rows:
        return pl.DataFrame(schema=_NATIVE_ROW)
    try:
        frame = pl.read_json(b"[" + b",".join(rows) + b"]", schema=_NATIVE_SCHEMA)
    except pl.exceptions.PolarsError:  # never seen; if polars' reader refuses a batch, build it row by row
        frame = pl.DataFrame([json.loads(r) for r in rows], schema=_NATIVE_SCHEMA)
    return frame.with_columns(
        reward_source=pl.Series(sources, dtype=pl.String),
        extra=pl.Series(extras, dtype=pl.String),
        _i=pl.Series(kept, dtype=pl.Int64),
    ).select(list(_NATIVE_ROW))


def _vouched_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows the fast path vouched for, completed as the model completes them: its defaults for absent
    keys, the reward as given, no extras."""
    return (
        frame.with_columns(
            *(pl.col(key).fill_null(value) for key, value in NATIVE_DEFAULTS.items()),
            reward_source=pl.lit("reward"),
            extra=pl.lit(""),
        )
        .cast(_NATIVE_ROW)  # type: ignore[arg-type]
        .select(list(_NATIVE_ROW))
    )


def _native_frame(file: Path, native: pl.DataFrame, linenos: list[int]) -> pl.DataFrame:
    """Native rows (with `_i`, the position of each in the batch) as TRACE_SCHEMA rows."""
    simulated = pl.col("simulated")
    line = pl.Series(linenos, dtype=pl.Int64).gather(native["_i"])
    return native.with_columns(
        pl.col("queries").fill_null(pl.lit([], dtype=TRACE_SCHEMA["queries"])),
        pl.col("used").list.unique(maintain_order=True),  # first-use order: later repeats add nothing
        window=pl.lit(None, dtype=pl.String),
        used_ordered=pl.lit(True),
        unknown_skills=pl.lit([], dtype=pl.List(pl.String)),
        source=pl.format("{}:{}", pl.lit(str(file)), line),
        # The simulator marks what it writes; the flag survives ingestion so simulated traces are never
        # mistaken for real ones.
        source_format=pl.when(simulated).then(pl.lit("simulated")).otherwise(pl.lit("native")),
    ).select(list(TRACE_SCHEMA))


def record_batches(
    items: Iterable[TraceRecord | Rejected | Skipped], batch_size: int = INGEST_BATCH
) -> Iterator[Batch]:
    """Adapter output in batches: each record checked against the contract, else rejected with why; inputs
    the adapter skipped unread are carried to the report."""
    rows: list[dict[str, Any]] = []
    bad: list[Rejected] = []
    skipped: list[Skipped] = []
    read = 0
    for item in items:
        if isinstance(item, Skipped):
            skipped.append(item)
            continue
        read += 1
        if isinstance(item, Rejected):
            bad.append(item)
        else:
            try:
                rows.append(check_record(item).row())
            except TraceError as exc:
                bad.append(rejected(item.source, str(exc), _raw_record(item)))
        if read >= batch_size:
            yield Batch(pl.DataFrame(rows, schema=TRACE_SCHEMA), bad, read, skipped)
            rows, bad, read, skipped = [], [], 0, []
    if read or skipped:
        yield Batch(pl.DataFrame(rows, schema=TRACE_SCHEMA), bad, read, skipped)


def _raw_record(record: TraceRecord) -> str:
    try:
        return json.dumps(record.row(), ensure_ascii=False, default=str)[:RAW_LIMIT]
    except (ValueError, TypeError, RecursionError):
        return repr(record)[:RAW_LIMIT]


def prefetched(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """`items` in order, produced by a background thread up to `depth` items ahead of the consumer.

    Reading and validating a batch (pyarrow, polars and pydantic-core release the GIL for most of it)
    then overlaps with resolving and writing the one before, on a second core when there is one. An error
    of the producer is raised here; when the consumer stops early, the producer stops at its next item."""
    channel: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def send(kind: str, value: Any) -> bool:
        while not stop.is_set():
            try:
                channel.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not send("item", item):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            send("error", exc)
        else:
            send("done", None)

    thread = threading.Thread(target=produce, name="ingest-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = channel.get()
            if kind == "error":
                raise value
            if kind == "done":
                return
            yield value
    finally:
        stop.set()
        thread.join()
