"""Immutable, atomically written graph versions (SPEC §9).

Layout of a store:

    STORE/versions/<version_id>/   nodes-00000.parquet tokens-00000.parquet ... (one pair per part)
                                   signature.npz vocab.parquet edges.parquet transition.npz
                                   report.parquet [extra files] manifest.json
    STORE/.staging/<uuid>/         versions being written (invisible to readers)
    STORE/.staging/<uuid>.lock     held by the live writer of <uuid> (see `lock.py`)
    STORE/.writer.lock             the store's writer lock: one writer at a time (see `lock.py`)
    STORE/served.json              the served pointer: the version followers serve (see `served.py`)

A version's files are written first and its manifest last, so the manifest is the commit point; the
staged folder is then renamed into `versions/` in one step. Readers list only folders whose manifest is
present, and loading verifies every file's sha256 against the manifest. Files are made read-only.

Writers. A writing command holds the store's writer lock from reading its parent to its commit
(`SnapshotStore.writer`), and every commit takes it (re-entrantly) to allocate its sequence number, so
sequence numbers are unique whoever writes. A commit whose parent was read as the latest version refuses
when another version was committed since (the optimistic check that covers a caller that did not hold the
lock throughout): its edit would otherwise be missing from the newest version. Staging folders of dead
writers are removed by the next write. Readers take no lock.

Parts (format 2). The node table (sorted by id) is stored as consecutive parts of about `PART_ROWS` skills,
each with the token rows of its skills (their `node` index local to the part). A child version whose part
holds the same rows as its parent's hard-links the parent's file instead of writing it again, and records
the parent's hash for it: one changed skill rewrites one part, an evolution round that leaves the library
alone rewrites no part, and a damaged shared file still fails verification in every version that lists it.
`signature.npz` + `vocab.parquet` hold the binary skill × token signature matrix of the Jaccard graph, so
an incremental update never re-derives it from the token table. Format-1 versions (one `nodes.parquet` and
one `tokens.parquet`, no signature) still load; the signature is then derived from the tokens.

Referenced files. An evolved version read from a window of stored traces does not copy them: it lists the
window's Parquet files under `window_files` in its manifest (path relative to the store when inside it,
size, sha256), checked on every read (`VersionFiles.window_files`). What the round stores of them, and how
it is read, is `retrieval/round_traces.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sys
import threading
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from .._version import __version__
from ..config import WRITER_WAIT_S
from ..text.lexicon import TOKEN_SCHEMA, Signature
from .durable import fsync_dir
from .errors import DamagedSnapshot, SnapshotError, StaleParent, StoreBusy, StoreWriteError, UnknownVersion
from .lock import Notify, WriterBusy, stage_lock, sweep_stale_stages, writer_lock
from .oserrors import explain
from .served import pin, served
from .uri import is_uri

FORMAT = 2
MANIFEST = "manifest.json"
NODES, TOKENS = "nodes.parquet", "tokens.parquet"  # format 1: the whole table in one file
EDGES, TRANSITION, REPORT = "edges.parquet", "transition.npz", "report.parquet"
SIGNATURE, VOCAB = "signature.npz", "vocab.parquet"
REVISIONS = "revisions.parquet"  # an evolved version's L3 revisions
# What each skill learned from the successful traces that used it (SPEC §8, "Experience"): one row per
# (skill, witnessing query text), its own table beside the node table so that the package text is never
# changed. `tasks` counts distinct successful (task, agent) pairs over every round so far; `first_round` and
# `last_round` are the rounds that first and last saw the text. Written by evolution, read by retrieval.
EXPERIENCE = "experience.parquet"
EXPERIENCE_SCHEMA: dict[str, pl.DataType] = {
    "skill": pl.String(),
    "text": pl.String(),
    "tasks": pl.Int64(),
    "first_round": pl.Int64(),
    "last_round": pl.Int64(),
}
WINDOW_FILES = "window_files"  # manifest key: the window's files an evolved version references by hash
# Skills per part: small enough that rewriting one part is cheap next to everything else an incremental
# update does (~20 ms at 100k skills), large enough that a 100k library stays at a few dozen files.
PART_ROWS = 4096
PART_WRITERS = 2  # parts written at once (threads)
# zstd at level 1 rather than polars' default 3: a part is written in ~60% of the time for ~5% more bytes
# (a 1M-skill version writes 245 of each, the largest stage after the parse and the join).
PART_PARQUET: dict[str, Any] = {"compression": "zstd", "compression_level": 1}
_VERSION_RE = re.compile(r"^v(\d{4,})-[0-9a-f]{8}$")


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def content_id(files: Mapping[str, Any]) -> str:
    """The content part of a version id (`v0007-<this>`): a hash of its manifest's file table, so that the
    id names the bytes the version holds (`manifest_problems` checks it)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]


def manifest_shape(m: Any, name: str) -> str | None:
    """Why a parsed manifest cannot be the manifest of version folder `name` (None when it can): commands
    and the server rely on these fields, and a wrong shape must not reach them as a traceback."""
    if not isinstance(m, dict) or m.get("version") != name:
        return f"it does not name version {name}"
    files = m.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("sha256"), str) and isinstance(f.get("bytes"), int)
        for f in files.values()
    ):
        return "its `files` is not a table of {name: {sha256, bytes}}"
    parts = m.get("parts", [])
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(p.get("rows"), int) and {"nodes", "tokens"} <= p.keys()
        for p in parts
    ):
        return "its `parts` is not a list of {nodes, tokens, rows}"
    if not isinstance(m.get("seq", _seq(name)), int):
        return "its `seq` is not a number"
    return None


def window_refs(root: Path, files: Sequence[Path]) -> list[dict[str, Any]]:
    """Manifest references to a window's files: path (relative to the store `root` when inside it), bytes,
    sha256."""
    refs = []
    for f in files:
        f = Path(f).resolve()
        try:
            rel = str(f.relative_to(Path(root).resolve()))
        except ValueError:
            rel = str(f)
        refs.append({"path": rel, "bytes": f.stat().st_size, "sha256": sha256_file(f)})
    return refs


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a reader sees the old file or the new one whole, also after a
    crash: written under a temporary name, flushed, renamed over it, and the folder flushed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def part_files(i: int) -> tuple[str, str]:
    return f"nodes-{i:05d}.parquet", f"tokens-{i:05d}.parquet"


# ============================================================================================== parts


@dataclass(frozen=True)
class NewPart:
    """Rows to write as one part: node rows and their token rows (`node` local to the part)."""

    nodes: pl.DataFrame
    tokens: pl.DataFrame


@dataclass(frozen=True)
class SamePart:
    """A part of an existing version, linked unchanged into the new one."""

    folder: Path
    record: Mapping[str, Any]  # the part's manifest record: file names, rows, first and last id
    files: Mapping[str, Any]  # the version's file hashes (the linked files keep theirs)


PartPlan = Sequence[NewPart | SamePart]


def split_rows(n: int, part_rows: int | None = None) -> list[tuple[int, int]]:
    """Even [start, end) row ranges of at most `part_rows` (default `PART_ROWS`; one empty range for an
    empty table)."""
    k = max(1, math.ceil(n / (part_rows or PART_ROWS)))
    bounds = np.linspace(0, n, k + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def own_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each list column holding only its own rows' items.

    A slice of a larger table (a part of a whole node table) shares the whole table's list items, and
    polars' Parquet writer judges dictionary encoding over all of them: the same rows were stored in other
    bytes depending on the size of the table they were cut from, and a part of a 1M-skill node table took
    three times as long to write (~120 ms against ~40 ms).
    """
    lists = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.List)]
    return frame.with_columns(pl.col(lists).list.eval(pl.element())) if lists else frame


def local_tokens(tokens: pl.DataFrame, start: int, end: int) -> pl.DataFrame:
    """Token rows of nodes [start, end) of a node-sorted token table, `node` made local to the range."""
    node = tokens["node"]
    a = int(node.search_sorted(start, side="left"))
    b = int(node.search_sorted(end, side="left"))
    return tokens[a:b].with_columns((pl.col("node") - start).cast(pl.UInt32))


def plan_parts(
    nodes: pl.DataFrame,
    tokens: pl.DataFrame,
    base: VersionFiles | None = None,
    base_tables: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> list[NewPart | SamePart]:
    """Parts of a whole node/token table; a part equal to the same range of `base` is linked from it.

    `base_tables` is the base's loaded (nodes, tokens) when the caller has them: the same objects mean
    nothing changed and every part is linked without comparing rows.
    """
    same_tables = base_tables is not None and base_tables[0] is nodes and base_tables[1] is tokens
    if not tokens["node"].is_sorted():  # parts are row ranges: each skill's token rows must be contiguous
        tokens = tokens.sort("node", maintain_order=True)
    if base is not None and "parts" in base.manifest and base.node_rows == nodes.height:
        ranges, offset = [], 0
        for rec in base.parts:
            ranges.append((offset, offset + rec["rows"]))
            offset += rec["rows"]
    else:
        base, ranges = None, split_rows(nodes.height)
    out: list[NewPart | SamePart] = []
    for i, (a, b) in enumerate(ranges):
        part = NewPart(nodes[a:b], local_tokens(tokens, a, b))
        if base is not None:
            linked = base.same_part(i)
            if same_tables:
                out.append(linked)
                continue
            old_nodes, old_tokens = (
                (base_tables[0][a:b], local_tokens(base_tables[1], a, b))
                if base_tables is not None
                else base.read_part(i)
            )
            if part.nodes.equals(old_nodes) and part.tokens.equals(old_tokens):
                out.append(linked)
                continue
        out.append(part)
    return out


# ============================================================================================ reading


class VersionFiles:
    """The files of one committed version, read on demand (what an incremental update needs of its parent
    without loading whole tables). Handles both storage formats."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self.version: str = manifest["version"]
        files = manifest.get("files", {})
        if "parts" in manifest:
            self.parts: list[dict[str, Any]] = [dict(p) for p in manifest["parts"]]
        else:  # format 1: the whole table is one part (its token `node` column is already 0-based)
            rows = int(manifest.get("counts", {}).get("skills", 0))
            self.parts = [{"nodes": NODES, "tokens": TOKENS, "rows": rows}] if NODES in files else []
        self.node_rows = sum(int(p["rows"]) for p in self.parts)
        self._parts_read: dict[int, tuple[pl.DataFrame, pl.DataFrame]] = {}
        self._verified: set[str] = set()

    def verify(self, names: Sequence[str] | None = None) -> list[str]:
        """Names (of `names`, default every file) whose size or sha256 differ from the manifest. A file
        found intact is not hashed again by this object (an update checks a part up front and again when
        it reads it)."""
        files = self.manifest["files"]
        bad = []
        for name in names if names is not None else list(files):
            if name in self._verified:
                continue
            meta = files.get(name)
            f = self.path / name
            intact = meta is not None and f.is_file() and f.stat().st_size == meta["bytes"]
            if intact and sha256_file(f) == meta["sha256"]:
                self._verified.add(name)
            else:
                bad.append(name)
        return bad

    def manifest_problems(self) -> list[str]:
        """What is wrong with the manifest as a whole (empty when nothing): an id that does not follow
        from its file table (`content_id`) or its sequence number, and files in the version's folder that
        it does not list (a version's folder is written whole and never changed afterwards)."""
        out = []
        files = self.manifest.get("files", {})
        m = _VERSION_RE.match(self.version)
        if m is None or not self.version.endswith(f"-{content_id(files)}"):
            out.append(
                f"its id {self.version} does not match the hash of its file table ({content_id(files)})"
            )
        elif int(m.group(1)) != self.manifest.get("seq", int(m.group(1))):
            out.append(f"its id {self.version} does not match its sequence number {self.manifest.get('seq')}")
        if self.path.is_dir():
            unlisted = sorted(
                p.name for p in self.path.iterdir() if p.name != MANIFEST and p.name not in files
            )
            if unlisted:
                out.append(f"{', '.join(unlisted[:5])}{' ...' if len(unlisted) > 5 else ''} not listed in it")
        return out

    def check(self, names: Sequence[str] | None = None) -> None:
        bad = self.verify(names)
        if bad:
            raise DamagedSnapshot(
                f"version {self.version} is damaged: {', '.join(bad)} no longer match(es) the manifest "
                "hashes; load another version, run `segos repair` (it makes cold-start files again from the "
                "library), or rebuild it"
            )

    def node_files(self) -> list[str]:
        return [p["nodes"] for p in self.parts]

    def read_nodes(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        cols = list(columns) if columns is not None else None
        frames = [self._parquet(p["nodes"], columns=cols) for p in self.parts]
        # one chunk per column: row gathers (hydrating a bundle) on a many-chunk frame are several times
        # slower, and every query pays that while the copy is paid once
        return pl.concat(frames, how="vertical", rechunk=True) if frames else pl.DataFrame()

    def read_tokens(self) -> pl.DataFrame:
        frames = [
            frame.with_columns((pl.col("node") + start).cast(pl.UInt32)) if start else frame
            for start, _stop, frame in self.token_parts()
        ]
        return (
            pl.concat(frames, how="vertical", rechunk=True) if frames else pl.DataFrame(schema=TOKEN_SCHEMA)
        )

    def token_parts(self) -> Iterator[tuple[int, int, pl.DataFrame]]:
        """(first node, end node, token rows with `node` local to the part) of each part in turn: the
        token table a part at a time, for readers that must not hold it whole (100M rows at 1M skills)."""
        offset = 0
        for p in self.parts:
            rows = int(p["rows"])
            yield offset, offset + rows, self._parquet(p["tokens"])
            offset += rows

    def read_part(self, i: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Node rows and token rows (`node` local) of part i, checked against the manifest first (what is
        read of a part may be written into a new one: damage must not carry over under a fresh hash).
        Kept once read: an update reads its part twice."""
        if i not in self._parts_read:
            p = self.parts[i]
            self.check([p["nodes"], p["tokens"]])
            self._parts_read[i] = (
                self._parquet(p["nodes"]),
                self._parquet(p["tokens"]),
            )
        return self._parts_read[i]

    def part_at(self, idx: int) -> tuple[int, int]:
        """(part, its first node index) of the part that holds node `idx`, or receives it: a node inserted
        at a part boundary joins the later part, one appended at the end joins the last."""
        starts = np.cumsum([0] + [int(p["rows"]) for p in self.parts])
        i = min(int(np.searchsorted(starts, idx, side="right")) - 1, max(len(self.parts) - 1, 0))
        return i, int(starts[i])

    def same_part(self, i: int) -> SamePart:
        return SamePart(self.path, self.parts[i], self.manifest["files"])

    def has_signature(self) -> bool:
        return SIGNATURE in self.manifest.get("files", {})

    def read_signature(self) -> Signature:
        with self.reading(SIGNATURE), np.load(self.path / SIGNATURE) as z:
            indptr, indices, shape = z["indptr"], z["indices"], tuple(int(x) for x in z["shape"])
        data = np.ones(len(indices), dtype=np.float32)
        matrix = sp.csr_matrix((data, indices, indptr), shape=shape)
        return Signature(matrix, self._parquet(VOCAB)["token"])

    def read_extra(self, name: str) -> pl.DataFrame:
        """Another Parquet table of this version (e.g. the build report), as listed in its manifest."""
        if name not in self.manifest.get("files", {}):
            raise SnapshotError(f"version {self.version} has no file {name!r}")
        return self._parquet(name)

    def read_edges(self) -> pl.DataFrame:
        return self._parquet(EDGES)

    def window_files(self) -> list[Path]:
        """The window files this version references, each checked against its recorded size and sha256."""
        root = self.path.parent.parent  # STORE/versions/<id> → STORE
        paths, bad = [], []
        for ref in self.manifest.get(WINDOW_FILES, []):
            f = root / ref["path"]  # an absolute recorded path stays absolute
            if f.is_file() and f.stat().st_size == ref["bytes"] and sha256_file(f) == ref["sha256"]:
                paths.append(f)
            else:
                bad.append(str(f))
        if bad:
            raise DamagedSnapshot(
                f"version {self.version} references window traces that are gone or changed: "
                f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}; its round traces cannot be read "
                "(restore the window's files, or rebuild the version)"
            )
        return paths

    def read_transition(self) -> sp.csr_matrix:
        with self.reading(TRANSITION):
            return sp.load_npz(self.path / TRANSITION).tocsr()

    def _parquet(self, name: str, columns: list[str] | None = None) -> pl.DataFrame:
        with self.reading(name):
            return pl.read_parquet(self.path / name, columns=columns)

    @contextlib.contextmanager
    def reading(self, name: str) -> Iterator[None]:
        """A file of this version that cannot be read (truncated, garbled, gone) is named in the error; the
        readers' own messages name no file. Polars' reader panics (a `BaseException`) are caught too."""
        try:
            yield
        except (
            OSError,
            ValueError,
            KeyError,
            zipfile.BadZipFile,
            pl.exceptions.PolarsError,
            pl.exceptions.PanicException,
        ) as exc:
            raise DamagedSnapshot(
                f"version {self.version}: cannot read {self.path / name}: {explain(exc)}. "
                "Run `segos verify --all` to see which versions are intact; `segos repair --all` makes "
                "damaged cold-start files again from the library, and restores nothing else: restore the "
                "rest from a backup, or delete the version's folder and rebuild"
            ) from exc


@dataclass
class Snapshot:
    """A loaded version: tables, operator and manifest. Read-only by convention and on disk."""

    version: str
    path: Path | None  # None for an in-memory draft (e.g. the graph inside an evolution round)
    manifest: dict[str, Any]
    nodes: pl.DataFrame
    edges: pl.DataFrame
    transition: sp.csr_matrix
    # The string token table; None until first asked for on a stored version. Serving never needs it (the
    # lexical index is cached or built a part at a time) and at 1M skills it holds 100M rows.
    token_table: pl.DataFrame | None = field(default=None, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    # The URI of the store it was loaded from (`RemoteStore.load`); None for a local store or a draft.
    # Work that runs on other machines (Spark executors) opens the store by it rather than by `path`.
    store_uri: str | None = None
    # The experience table (EXPERIENCE_SCHEMA); None until first asked for on a stored version.
    experience_table: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def experience(self) -> pl.DataFrame:
        """What the version's skills learned from traces (empty for a cold start)."""
        if self.experience_table is None:
            files = self.files
            if files is not None and EXPERIENCE in self.manifest.get("files", {}):
                self.experience_table = files.read_extra(EXPERIENCE).cast(EXPERIENCE_SCHEMA)
            else:
                self.experience_table = pl.DataFrame(schema=EXPERIENCE_SCHEMA)
        return self.experience_table

    @property
    def tokens(self) -> pl.DataFrame:
        if self.token_table is None:
            files = self.files
            if files is None:
                raise SnapshotError(f"draft version {self.version} was made without a token table")
            self.token_table = files.read_tokens()
        return self.token_table

    @property
    def tokens_loaded(self) -> bool:
        return self.token_table is not None

    @property
    def parent(self) -> str | None:
        return self.manifest.get("parent")

    @property
    def round(self) -> int:
        return int(self.manifest.get("round", 0))

    @property
    def files(self) -> VersionFiles | None:
        """The stored files behind this version (None for a draft)."""
        return VersionFiles(self.path, self.manifest) if self.path is not None else None

    def signature(self) -> Signature:
        """The signature matrix of the Jaccard graph: stored with the version, or derived from the tokens."""
        if "signature" not in self._cache:
            files = self.files
            if files is not None and files.has_signature():
                self._cache["signature"] = files.read_signature()
            else:
                self._cache["signature"] = Signature.of(self.tokens, self.nodes.height)
        return self._cache["signature"]

    def content_key(self, table: str) -> str | None:
        """A hash that changes exactly when the stored `table` (`nodes` or `tokens`) changes."""
        stored = self.files
        if stored is None:
            return None
        files = self.manifest.get("files", {})
        names = [p[table] for p in stored.parts]
        if not names or any(n not in files for n in names):
            return None
        if len(names) == 1 and names[0] in (NODES, TOKENS):
            return files[names[0]]["sha256"]  # format 1: keeps keys (e.g. of the lexical cache) stable
        return hashlib.sha256("".join(files[n]["sha256"] for n in names).encode()).hexdigest()

    def read_extra(self, name: str) -> pl.DataFrame:
        """Another Parquet table of this version (e.g. the build report), as listed in its manifest."""
        files = self.files
        if files is None:
            raise SnapshotError(f"version {self.version} has no file {name!r}")
        return files.read_extra(name)


# ============================================================================================ writing


class _Stage:
    """A version being written in `.staging/`: files are written (or linked) first, the manifest last."""

    def __init__(self, store: SnapshotStore):
        self.store = store
        store.staging_dir.mkdir(parents=True, exist_ok=True)
        store.versions_dir.mkdir(parents=True, exist_ok=True)
        sweep_stale_stages(store.staging_dir)  # folders of killed writers (a live writer's lock is held)
        self._lock = stage_lock(store.staging_dir, uuid.uuid4().hex)
        self.dir = self._lock.__enter__()
        try:
            self.dir.mkdir()
        except BaseException:
            self._lock.__exit__(*sys.exc_info())
            raise
        self.linked: dict[str, Any] = {}
        self.sealed: dict[str, Any] = {}  # files already flushed and hashed (`_seal`)
        self.parts: list[dict[str, Any]] = []
        self.current: Path = self.dir  # the file being written, for the message when writing fails

    def at(self, name: str) -> Path:
        """The staged path of `name`, noted as the file being written."""
        self.current = self.dir / name
        return self.current

    def link(self, name: str, source: Path, meta: Mapping[str, Any]) -> None:
        """Add an unchanged file of another version under `name`, keeping that version's recorded hash (so
        damage to the shared file stays detectable here too). Copies when the filesystem cannot link."""
        target = self.at(name)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
        self.linked[name] = {"sha256": meta["sha256"], "bytes": meta["bytes"]}

    def add_parts(self, plan: PartPlan) -> None:
        # New parts are written PART_WRITERS at a time: polars releases the GIL while it decodes, encodes
        # and compresses a part, so a second thread keeps the other core busy (a 1M-skill version has 245
        # parts; 1.15 → 0.84 s for 10 of them). Records are gathered in part order.
        with ThreadPoolExecutor(PART_WRITERS) as pool:
            self.parts.extend(pool.map(self._add_part, range(len(plan)), itertools.repeat(plan)))

    def _add_part(self, i: int, plan: PartPlan) -> dict[str, Any]:
        nodes_name, tokens_name = part_files(i)
        part = plan[i]
        if isinstance(part, SamePart):
            self.link(nodes_name, part.folder / part.record["nodes"], part.files[part.record["nodes"]])
            self.link(tokens_name, part.folder / part.record["tokens"], part.files[part.record["tokens"]])
            rec = {k: part.record[k] for k in ("rows", "first", "last") if k in part.record}
        else:
            own_rows(part.nodes).write_parquet(self.at(nodes_name), **PART_PARQUET)
            own_rows(part.tokens).write_parquet(self.at(tokens_name), **PART_PARQUET)
            self._seal(nodes_name)
            self._seal(tokens_name)
            ids = part.nodes["id"]
            rec = {
                "rows": part.nodes.height,
                "first": ids[0] if len(ids) else None,
                "last": ids[-1] if len(ids) else None,
            }
        return {"nodes": nodes_name, "tokens": tokens_name, **rec}

    def _seal(self, name: str) -> None:
        """Flush a finished file to disk and record its hash now, on the writer's thread: a 1M-skill
        version's parts are most of its 0.9 GB, and flushing and hashing them one after another at the
        commit kept the disk and a core busy while nothing else ran."""
        path = self.dir / name
        with path.open("rb") as fh:
            os.fsync(fh.fileno())
        self.sealed[name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}

    def add_signature(self, signature: Signature | VersionFiles) -> None:
        if isinstance(signature, VersionFiles):
            files = signature.manifest["files"]
            for name in (SIGNATURE, VOCAB):
                self.link(name, signature.path / name, files[name])
            return
        m = signature.matrix.tocsr()
        with self.at(SIGNATURE).open("wb") as fh:  # uncompressed: written on every update, read fast
            np.savez(
                fh,
                indptr=m.indptr.astype(np.int64),
                indices=m.indices.astype(np.int32),
                shape=np.array(m.shape, dtype=np.int64),
            )
        pl.DataFrame({"token": signature.vocab}, schema={"token": pl.String}).write_parquet(self.at(VOCAB))

    def commit(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        files = {}
        for f in sorted(self.dir.iterdir()):
            if f.name in self.linked or f.name in self.sealed:
                files[f.name] = self.linked.get(f.name) or self.sealed[f.name]
                continue
            self.current = f
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
            files[f.name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
        content = content_id(files)
        extra = {"parts": self.parts} if self.parts else {}
        self.current = self.dir / MANIFEST
        return self.store._commit(self.dir, {**manifest, **extra}, files, content)

    def discard(self) -> None:
        """Remove what is left of the folder (all of it unless committed), then release its lock."""
        try:
            if self.dir.exists():
                shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            self._lock.__exit__(None, None, None)


class SnapshotStore:
    def __init__(self, root: str | Path, lock_timeout: float = WRITER_WAIT_S):
        if is_uri(root):  # Path() would fold `s3://b/x` into a local folder named `s3:`
            raise SnapshotError(
                f"{root} is a URI: open it with segos_pipeline.store.remote.open_store (a remote store "
                "with a local cache), not SnapshotStore"
            )
        self.root = Path(root)
        self.versions_dir = self.root / "versions"
        self.staging_dir = self.root / ".staging"
        self.lock_timeout = lock_timeout  # seconds a commit waits for another writer (see `writer`)
        # per thread: the version `resolve` last returned for "latest", the base of the optimistic check
        self._reads = threading.local()

    def __getstate__(self) -> dict[str, Any]:  # a store is passed between processes (Dagster): reads stay
        return {k: v for k, v in self.__dict__.items() if k != "_reads"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reads = threading.local()

    # ------------------------------------------------------------------------------------------ writers

    @contextlib.contextmanager
    def writer(
        self, command: str | None = None, timeout: float | None = None, notify: Notify | None = None
    ) -> Iterator[SnapshotStore]:
        """Hold the store's writer lock for a whole write (read the parent, compute, commit):

            with store.writer("segos evolve --window w1"):
                ...  # reads and commits of this process; other writers wait or give up

        Waits up to `timeout` seconds (default `lock_timeout`), saying so on stderr (or to `notify`), then
        raises `StoreBusy` naming the holder (PID, command, since). Re-entrant within a process. The lock
        is released when the block ends, or by the kernel when the process dies."""
        try:
            with writer_lock(
                self.root,
                command or _command_line(),
                self.lock_timeout if timeout is None else timeout,
                notify,
            ):
                yield self
        except WriterBusy as exc:
            raise StoreBusy(str(exc)) from None

    # ------------------------------------------------------------------------------------------ listing

    def list_versions(self) -> list[dict[str, Any]]:
        """Manifests of committed versions, oldest first (a folder without manifest is not a version, and
        one whose manifest cannot be read is left out: `unreadable_versions` names those)."""
        # ties (two versions with one sequence number, from a store written before writers were
        # serialized) in creation order, so that `latest` is at least the same one every time
        return sorted(
            self._scan()[0], key=lambda m: (_seq(m["version"]), str(m.get("created_at", "")), m["version"])
        )

    def unreadable_versions(self) -> dict[str, str]:
        """Version folders whose manifest exists but cannot be read: folder name → why. A commit writes the
        manifest last and renames the folder into place, so these are damaged, not half-written."""
        return self._scan()[1]

    def _scan(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        if not self.versions_dir.is_dir():
            return [], {}
        found, unreadable = [], {}
        for child in self.versions_dir.iterdir():
            manifest = child / MANIFEST
            if _VERSION_RE.match(child.name) and manifest.is_file():
                try:
                    m = json.loads(manifest.read_text())
                    wrong = manifest_shape(m, child.name)
                    if wrong is not None:
                        raise ValueError(wrong)
                    found.append(m)
                except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
                    unreadable[child.name] = f"{MANIFEST} unreadable: {exc}"
        return found, unreadable

    def latest(self) -> str:
        """The newest version whose manifest reads (`resolve("latest")` refuses when a newer one does not)."""
        versions = self.list_versions()
        if not versions:
            raise UnknownVersion(f"store {self.root} has no versions yet; run `segos build` first")
        return versions[-1]["version"]

    def _newest_readable(self) -> str:
        """`latest()`, refused when a version numbered after it has a manifest that cannot be read: the
        store's newest version is damaged, and building on or serving the one before it must be asked for
        by name (`--from`, `--version`), never happen silently."""
        vid = self.latest()
        newer = {v: why for v, why in self.unreadable_versions().items() if _seq(v) > _seq(vid)}
        if newer:
            newest = max(newer, key=_seq)
            raise DamagedSnapshot(
                f"the newest version {newest} of store {getattr(self, 'uri', self.root)} cannot be used: "
                f"{newer[newest]}. The newest readable one is {vid}; name it to use it (`--from {vid}` for "
                f"evolve, `--version {vid}` elsewhere), or restore {newest} from a backup (or delete its "
                "folder). `segos verify --all` lists every damaged version"
            )
        return vid

    def resolve(self, version: str | None) -> str:
        """A version id from an id, a unique prefix, `latest`/None, `served` (the version the store's
        served pointer names, see `served.py`), or `vN` (sequence number)."""
        if version in (None, "", "latest"):
            vid = self._newest_readable()
            self._reads.latest = vid
            return vid
        if version == "served":
            return served(self)
        manifests = self.list_versions()
        ids = [m["version"] for m in manifests]
        if version in ids:
            return version
        if re.fullmatch(r"v?\d+", version):
            seq = [m for m in manifests if m.get("seq", _seq(m["version"])) == int(version.lstrip("v"))]
            if len(seq) > 1:
                listed = "; ".join(
                    f"{m['version']} ({m.get('kind', '?')}, parent {m.get('parent') or '-'}, created "
                    f"{m.get('created_at', '?')})"
                    for m in seq
                )
                raise UnknownVersion(
                    f"{version!r} is ambiguous in store {self.root}: {len(seq)} versions share sequence "
                    f"number {int(version.lstrip('v'))} (written by concurrent writers before segos "
                    f"serialized them): {listed}. Give the full version id"
                )
            if seq:
                return seq[0]["version"]
        matches = [i for i in ids if i.startswith(version)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            self._refuse_unreadable(version)
        known = ", ".join(ids[-5:]) or "none"
        hint = f"ambiguous prefix (matches {len(matches)})" if matches else "no such version"
        raise UnknownVersion(
            f"{hint}: {version!r} in store {self.root}; known versions (newest last): {known}. "
            f"Run `segos versions --store {getattr(self, 'uri', self.root)}` to list them."
        )

    def _refuse_unreadable(self, version: str) -> None:
        """A version asked for by id, prefix or number that is there but whose manifest cannot be read is
        damaged, not unknown: say so."""
        seq = int(version.lstrip("v")) if re.fullmatch(r"v?\d+", version) else None
        for vid, why in sorted(self.unreadable_versions().items()):
            if vid.startswith(version) or (seq is not None and _seq(vid) == seq):
                raise DamagedSnapshot(
                    f"version {vid} of store {getattr(self, 'uri', self.root)} cannot be used: {why}; "
                    "restore it from a backup, or delete its folder (`segos verify --all` lists every "
                    "damaged version)"
                )

    def manifest(self, version: str | None = None) -> dict[str, Any]:
        vid = self.resolve(version)
        return json.loads((self.versions_dir / vid / MANIFEST).read_text())

    # ------------------------------------------------------------------ small files beside the versions

    def read_root_file(self, name: str) -> bytes | None:
        """The bytes of file `name` at the store's top (the served pointer); None when there is none."""
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            return None

    def write_root_file(self, name: str, data: bytes) -> None:
        """Replace file `name` at the store's top whole (readers see the old bytes or the new ones)."""
        write_atomically(self.root / name, data)

    # ------------------------------------------------------------------------------------------ loading

    def files(self, version: str | None = None) -> VersionFiles:
        """The files of a version, for reading parts of it without loading it whole (not verified)."""
        vid = self.resolve(version)
        path = self.versions_dir / vid
        return VersionFiles(path, json.loads((path / MANIFEST).read_text()))

    def verify(self, version: str | None = None) -> list[str]:
        """Names of files whose size or sha256 differ from the manifest (empty when intact)."""
        return self.files(version).verify()

    def load(self, version: str | None = None, verify: bool = True) -> Snapshot:
        files = self.files(version)
        if verify:
            files.check()
        return Snapshot(
            version=files.version,
            path=files.path,
            manifest=files.manifest,
            nodes=files.read_nodes(),
            edges=files.read_edges(),
            transition=files.read_transition(),
        )

    # ------------------------------------------------------------------------------------------ writing

    def write(
        self,
        *,
        nodes: pl.DataFrame,
        tokens: pl.DataFrame,
        edges: pl.DataFrame,
        transition: sp.csr_matrix,
        manifest: Mapping[str, Any],
        signature: Signature | None = None,
        base: Snapshot | None = None,
        extra_tables: Mapping[str, pl.DataFrame] | None = None,
        extra_writers: Mapping[str, Callable[[Path], None]] | None = None,
    ) -> dict[str, Any]:
        """Write a new version atomically and return its manifest (with id, hashes and sizes).

        `manifest` carries the caller's fields (kind, parent, config, counts, ...); the store adds the
        version id, sequence, format, code version, creation time, parts and file hashes. With `base` (the
        parent), parts whose rows equal the parent's are linked, not rewritten, and so is the signature
        when no part changed; `signature` saves deriving it from `tokens`.
        """
        base_files = base.files if base is not None else None
        plan = plan_parts(nodes, tokens, base_files, (base.nodes, base.tokens) if base is not None else None)
        if signature is None:
            if (
                base_files is not None
                and base_files.has_signature()
                and all(isinstance(p, SamePart) for p in plan)
            ):
                sig: Signature | VersionFiles = base_files
            else:
                sig = Signature.of(tokens, nodes.height)
        else:
            sig = signature
        return self.write_parts(
            parts=plan,
            signature=sig,
            edges=edges,
            transition=transition,
            manifest=manifest,
            extra_tables=extra_tables,
            extra_writers=extra_writers,
        )

    def write_parts(
        self,
        *,
        parts: PartPlan,
        signature: Signature | VersionFiles,
        edges: pl.DataFrame,
        transition: sp.csr_matrix,
        manifest: Mapping[str, Any],
        extra_tables: Mapping[str, pl.DataFrame] | None = None,
        extra_writers: Mapping[str, Callable[[Path], None]] | None = None,
    ) -> dict[str, Any]:
        """Write a version from a part plan (new parts written, unchanged ones linked); see `write`."""
        with self._staged() as stage:
            try:
                stage.add_parts(parts)
                stage.add_signature(signature)
                edges.write_parquet(stage.at(EDGES))
                # uncompressed: zlib costs more time than the bytes it saves (the operator is ~1 MB at 100k)
                sp.save_npz(stage.at(TRANSITION), transition.tocsr(), compressed=False)
                for name, table in (extra_tables or {}).items():
                    table.write_parquet(stage.at(name))
                for name, writer in (extra_writers or {}).items():
                    writer(stage.at(name))
                return stage.commit(manifest)
            except (OSError, pl.exceptions.PolarsError) as exc:
                # the staged folder is removed on the way out: no half version is left behind
                raise StoreWriteError(
                    f"could not write a new version to store {self.root}: "
                    f"{explain(exc, getattr(exc, 'filename', None) or stage.current)}. "
                    "Nothing was committed"
                ) from exc

    @contextlib.contextmanager
    def _staged(self) -> Iterator[_Stage]:
        stage = _Stage(self)
        try:
            yield stage
        finally:
            stage.discard()

    def _commit(
        self, stage: Path, manifest: dict[str, Any], files: dict[str, Any], content: str
    ) -> dict[str, Any]:
        # under the writer lock: the sequence number read here is still free when the folder is renamed
        with self.writer():
            versions = self.list_versions()
            self._check_parent(manifest.get("parent"), versions)
            if versions:
                # a store without a served pointer serves its latest: record it before this version
                # becomes the latest, so that only a promotion changes what followers serve
                pin(self, versions[-1]["version"])
            full = self._rename_into_place(stage, manifest, files, content, versions)
        self._reads.latest = None  # this thread's next commit builds on what it reads next
        return full

    def _check_parent(self, parent: str | None, versions: list[dict[str, Any]]) -> None:
        """Refuse a child of the version this thread read as the latest when another version has been
        committed since: the newest version would silently lack that one's change (an edit lost)."""
        based_on = getattr(self._reads, "latest", None)
        if parent is None or parent != based_on or not versions:
            return
        newest = versions[-1]
        if newest["version"] == parent:
            return
        raise StaleParent(
            f"another writer committed {newest['version']} ({newest.get('kind', '?')}, "
            f"{newest.get('created_at', '?')}) after this command read {parent} as the latest version; "
            f"nothing was committed, so that its change is not lost. Rerun the command: it builds on "
            f"{newest['version']}"
        )

    def _rename_into_place(
        self,
        stage: Path,
        manifest: dict[str, Any],
        files: dict[str, Any],
        content: str,
        versions: list[dict[str, Any]],
    ) -> dict[str, Any]:
        taken = max((_seq(m["version"]) for m in versions), default=0)
        for attempt in range(100):  # a writer of older code takes no lock: step past its numbers
            seq = taken + 1 + attempt
            vid = f"v{seq:04d}-{content}"
            full = {
                "format": FORMAT,
                "version": vid,
                "seq": seq,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "code_version": __version__,
                **manifest,
                "files": files,
            }
            manifest_path = stage / MANIFEST
            if manifest_path.exists():
                manifest_path.chmod(0o644)  # a retry rewrites it (linked files are never touched)
            manifest_path.write_text(json.dumps(full, indent=2, sort_keys=False, default=str))
            with manifest_path.open("rb") as fh:
                os.fsync(fh.fileno())
            for f in stage.iterdir():
                if f.stat().st_mode & 0o222:
                    f.chmod(0o444)
            fsync_dir(stage)
            if any(_seq(p.name) == seq for p in self.versions_dir.iterdir()):
                continue
            try:
                os.rename(stage, self.versions_dir / vid)
            except OSError:
                if (self.versions_dir / vid).exists():
                    continue
                raise
            fsync_dir(self.versions_dir)
            return full
        raise SnapshotError(f"could not allocate a version id in {self.root} after 100 attempts")


def _command_line() -> str:
    """What this process is, for another writer's message (`segos evolve --window w1`, a script, ...)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name == "__main__.py":  # `python -m segos_pipeline.cli ...`
        name = "segos"
    return " ".join([name, *sys.argv[1:]])[:200]


def _seq(version: str) -> int:
    m = _VERSION_RE.match(version)
    return int(m.group(1)) if m else -1
