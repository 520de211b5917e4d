"""What a store holds on disk, and the names and hashes a version's manifest records (SPEC §9).

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

Parts (format 2). The node table (sorted by id) is stored as consecutive parts of about `PART_ROWS` skills,
each with the token rows of its skills (their `node` index local to the part). A child version whose part
holds the same rows as its parent's hard-links the parent's file instead of writing it again, and records
the parent's hash for it: one changed skill rewrites one part, an evolution round that leaves the library
alone rewrites no part, and a damaged shared file still fails verification in every version that lists it.
`signature.npz` + `vocab.parquet` hold the binary skill × token signature matrix of the Jaccard graph, so
an incremental update never re-derives it from the token table. Format-1 versions (one `nodes.parquet` and
one `tokens.parquet`, no signature) still load; the signature is then derived from the tokens. Main wrote
format 1 while the README's install already pointed at it, so a user's store may hold such versions: its
read path stays (as do the older round-trace layouts, see `retrieval/round_traces.py`).

Referenced files. An evolved version read from a window of stored traces does not copy them: it lists the
window's Parquet files under `window_files` in its manifest (path relative to the store when inside it,
size, sha256), checked on every read (`VersionFiles.window_files`). What the round stores of them, and how
it is read, is `retrieval/round_traces.py`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

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
VERSION_RE = re.compile(r"^v(\d{4,})-[0-9a-f]{8}$")


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def content_id(files: Mapping[str, Any]) -> str:
    """The content part of a version id (`v0007-<this>`): a hash of its manifest's file table, so that the
    id names the bytes the version holds (`manifest_problems` checks it)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:8]


def read_manifest(data: str | bytes, name: str) -> dict[str, Any]:
    """The manifest of version folder `name` from its JSON text; ValueError saying why it cannot be that:
    commands and the server rely on these fields, and a wrong shape must not reach them as a traceback."""
    m = json.loads(data)  # JSONDecodeError is a ValueError
    if not isinstance(m, dict) or m.get("version") != name:
        raise ValueError(f"it does not name version {name}")
    files = m.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("sha256"), str) and isinstance(f.get("bytes"), int)
        for f in files.values()
    ):
        raise ValueError("its `files` is not a table of {name: {sha256, bytes}}")
    parts = m.get("parts", [])
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(p.get("rows"), int) and {"nodes", "tokens"} <= p.keys()
        for p in parts
    ):
        raise ValueError("its `parts` is not a list of {nodes, tokens, rows}")
    if not isinstance(m.get("seq", version_seq(name)), int):
        raise ValueError("its `seq` is not a number")
    return m


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


def version_seq(version: str) -> int:
    """The sequence number of a version id (`v0007-...` → 7); -1 for a name that is not one."""
    m = VERSION_RE.match(version)
    return int(m.group(1)) if m else -1
