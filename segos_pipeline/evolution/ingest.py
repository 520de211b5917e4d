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
Inputs are read into batches by `trace_batches.py` and their skill names resolved by `trace_names.py`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..progress import Progress, Tick, emit, stage
from ..store.durable import fsync_dir, fsync_file
from ..store.layout import sha256_file
from ..store.remote import open_store
from ..store.snapshot import SnapshotError, SnapshotStore
from ..text.names import SkillNames
from . import trace_parts
from .adapters.common import Rejected, Skipped, rejected
from .trace_batches import INGEST_BATCH, Batch, native_batches, prefetched, record_batches
from .trace_names import NameLookup, resolve_frame
from .traces import TRACE_SCHEMA, TraceRecord

_WINDOW_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
STORE_FOLDERS = frozenset({"traces", "versions", "cache", ".staging"})  # what a store writes: never input
ORPHAN_PART_AGE_S = 3600  # a part is written in seconds: a temporary one idle this long is a killed run's
UNPLACED = "unplaced"
# What "same content" compares for two traces with one id: everything but where and when it was read.
CONTENT = tuple(k for k in TRACE_SCHEMA if k not in ("trace_id", "window", "source", "unknown_skills"))


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
    # inputs rejected by this run, new or already quarantined: read = accepted + duplicates + rejected
    rejected: int = 0
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


def window_of_file(path: Path) -> str:
    """The window a trace file of the store belongs to: STORE/traces/<window>/parts/<part>, or
    STORE/traces/<window>/traces.parquet."""
    return path.parent.parent.name if path.parent.name == "parts" else path.parent.name


def check_window(window: str) -> str:
    if not _WINDOW_RE.match(window):
        raise ValueError(
            f"invalid window id {window!r}: use letters, digits, '.', '_' or '-' (e.g. 2026-11-29)"
        )
    return window


# ------------------------------------------------------------------------------------------ the store


class TraceStore:
    """The trace windows of a snapshot store."""

    def __init__(self, store: SnapshotStore | str | Path):
        self.store = store if isinstance(store, SnapshotStore) else open_store(store)
        self.root = self.store.root / "traces"
        # A store on a URI (docs/storage.md): windows are read through its local cache (parts are written
        # once under unique names, so a cached part never goes stale) and every file written is uploaded:
        # the store's pull and push (nothing to do for a folder).
        # parts found intact by this object, with the (size, mtime) they had: an ingest checks a window's
        # parts once, not once per batch
        self._intact: dict[Path, tuple[int, int]] = {}

    def window_dir(self, window: str) -> Path:
        return self.root / check_window(window)

    def files(self, window: str) -> list[Path]:
        """The Parquet files holding a window's traces (the whole-window table first, then the parts)."""
        folder = self.window_dir(window)
        self.store.pull(f"traces/{window}", ".parquet")
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
        names = [n for n in self.store.names_in("traces") if _WINDOW_RE.match(n)]
        return [n for n in names if self.store.files_in(f"traces/{n}", ".parquet")]

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
        self.store.pull_file(f"traces/{window}/quarantine.jsonl")
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

        path = Path(path)
        self.check_source(path)
        if not path.exists():
            raise FileNotFoundError(f"trace source not found: {path}")
        if fmt == "native":
            batches = native_batches(path, batch_size)
        else:
            batches = record_batches(iter_records(path, fmt, queries=queries), batch_size)
        return self.ingest_batches(batches, window=window, version=version, progress=progress)

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
            # zstd level 1: less CPU than the default level for a few percent more bytes
            # (figures: docs/benchmarks.md, "Design measurements quoted from the code")
            table.write_parquet(tmp, compression="zstd", compression_level=1)
            fsync_file(Path(tmp))
            part = folder / trace_parts.hashed_name(name, sha256_file(Path(tmp)))
            os.replace(tmp, part)  # readers see a part whole or not at all
            fsync_dir(folder)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self._intact[part] = _stamp(part)
        self.store.push(part)  # at a URI: written once under its unique run name, no rename needed there

    def _log(self, report: IngestReport) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.store.pull_file("traces/ingest_log.jsonl")
        entry = {"at": datetime.now(UTC).isoformat(timespec="seconds"), **report.to_dict()}
        with (self.root / "ingest_log.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
        # no append on object stores: the files this run grew go up whole, only quarantines this run added
        # to (read from the URI first, in `quarantine`)
        quarantines = [
            self.window_dir(w) / "quarantine.jsonl" for w, c in report.windows.items() if c["quarantined"]
        ]
        for path in [*quarantines, self.root / "ingest_log.jsonl"]:
            if path.is_file():
                self.store.push(path)


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
        self.lookup = NameLookup(names)
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
        return self._stored(window, candidates, ["trace_id"])["trace_id"].unique()

    def _stored(self, window: str, ids: pl.Series, columns: list[str]) -> pl.DataFrame:
        """The `columns` of the window's stored traces whose id is one of `ids`."""
        files = self.traces.checked_files(window)
        if ids.is_empty() or not files:
            return pl.DataFrame(schema={c: TRACE_SCHEMA[c] for c in columns})
        with trace_parts.reading(files, window):
            scan = pl.scan_parquet(files, schema=TRACE_SCHEMA).select(columns)
            return scan.filter(pl.col("trace_id").is_in(ids.unique().implode())).collect()

    def _compare(
        self, window: str, again: pl.DataFrame, fresh: pl.DataFrame, stored: pl.Series
    ) -> list[Rejected]:
        """Repeated ids: the same content is a duplicate; different content is a conflict (rejected).
        `stored`: the repeated ids the window's files already hold."""
        ids = again["trace_id"].unique()
        held = self._stored(window, stored, list(TRACE_SCHEMA))
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
