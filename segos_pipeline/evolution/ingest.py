"""Trace ingestion into per-window Parquet parts: streamed in batches, with a quarantine, idempotent on id.

Layout inside a store:

    STORE/traces/<window>/parts/<run>-<n>.<h>.parquet  accepted traces (TRACE_SCHEMA), one part per batch;
                                                   <h>: its sha256, checked on every read (trace_parts.py)
    STORE/traces/<window>/traces.parquet           a whole-window table written before parts (still read)
    STORE/traces/<window>/quarantine.jsonl         every rejected input: {"source", "reason", "raw", "at"...}
    STORE/traces/ingest_log.jsonl                  one line per ingestion run with its counts

`TraceStore.scan(window)` is the window as one `pl.LazyFrame` over all of its files, `load(window)` the
same collected (sorted by trace id), both checked first: a part whose bytes fail the hash in its name is
refused by name (`trace_parts.py`). A part is written to a temporary name, flushed to disk, hashed and
renamed into place, so a reader sees a part whole or not at all, also after a crash; a run stopped half
way keeps the batches it finished, and running it again adds only the rest.

Ingestion never aborts on bad input: every line or record that breaks the trace contract (`traces.py`) is
quarantined with its reason, and so is a trace whose id is already stored with different content (a
conflict). The same id with the same content is a duplicate: counted and skipped, so re-ingesting the same
input adds nothing twice, and a quarantine entry already present is not repeated.

Native JSONL is read in batches of `batch_size` lines, the next batch read and validated in a background
thread while the current one is stored. The columnar fast path (`columnar.py`: pyarrow parses the batch
with the contract's schema, polars expressions check the bounds) takes the lines it can vouch for as they
are; every other line is validated by pydantic-core (Rust) one by one, and its model serialised once and
read back by polars, so both give the same rows and rejections. Skill names are resolved through a lookup
table (each distinct name resolved once per run), duplicates are found against the window's trace ids kept
as sorted 64-bit hashes (a match confirmed against the stored ids), and the new rows of each window are
appended as one part. Memory follows the batch, plus 8 bytes per trace of the windows being written.
"""

from __future__ import annotations

import json
import os
import queue
import re
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import polars as pl

from ..progress import Progress, Tick, emit, stage
from ..store.durable import fsync_dir
from ..store.remote import RemoteStore, open_store
from ..store.snapshot import SnapshotError, SnapshotStore, sha256_file
from ..text.names import SkillNames
from . import columnar, trace_parts
from .adapters.common import RAW_LIMIT, Rejected, Skipped, files_under, read_lines, rejected
from .traces import (
    DEFAULT_AGENT,
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
_WINDOW_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
STORE_FOLDERS = frozenset({"traces", "versions", "cache", ".staging"})  # what a store writes: never input
ORPHAN_PART_AGE_S = 3600  # a part is written in seconds: a temporary one idle this long is a killed run's
INGEST_BATCH = 50_000  # lines per batch: bounds memory (about 1 KB of Python objects per trace in flight)
UNPLACED = "unplaced"
# What "same content" compares for two traces with one id: everything but where and when it was read.
CONTENT = tuple(k for k in TRACE_SCHEMA if k not in ("trace_id", "window", "source", "unknown_skills"))
# The trace-table columns a native line carries itself (`ctrf` becomes `reward` before the table).
_NATIVE_FIELDS = tuple(k for k in TRACE_SCHEMA if k in NATIVE_KEYS)
_NATIVE_SCHEMA = {k: TRACE_SCHEMA[k] for k in _NATIVE_FIELDS}
_NATIVE_INCLUDE = set(_NATIVE_FIELDS)  # extras are carried apart: they may hold what polars cannot read


@dataclass
class IngestReport:
    version: str
    read: int = 0
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0  # quarantine entries written by this run (one already present is not repeated)
    windows: dict[str, dict[str, int]] = field(default_factory=dict)
    unknown_skills: dict[str, int] = field(default_factory=dict)
    quarantine_reasons: dict[str, int] = field(default_factory=dict)
    rejected: int = (
        0  # inputs rejected by this run, new or already quarantined: read = accepted+duplicates+rejected
    )
    conflicts: int = 0  # of those, ids already ingested with different content
    # inputs left unread, each {"source", "reason"}: links and other non-regular files, torn last lines
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


WINDOW_TABLE = "traces.parquet"  # a window written before ingest wrote parts: one table, read first


def window_reading_order(names: Iterable[str]) -> list[str]:
    """A window's Parquet files (paths relative to its folder) in the order a round reads them and a
    version lists them: the whole-window table first, then the parts by name; anything else is left out.
    The one rule for a local window and a window listed at a URI, so every engine references the same
    list."""
    names = set(names)
    table = [WINDOW_TABLE] if WINDOW_TABLE in names else []
    return table + sorted(n for n in names if n.startswith("parts/") and n.count("/") == 1)


def check_window(window: str) -> str:
    if not _WINDOW_RE.match(window):
        raise ValueError(
            f"invalid window id {window!r}: use letters, digits, '.', '_' or '-' (e.g. 2026-11-29)"
        )
    return window


@dataclass
class Batch:
    """Validated rows (TRACE_SCHEMA, skill names unresolved) and the inputs rejected on the way."""

    frame: pl.DataFrame
    rejected: list[Rejected]
    read: int
    skipped: list[Skipped] = field(default_factory=list)


# ------------------------------------------------------------------------------------------- sources


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
            pl.col("agent").fill_null(DEFAULT_AGENT),
            pl.col("attempt").fill_null(1),
            pl.col("simulated").fill_null(False),
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


# ------------------------------------------------------------------------------------- name lookups


class _Lookup:
    """Skill reference → id of the version (None when unknown), each distinct reference resolved once."""

    def __init__(self, names: SkillNames):
        self.names = names
        self.known: dict[str, str | None] = {}

    def table(self, refs: pl.Series) -> tuple[list[str], list[str | None]]:
        keys = refs.unique().drop_nulls().to_list()
        for ref in keys:
            if ref not in self.known:
                row = self.names.resolve_one(ref)
                self.known[ref] = None if row is None else self.names.ids[row]
        return keys, [self.known[k] for k in keys]


def _all_refs(frame: pl.DataFrame) -> pl.DataFrame:
    """(row, ref) for every skill reference of every trace: used, and each query's retrieved and seeds."""
    queries = frame.select("_row", q=pl.col("queries")).explode("q").filter(pl.col("q").is_not_null())
    parts = [frame.select("_row", ref=pl.col("used")).explode("ref")]
    for key in ("retrieved", "seeds"):
        parts.append(queries.select("_row", ref=pl.col("q").struct.field(key)).explode("ref"))
    return pl.concat(parts).drop_nulls()


def resolve_frame(frame: pl.DataFrame, lookup: _Lookup) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Names → ids of the version in `used`, `queries.retrieved` and `queries.seeds` (order kept, repeats and
    unknown names dropped); unknown names go to `unknown_skills` (sorted). Also returns (ref, traces) for
    the unknown names, for the report."""
    frame = frame.with_row_index("_row")
    refs = _all_refs(frame)
    keys, ids = lookup.table(refs["ref"])

    def mapped(expr: pl.Expr) -> pl.Expr:
        hit = pl.element().replace_strict(keys, ids, default=None, return_dtype=pl.String)
        return expr.list.eval(hit.drop_nulls().unique(maintain_order=True))

    unknown_keys = pl.DataFrame(
        {"ref": [k for k, v in zip(keys, ids, strict=True) if v is None]}, schema={"ref": pl.String}
    )
    unknown = refs.join(unknown_keys, on="ref", how="semi").unique()
    per_row = unknown.group_by("_row").agg(unknown_skills=pl.col("ref").sort())
    q = pl.element()
    frame = (
        frame.with_columns(
            used=mapped(pl.col("used")),
            queries=pl.col("queries").list.eval(
                pl.struct(
                    text=q.struct.field("text"),
                    retrieved=mapped(q.struct.field("retrieved")),
                    seeds=mapped(q.struct.field("seeds")),
                )
            ),
        )
        .drop("unknown_skills")
        .join(per_row, on="_row", how="left")
        .with_columns(pl.col("unknown_skills").fill_null(pl.lit([], dtype=pl.List(pl.String))))
        .sort("_row")
        .select(list(TRACE_SCHEMA))
    )
    counts = unknown.group_by("ref").len()
    return frame, counts


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


# ------------------------------------------------------------------------------------------ the store


class TraceStore:
    """The trace windows of a snapshot store."""

    def __init__(self, store: SnapshotStore | str | Path):
        self.store = store if isinstance(store, SnapshotStore) else open_store(store)
        self.root = self.store.root / "traces"
        # A store on a URI (docs/storage.md): windows are read through its local cache (parts are written
        # once under unique names, so a cached part never goes stale) and every file written is uploaded.
        self.remote = self.store if isinstance(self.store, RemoteStore) else None
        # parts found intact by this object, with the (size, mtime) they had: an ingest checks a window's
        # parts once, not once per batch
        self._intact: dict[Path, tuple[int, int]] = {}

    def window_dir(self, window: str) -> Path:
        return self.root / check_window(window)

    def files(self, window: str) -> list[Path]:
        """The Parquet files holding a window's traces (the whole-window table first, then the parts)."""
        folder = self.window_dir(window)
        if self.remote is not None:
            self.remote.pull(f"traces/{window}", ".parquet")
        names = [WINDOW_TABLE] if (folder / WINDOW_TABLE).is_file() else []
        parts = folder / "parts"
        names += [f"parts/{p.name}" for p in parts.glob("*.parquet")] if parts.is_dir() else []
        return [folder / n for n in window_reading_order(names)]

    def checked_files(self, window: str) -> list[Path]:
        """`files(window)`, each part checked against the hash in its name first (`DamagedTraces` names
        the ones that fail, with the commands that set them aside and re-ingest)."""
        files = self.files(window)
        unchecked = [f for f in files if self._intact.get(f) != _stamp(f)]
        trace_parts.check(unchecked, window, self.store.root)
        for f in unchecked:
            self._intact[f] = _stamp(f)
        return files

    def damaged_parts(self) -> list[tuple[Path, str]]:
        """Every window's files that fail their hash or cannot be read whole, each with why (for `segos
        verify --all`)."""
        bad = []
        for window in self.windows():
            files = self.files(window)
            failed = trace_parts.damaged(files)
            bad += failed
            for f in files:
                if trace_parts.recorded_hash(f) is None:
                    try:  # nothing to check it against: it must at least read whole
                        with trace_parts.reading([f], window, self.store.root):
                            pl.read_parquet(f, schema=TRACE_SCHEMA)
                    except trace_parts.DamagedTraces as exc:
                        bad.append((f, str(exc).split("; ")[0]))
        return bad

    def windows(self) -> list[str]:
        if self.remote is not None:
            names = [n for n in self.remote.remote_names("traces") if _WINDOW_RE.match(n)]
            return [n for n in names if self.remote.remote_files(f"traces/{n}", ".parquet")]
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if _WINDOW_RE.match(p.name) and self.files(p.name))

    def scan(self, window: str) -> pl.LazyFrame:
        """The window's traces (TRACE_SCHEMA) as one lazy frame over all its files, in no set order."""
        files = self.checked_files(window)
        if not files:
            known = ", ".join(self.windows()) or "none"
            raise SnapshotError(
                f"no traces ingested for window {window!r} in {self.store.root} (windows: {known}); "
                "run `segos ingest TRACES --window ...` first"
            )
        return pl.scan_parquet(files, schema=TRACE_SCHEMA)

    def load(self, window: str) -> pl.DataFrame:
        scan = self.scan(window)
        with trace_parts.reading(self.files(window), window, self.store.root):
            return scan.collect().sort("trace_id")

    def quarantine(self, window: str) -> list[dict[str, Any]]:
        path = self.window_dir(window) / "quarantine.jsonl"
        if self.remote is not None:
            self.remote.pull_file(f"traces/{window}/quarantine.jsonl")
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    # ------------------------------------------------------------------------------------------ writing

    def ingest(
        self,
        items: Iterable[TraceRecord | Rejected | Skipped],
        *,
        window: str | None = None,
        version: str | None = None,
        batch_size: int = INGEST_BATCH,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Validate records (of any adapter), resolve skill names against `version` (latest by default) and
        store them by window."""
        return self.ingest_batches(
            record_batches(items, batch_size), window=window, version=version, progress=progress
        )

    def ingest_path(
        self,
        path: Path,
        fmt: str = "native",
        *,
        queries: Path | None = None,
        window: str | None = None,
        version: str | None = None,
        batch_size: int = INGEST_BATCH,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest a file or folder of format `fmt`; native JSONL takes the streaming columnar path."""
        from .adapters import iter_records

        self.check_source(Path(path))
        if fmt == "native":
            if not Path(path).exists():
                raise FileNotFoundError(f"trace source not found: {path}")
            batches = native_batches(Path(path), batch_size)
            return self.ingest_batches(batches, window=window, version=version, progress=progress)
        return self.ingest(
            iter_records(path, fmt, queries=queries),
            window=window,
            version=version,
            batch_size=batch_size,
            progress=progress,
        )

    def check_source(self, path: Path) -> None:
        """Refuse to ingest the store itself or one of its own folders (a slip for `STORE/landing`: the
        ingest log and quarantines would be read back as traces, and the quarantine grow every run).
        Files of one's own placed in the store's root, and its landing folder, are fine."""
        root = os.path.realpath(self.store.root)
        real = os.path.realpath(path)
        first = os.path.relpath(real, root).split(os.sep)[0] if real.startswith(root + os.sep) else None
        if real == root or first in STORE_FOLDERS:
            where = Path(self.store.root) / "landing"
            raise ValueError(
                f"{path}: this is the store {self.store.root} (or one of its own folders), not traces; "
                f"agents' traces land in its landing folder: `segos ingest {where}`"
            )

    def sweep_orphan_parts(self, now: float | None = None) -> list[Path]:
        """Remove the temporary parts (`parts/*.parquet.tmp`) of ingests killed while writing: only those
        untouched for ORPHAN_PART_AGE_S, so a part a live run is writing is never removed. Runs at the
        start of each ingest (which `segos ingest` holds the store's writer lock for)."""
        if not self.root.is_dir():
            return []
        limit = (time.time() if now is None else now) - ORPHAN_PART_AGE_S
        removed = []
        for tmp in self.root.glob("*/parts/*.parquet.tmp"):
            try:
                if tmp.lstat().st_mtime < limit:
                    tmp.unlink()
                    removed.append(tmp)
            except FileNotFoundError:
                continue  # renamed into place or removed by its run meanwhile
        return removed

    def ingest_batches(
        self,
        batches: Iterable[Batch],
        *,
        window: str | None = None,
        version: str | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        snap_id = self.store.resolve(version)
        if window is not None:
            check_window(window)
        self.sweep_orphan_parts()
        run = _Run(
            self, SkillNames(self.store.load(snap_id, verify=False).nodes), IngestReport(version=snap_id)
        )
        with stage(progress, "validate and store", lambda: f"{run.report.read:,} lines"):
            for batch in prefetched(batches):  # the next batch is read and validated while this one is stored
                run.add(batch, window)
                emit(progress, Tick("traces read", run.report.read))
        run.report.unknown_skills = dict(run.unknown.most_common())
        self._log(run.report)
        return run.report

    def _write_part(self, window: str, table: pl.DataFrame, name: str) -> None:
        folder = self.window_dir(window) / "parts"
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".parquet.tmp")
        os.close(fd)
        try:
            # zstd level 1: a third less CPU than the default level for about 5% more bytes (a part of
            # 50,000 simulated traces: 63 instead of 97 ms, 613 instead of 581 kB)
            table.write_parquet(tmp, compression="zstd", compression_level=1)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            part = folder / trace_parts.hashed_name(name, sha256_file(Path(tmp)))
            os.replace(tmp, part)  # readers see a part whole or not at all
            fsync_dir(folder)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self._intact[part] = _stamp(part)
        if self.remote is not None:  # written once under its unique run name: no rename needed there
            self.remote.push(part)

    def _log(self, report: IngestReport) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.remote is not None:
            self.remote.pull_file("traces/ingest_log.jsonl")
        entry = {"at": datetime.now(UTC).isoformat(timespec="seconds"), **report.to_dict()}
        with (self.root / "ingest_log.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        if self.remote is not None:  # no append on object stores: the files this run grew go up whole
            # only quarantines this run added to (read from the URI first, in `quarantine`)
            quarantines = [
                self.window_dir(w) / "quarantine.jsonl" for w, c in report.windows.items() if c["quarantined"]
            ]
            for path in [*quarantines, self.root / "ingest_log.jsonl"]:
                if path.is_file():
                    self.remote.push(path)


def _stamp(path: Path) -> tuple[int, int]:
    """(size, mtime) of a file: a part checked once is checked again when either changes."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def id_hashes(trace_ids: pl.Series) -> np.ndarray:
    """64-bit hashes of trace ids (polars' hash: fixed within a process, which is all a run needs)."""
    return trace_ids.hash(seed=0).to_numpy()


class StoredIds:
    """The trace ids a window holds, as their sorted 64-bit hashes: 8 bytes a trace instead of the id
    strings, and a batch's lookup costs log(window) per id instead of hashing the whole window again. A
    hash match is only a candidate; `_Run._confirm` checks it against the stored ids themselves."""

    def __init__(self, hashes: np.ndarray):
        self.hashes = np.sort(hashes)

    @classmethod
    def of(cls, files: list[Path], window: str | None = None) -> StoredIds:
        if not files:
            return cls(np.empty(0, dtype=np.uint64))
        with trace_parts.reading(files, window):
            ids = pl.scan_parquet(files, schema=TRACE_SCHEMA).select("trace_id").collect()["trace_id"]
        return cls(id_hashes(ids))

    def __len__(self) -> int:
        return len(self.hashes)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.hashes, hashes)
        found = np.zeros(len(hashes), dtype=bool)
        inside = at < len(self.hashes)
        found[inside] = self.hashes[at[inside]] == hashes[inside]
        return found

    def add(self, hashes: np.ndarray) -> None:
        new = np.sort(hashes)
        self.hashes = np.insert(self.hashes, np.searchsorted(self.hashes, new), new)


class _Run:
    """The state of one ingestion run: ids already stored per window, quarantine keys, counts."""

    def __init__(self, traces: TraceStore, names: SkillNames, report: IngestReport):
        self.traces = traces
        self.lookup = _Lookup(names)
        self.report = report
        self.unknown: Counter[str] = Counter()
        self.ids: dict[str, StoredIds] = {}
        self.quarantined: dict[str, set[tuple[str, str]]] = {}
        self.name = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        self.parts = 0

    def stored_ids(self, window: str) -> StoredIds:
        if window not in self.ids:
            self.ids[window] = StoredIds.of(self.traces.checked_files(window), window)
        return self.ids[window]

    def add(self, batch: Batch, window: str | None) -> None:
        self.report.read += batch.read
        self.report.skipped += [{"source": s.source, "reason": s.reason} for s in batch.skipped]
        fallback = window or UNPLACED
        frame = batch.frame.with_columns(
            window=pl.lit(window, dtype=pl.String) if window else pl.col("timestamp").str.slice(0, 10)
        )
        rejected_by_window: dict[str, list[Rejected]] = {fallback: list(batch.rejected)}
        for row in frame.filter(pl.col("window").is_null()).iter_rows(named=True):
            rejected_by_window[fallback].append(
                rejected(
                    row["source"],
                    "no `timestamp` to place the trace in a window; pass --window",
                    json.dumps(row, ensure_ascii=False, default=str),
                )
            )
        frame = frame.filter(pl.col("window").is_not_null())
        if frame.height:
            frame, unknown = resolve_frame(frame, self.lookup)
            self.unknown.update(dict(unknown.iter_rows()))
        for (w,), part in sorted(frame.partition_by("window", as_dict=True).items()):
            conflicts = self._store(w, part)
            rejected_by_window.setdefault(w, []).extend(conflicts)
        for w, rows in rejected_by_window.items():
            self._quarantine(w, rows)

    def _store(self, window: str, part: pl.DataFrame) -> list[Rejected]:
        """Append the window's new traces; count duplicates; return conflicts as rejections."""
        ids = self.stored_ids(window)
        hashes = id_hashes(part["trace_id"])
        stored = self._confirm(window, part["trace_id"].filter(ids.contains(hashes)))
        new = part["trace_id"].is_first_distinct() & ~part["trace_id"].is_in(stored.implode())
        fresh, again = part.filter(new), part.filter(~new)
        conflicts = self._compare(window, again, fresh, stored) if again.height else []
        self.report.duplicates += again.height - len(conflicts)
        self.report.conflicts += len(conflicts)
        if fresh.height:
            self.parts += 1
            self.traces._write_part(window, fresh.sort("trace_id"), f"{self.name}-{self.parts:05d}")
            ids.add(hashes[new.to_numpy()])
        counts = self.report.windows.setdefault(window, {"accepted": 0, "quarantined": 0, "total": 0})
        counts["accepted"] += fresh.height
        counts["total"] = len(ids)
        self.report.accepted += fresh.height
        return conflicts

    def _confirm(self, window: str, candidates: pl.Series) -> pl.Series:
        """The candidate ids (their hash is stored) that the window's files really hold: a hash shared by two
        ids must not make a new trace a duplicate."""
        files = self.traces.checked_files(window)
        if candidates.is_empty() or not files:
            return pl.Series("trace_id", [], dtype=pl.String)
        wanted = candidates.unique().implode()
        with trace_parts.reading(files, window):
            return (
                pl.scan_parquet(files, schema=TRACE_SCHEMA)
                .select("trace_id")
                .filter(pl.col("trace_id").is_in(wanted))
                .unique()
                .collect()["trace_id"]
            )

    def _compare(
        self, window: str, again: pl.DataFrame, fresh: pl.DataFrame, stored: pl.Series
    ) -> list[Rejected]:
        """Repeated ids: the same content is a duplicate; different content is a conflict (rejected).
        `stored`: the repeated ids the window's files already hold."""
        ids = again["trace_id"].unique()
        files = self.traces.checked_files(window)
        with trace_parts.reading(files, window):
            held = (
                pl.scan_parquet(files, schema=TRACE_SCHEMA)
                .filter(pl.col("trace_id").is_in(stored.implode()))
                .collect()
                if stored.len()
                else pl.DataFrame(schema=TRACE_SCHEMA)
            )
        first = pl.concat(
            [
                held,
                fresh.filter(pl.col("trace_id").is_in(ids.implode())).select(list(TRACE_SCHEMA)),
            ]
        ).unique("trace_id", keep="first", maintain_order=True)
        key = pl.struct(list(CONTENT)).struct.json_encode()
        ref = first.select("trace_id", "source", _key=key, _content=pl.struct(list(CONTENT)))
        cmp = again.with_columns(_key=key, _content=pl.struct(list(CONTENT))).join(
            ref, on="trace_id", how="left", suffix="_first"
        )
        out = []
        for row in cmp.filter(pl.col("_key") != pl.col("_key_first")).iter_rows(named=True):
            mine, theirs = row["_content"], row["_content_first"]
            differ = [k for k in CONTENT if mine[k] != theirs[k]]
            out.append(
                rejected(
                    row["source"],
                    f"conflict: trace id {row['trace_id'][:80]!r} is already ingested (from "
                    f"{str(row['source_first'])[:200]}) with different content ({', '.join(differ)} differ); "
                    "give the new trace its own id",
                    json.dumps({"trace_id": row["trace_id"], **mine}, ensure_ascii=False, default=str),
                )
            )
        return out

    def _quarantine(self, window: str, rows: list[Rejected]) -> None:
        if not rows:
            return
        if window not in self.quarantined:
            self.quarantined[window] = {
                (q["source"], q["reason"], q["raw"]) for q in self.traces.quarantine(window)
            }
        seen = self.quarantined[window]
        folder = self.traces.window_dir(window)
        folder.mkdir(parents=True, exist_ok=True)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        added = 0
        with (folder / "quarantine.jsonl").open("a", encoding="utf-8") as fh:
            for r in rows:
                key = reason_kind(r.reason)
                self.report.quarantine_reasons[key] = self.report.quarantine_reasons.get(key, 0) + 1
                if (r.source, r.reason, r.raw) in seen:  # the same rejection again: already quarantined
                    continue
                seen.add((r.source, r.reason, r.raw))
                entry = {"source": r.source, "reason": r.reason, "raw": r.raw, "raw_bytes": r.raw_bytes}
                fh.write(json.dumps({**entry, "at": now}) + "\n")
                added += 1
        self.report.rejected += len(rows)
        self.report.quarantined += added
        counts = self.report.windows.setdefault(window, {"accepted": 0, "quarantined": 0, "total": 0})
        counts["quarantined"] += added
        if window in self.ids or self.traces.files(window):
            counts["total"] = len(self.stored_ids(window))


def reason_kind(reason: str, limit: int = 80) -> str:
    """What a quarantine reason is about, for counting them: its head before the first ':', at most `limit`
    characters, cut between words and before a parenthesis it leaves open; "…" when something was cut
    (the whole reason is in the quarantine file)."""
    head = reason.split(":")[0].strip()
    kind = head if len(head) <= limit else head[: limit - 1].rsplit(" ", 1)[0]
    while kind.count("(") > kind.count(")"):
        kind = kind[: kind.rfind("(")].rstrip()
    return kind if kind == head else kind + "…"


def empty_traces() -> pl.DataFrame:
    return pl.DataFrame(schema=TRACE_SCHEMA)
