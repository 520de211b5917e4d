"""Trace ingestion into per-window Parquet tables, with a quarantine and idempotency on trace id.

Layout inside a store:

    STORE/traces/<window>/traces.parquet    every accepted trace of the window (TRACE_SCHEMA)
    STORE/traces/<window>/quarantine.jsonl  every rejected input: {"source", "reason", "raw", ...}
    STORE/traces/ingest_log.jsonl           one line per ingestion run with its counts

Re-ingesting the same input adds nothing twice: a trace id already in the window is counted as a
duplicate and skipped, and a quarantine entry already present is not repeated.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from ..store.snapshot import SnapshotError, SnapshotStore
from ..text.names import SkillNames
from .adapters.common import Rejected
from .traces import TRACE_SCHEMA, TraceRecord, resolve_skills, trace_frame, window_of

_WINDOW_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class IngestReport:
    version: str
    read: int = 0
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0
    windows: dict[str, dict[str, int]] = field(default_factory=dict)
    unknown_skills: dict[str, int] = field(default_factory=dict)
    quarantine_reasons: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_window(window: str) -> str:
    if not _WINDOW_RE.match(window):
        raise ValueError(
            f"invalid window id {window!r}: use letters, digits, '.', '_' or '-' (e.g. 2026-11-29)"
        )
    return window


class TraceStore:
    """The trace windows of a snapshot store."""

    def __init__(self, store: SnapshotStore | str | Path):
        self.store = store if isinstance(store, SnapshotStore) else SnapshotStore(store)
        self.root = self.store.root / "traces"

    def window_dir(self, window: str) -> Path:
        return self.root / check_window(window)

    def windows(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "traces.parquet").is_file())

    def load(self, window: str) -> pl.DataFrame:
        path = self.window_dir(window) / "traces.parquet"
        if not path.is_file():
            known = ", ".join(self.windows()) or "none"
            raise SnapshotError(
                f"no traces ingested for window {window!r} in {self.store.root} (windows: {known}); "
                "run `segos ingest TRACES --window ...` first"
            )
        return pl.read_parquet(path)

    def quarantine(self, window: str) -> list[dict[str, Any]]:
        path = self.window_dir(window) / "quarantine.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    # ------------------------------------------------------------------------------------------ writing

    def _write_table(self, window: str, table: pl.DataFrame) -> None:
        folder = self.window_dir(window)
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".parquet.tmp")
        os.close(fd)
        try:
            table.write_parquet(tmp)
            os.replace(tmp, folder / "traces.parquet")  # readers see the old or the new table, never half
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _append_quarantine(self, window: str, rows: list[Rejected]) -> int:
        folder = self.window_dir(window)
        folder.mkdir(parents=True, exist_ok=True)
        seen = {(q["source"], q["raw"]) for q in self.quarantine(window)}
        now = datetime.now(UTC).isoformat(timespec="seconds")
        added = 0
        with (folder / "quarantine.jsonl").open("a", encoding="utf-8") as fh:
            for r in rows:
                if (r.source, r.raw) in seen:
                    continue
                seen.add((r.source, r.raw))
                fh.write(json.dumps({"source": r.source, "reason": r.reason, "raw": r.raw, "at": now}) + "\n")
                added += 1
        return added

    def ingest(
        self,
        items: Iterable[TraceRecord | Rejected],
        *,
        window: str | None = None,
        version: str | None = None,
    ) -> IngestReport:
        """Validate, resolve skill names against `version` (latest by default) and store by window."""
        snap_id = self.store.resolve(version)
        names = SkillNames(self.store.load(snap_id, verify=False).nodes)
        if window is not None:
            check_window(window)
        report = IngestReport(version=snap_id)
        accepted: dict[str, list[TraceRecord]] = {}
        rejected: dict[str, list[Rejected]] = {}
        unknown: Counter[str] = Counter()
        fallback_window = window or "unplaced"
        for item in items:
            report.read += 1
            if isinstance(item, Rejected):
                rejected.setdefault(fallback_window, []).append(item)
                continue
            w = window or window_of(item)
            if w is None:
                rejected.setdefault(fallback_window, []).append(
                    Rejected(
                        item.source,
                        "no `timestamp` to place the trace in a window; pass --window",
                        json.dumps(item.row(), default=str)[:2000],
                    )
                )
                continue
            item.window = w
            resolve_skills(item, names)
            unknown.update(item.unknown_skills)
            accepted.setdefault(w, []).append(item)
        for w in sorted(set(accepted) | set(rejected)):
            existing = self.load(w) if (self.window_dir(w) / "traces.parquet").is_file() else None
            seen = set(existing["trace_id"].to_list()) if existing is not None else set()
            fresh = []
            for record in accepted.get(w, []):
                if record.trace_id in seen:
                    report.duplicates += 1
                    continue
                seen.add(record.trace_id)
                fresh.append(record)
            if fresh:
                new = trace_frame(fresh)
                table = new if existing is None else pl.concat([existing, new], how="vertical")
                self._write_table(w, table.sort("trace_id"))
            quarantined = self._append_quarantine(w, rejected.get(w, []))
            for r in rejected.get(w, []):
                key = r.reason.split(":")[0][:80]
                report.quarantine_reasons[key] = report.quarantine_reasons.get(key, 0) + 1
            report.accepted += len(fresh)
            report.quarantined += quarantined
            total = len(seen)
            report.windows[w] = {"accepted": len(fresh), "quarantined": quarantined, "total": total}
        report.unknown_skills = dict(unknown.most_common())
        self._log(report)
        return report

    def _log(self, report: IngestReport) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        entry = {"at": datetime.now(UTC).isoformat(timespec="seconds"), **report.to_dict()}
        with (self.root / "ingest_log.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def empty_traces() -> pl.DataFrame:
    return pl.DataFrame(schema=TRACE_SCHEMA)
