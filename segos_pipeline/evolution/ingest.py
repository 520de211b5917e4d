"""Trace ingestion into per-window Parquet parts: streamed in batches, with a quarantine, idempotent on id.

Layout inside a store:

    STORE/traces/<window>/parts/<run>-<n>.parquet  accepted traces (TRACE_SCHEMA), one part per batch
    STORE/traces/<window>/traces.parquet           a whole-window table written before parts (still read)
    STORE/traces/<window>/quarantine.jsonl         every rejected input: {"source", "reason", "raw", "at"}
    STORE/traces/ingest_log.jsonl                  one line per ingestion run with its counts

`TraceStore.scan(window)` is the window as one `pl.LazyFrame` over all of its files, `load(window)` the
same collected (sorted by trace id). A part is written to a temporary name and renamed into place, so a
reader sees a part whole or not at all; a run stopped half way keeps the batches it finished, and running
it again adds only the rest.

Ingestion never aborts on bad input: every line or record that breaks the trace contract (`traces.py`) is
quarantined with its reason, and so is a trace whose id is already stored with different content (a
conflict). The same id with the same content is a duplicate: counted and skipped, so re-ingesting the same
input adds nothing twice, and a quarantine entry already present is not repeated.

Native JSONL is read in batches of `batch_size` lines: each line is bounded (length, nesting) and validated
by pydantic-core (Rust), the batch's valid models are serialised once and read back by polars as columns;
skill names are resolved through a lookup table (each distinct name resolved once per run), duplicates are
found with an anti-join on trace id against what the window already holds, and the new rows of each window
are appended as one part. Memory follows the batch, plus the trace ids of the windows being written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from ..progress import Progress, Tick, emit, stage
from ..store.remote import RemoteStore, open_store
from ..store.snapshot import SnapshotError, SnapshotStore
from ..text.names import SkillNames
from .adapters.common import RAW_LIMIT, Rejected, files_under, read_lines, rejected
from .traces import (
    NATIVE_KEYS,
    TRACE_ADAPTER,
    TRACE_SCHEMA,
    TraceError,
    TraceRecord,
    check_record,
    finish_native,
    validate_line,
)

_WINDOW_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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


# ------------------------------------------------------------------------------------------- sources


def native_batches(path: Path, batch_size: int = INGEST_BATCH) -> Iterator[Batch]:
    """Every native JSONL line under `path`, validated, in batches of at most `batch_size` lines."""
    for file in files_under(Path(path), "*.jsonl"):
        rows: list[bytes] = []  # compact JSON of each valid trace: about 1 KB, where a model is several
        linenos: list[int] = []
        sources: list[str] = []
        extras: list[str] = []
        bad: list[Rejected] = []
        read = 0
        for lineno, line in read_lines(file):
            read += 1
            try:
                model = validate_line(line)
                reward_source, extra = finish_native(model)
            except TraceError as exc:
                bad.append(rejected(f"{file}:{lineno}", str(exc), line.decode("utf-8", "replace")))
            else:
                rows.append(TRACE_ADAPTER.dump_json(model, include=_NATIVE_INCLUDE))
                linenos.append(lineno)
                sources.append(reward_source)
                extras.append(extra)
            if read >= batch_size:
                yield Batch(_native_frame(file, rows, linenos, sources, extras), bad, read)
                rows, linenos, sources, extras, bad, read = [], [], [], [], [], 0
        if read:
            yield Batch(_native_frame(file, rows, linenos, sources, extras), bad, read)


def _native_frame(
    file: Path, rows: list[bytes], linenos: list[int], sources: list[str], extras: list[str]
) -> pl.DataFrame:
    """The batch's validated traces (their contract fields as compact JSON, written by pydantic-core) as
    TRACE_SCHEMA columns, parsed by polars in one call."""
    if not rows:
        return pl.DataFrame(schema=TRACE_SCHEMA)
    try:
        frame = pl.read_json(b"[" + b",".join(rows) + b"]", schema=_NATIVE_SCHEMA)
    except pl.exceptions.PolarsError:  # never seen; if polars' reader refuses a batch, build it row by row
        frame = pl.DataFrame([json.loads(r) for r in rows], schema=_NATIVE_SCHEMA)
    simulated = pl.col("simulated")
    return frame.with_columns(
        pl.col("queries").fill_null(pl.lit([], dtype=TRACE_SCHEMA["queries"])),
        pl.col("used").list.unique(maintain_order=True),  # first-use order: later repeats add nothing
        window=pl.lit(None, dtype=pl.String),
        used_ordered=pl.lit(True),
        reward_source=pl.Series(sources, dtype=pl.String),
        unknown_skills=pl.lit([], dtype=pl.List(pl.String)),
        source=pl.format("{}:{}", pl.lit(str(file)), pl.Series(linenos, dtype=pl.Int64)),
        # The simulator marks what it writes; the flag survives ingestion so simulated traces are never
        # mistaken for real ones.
        source_format=pl.when(simulated).then(pl.lit("simulated")).otherwise(pl.lit("native")),
        extra=pl.Series(extras, dtype=pl.String),
    ).select(list(TRACE_SCHEMA))


def record_batches(
    items: Iterable[TraceRecord | Rejected], batch_size: int = INGEST_BATCH
) -> Iterator[Batch]:
    """Adapter output in batches: each record checked against the contract, else rejected with why."""
    rows: list[dict[str, Any]] = []
    bad: list[Rejected] = []
    read = 0
    for item in items:
        read += 1
        if isinstance(item, Rejected):
            bad.append(item)
        else:
            try:
                rows.append(check_record(item).row())
            except TraceError as exc:
                bad.append(rejected(item.source, str(exc), _raw_record(item)))
        if read >= batch_size:
            yield Batch(pl.DataFrame(rows, schema=TRACE_SCHEMA), bad, read)
            rows, bad, read = [], [], 0
    if read:
        yield Batch(pl.DataFrame(rows, schema=TRACE_SCHEMA), bad, read)


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
        for ref in refs.unique().drop_nulls().to_list():
            if ref not in self.known:
                row = self.names.resolve_one(ref)
                self.known[ref] = None if row is None else self.names.ids[row]
        keys = refs.unique().drop_nulls().to_list()
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


# ------------------------------------------------------------------------------------------ the store


class TraceStore:
    """The trace windows of a snapshot store."""

    def __init__(self, store: SnapshotStore | str | Path):
        self.store = store if isinstance(store, SnapshotStore) else open_store(store)
        self.root = self.store.root / "traces"
        # A store on a URI (docs/storage.md): windows are read through its local cache (parts are written
        # once under unique names, so a cached part never goes stale) and every file written is uploaded.
        self.remote = self.store if isinstance(self.store, RemoteStore) else None

    def window_dir(self, window: str) -> Path:
        return self.root / check_window(window)

    def files(self, window: str) -> list[Path]:
        """The Parquet files holding a window's traces (the whole-window table first, then the parts)."""
        folder = self.window_dir(window)
        if self.remote is not None:
            self.remote.pull(f"traces/{window}", ".parquet")
        legacy = [folder / "traces.parquet"] if (folder / "traces.parquet").is_file() else []
        parts = folder / "parts"
        return legacy + (sorted(parts.glob("*.parquet")) if parts.is_dir() else [])

    def windows(self) -> list[str]:
        if self.remote is not None:
            names = [n for n in self.remote.remote_names("traces") if _WINDOW_RE.match(n)]
            return [n for n in names if self.remote.remote_files(f"traces/{n}", ".parquet")]
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if _WINDOW_RE.match(p.name) and self.files(p.name))

    def scan(self, window: str) -> pl.LazyFrame:
        """The window's traces (TRACE_SCHEMA) as one lazy frame over all its files, in no set order."""
        files = self.files(window)
        if not files:
            known = ", ".join(self.windows()) or "none"
            raise SnapshotError(
                f"no traces ingested for window {window!r} in {self.store.root} (windows: {known}); "
                "run `segos ingest TRACES --window ...` first"
            )
        return pl.scan_parquet(files, schema=TRACE_SCHEMA)

    def load(self, window: str) -> pl.DataFrame:
        return self.scan(window).collect().sort("trace_id")

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
        items: Iterable[TraceRecord | Rejected],
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
        run = _Run(
            self, SkillNames(self.store.load(snap_id, verify=False).nodes), IngestReport(version=snap_id)
        )
        with stage(progress, "validate and store", lambda: f"{run.report.read:,} lines"):
            for batch in batches:
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
            table.write_parquet(tmp)
            os.replace(tmp, folder / f"{name}.parquet")  # readers see a part whole or not at all
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if self.remote is not None:  # written once under its unique run name: no rename needed there
            self.remote.push(folder / f"{name}.parquet")

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


class _Run:
    """The state of one ingestion run: ids already stored per window, quarantine keys, counts."""

    def __init__(self, traces: TraceStore, names: SkillNames, report: IngestReport):
        self.traces = traces
        self.lookup = _Lookup(names)
        self.report = report
        self.unknown: Counter[str] = Counter()
        self.ids: dict[str, pl.Series] = {}
        self.quarantined: dict[str, set[tuple[str, str]]] = {}
        self.name = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        self.parts = 0

    def stored_ids(self, window: str) -> pl.Series:
        if window not in self.ids:
            files = self.traces.files(window)
            self.ids[window] = (
                pl.scan_parquet(files, schema=TRACE_SCHEMA).select("trace_id").collect()["trace_id"]
                if files
                else pl.Series("trace_id", [], dtype=pl.String)
            )
        return self.ids[window]

    def add(self, batch: Batch, window: str | None) -> None:
        self.report.read += batch.read
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
        stored = self.stored_ids(window)
        part = part.with_columns(_first=pl.col("trace_id").is_first_distinct())
        fresh = part.filter(pl.col("_first") & ~pl.col("trace_id").is_in(stored.implode())).drop("_first")
        again = part.filter(~pl.col("_first") | pl.col("trace_id").is_in(stored.implode())).drop("_first")
        conflicts = self._compare(window, again, fresh) if again.height else []
        self.report.duplicates += again.height - len(conflicts)
        self.report.conflicts += len(conflicts)
        if fresh.height:
            self.parts += 1
            self.traces._write_part(window, fresh.sort("trace_id"), f"{self.name}-{self.parts:05d}")
            self.ids[window] = pl.concat([stored, fresh["trace_id"]])
        counts = self.report.windows.setdefault(window, {"accepted": 0, "quarantined": 0, "total": 0})
        counts["accepted"] += fresh.height
        counts["total"] = self.ids[window].len()
        self.report.accepted += fresh.height
        return conflicts

    def _compare(self, window: str, again: pl.DataFrame, fresh: pl.DataFrame) -> list[Rejected]:
        """Repeated ids: the same content is a duplicate; different content is a conflict (rejected)."""
        ids = again["trace_id"].unique()
        stored = self.stored_ids(window)
        first = pl.concat(
            [
                pl.scan_parquet(self.traces.files(window), schema=TRACE_SCHEMA)
                .filter(pl.col("trace_id").is_in(ids.filter(ids.is_in(stored.implode())).implode()))
                .collect()
                if self.traces.files(window)
                else pl.DataFrame(schema=TRACE_SCHEMA),
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
                key = r.reason.split(":")[0][:80]
                self.report.quarantine_reasons[key] = self.report.quarantine_reasons.get(key, 0) + 1
                if (r.source, r.reason, r.raw) in seen:  # the same rejection again: already quarantined
                    continue
                seen.add((r.source, r.reason, r.raw))
                fh.write(json.dumps({"source": r.source, "reason": r.reason, "raw": r.raw, "at": now}) + "\n")
                added += 1
        self.report.rejected += len(rows)
        self.report.quarantined += added
        counts = self.report.windows.setdefault(window, {"accepted": 0, "quarantined": 0, "total": 0})
        counts["quarantined"] += added
        if window in self.ids or self.traces.files(window):
            counts["total"] = self.stored_ids(window).len()


def empty_traces() -> pl.DataFrame:
    return pl.DataFrame(schema=TRACE_SCHEMA)
