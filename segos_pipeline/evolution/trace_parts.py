"""Trace parts carry their own hash: `STORE/traces/<window>/parts/<run>-<n>.<h>.parquet`, where `<h>` is the
first 32 hex digits of the part's sha256, computed on the written bytes before the part is renamed into
place (after an fsync). A name is immutable, so the hash cannot drift from the file it names, and a store on a
URI carries it without a second file.

Every read of a window checks its parts first (`damaged`), so a silent bit flip is never learned from, and a
part that fails is named with the way out (`repair_hint`). A file without a hash in its name (a part written
before parts carried hashes, or a whole-window `traces.parquet`) cannot be checked against anything: it is
read, and a reader that fails on it, polars' panics included (a `BaseException`), is turned into the same
error naming the file (`reading`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import polars as pl

from ..store.errors import SnapshotError
from ..store.layout import sha256_file
from ..store.oserrors import explain

HASH_DIGITS = 32  # 128 bits of sha256: plenty to tell damage, and the name stays readable
_HASHED = re.compile(rf"\.([0-9a-f]{{{HASH_DIGITS}}})\.parquet$")


class DamagedTraces(SnapshotError):
    """A stored trace file that does not match its hash, or that cannot be read; the message names it."""


def hashed_name(stem: str, digest: str) -> str:
    """The name of a part written as `stem` whose bytes hash to `digest` (a sha256 hex digest)."""
    return f"{stem}.{digest[:HASH_DIGITS]}.parquet"


def recorded_hash(path: Path) -> str | None:
    """The hash a part's name records (None for a file written before parts carried hashes)."""
    m = _HASHED.search(path.name)
    return m.group(1) if m else None


def problem(path: Path) -> str | None:
    """Why `path` cannot be trusted (None when it matches the hash in its name, or its name has none)."""
    want = recorded_hash(path)
    if want is None:
        return None
    try:
        got = sha256_file(path)[:HASH_DIGITS]
    except OSError as exc:
        return f"cannot be read: {explain(exc)}"
    return None if got == want else f"its bytes no longer match the hash in its name (sha256 {got}...)"


def damaged(paths: Sequence[Path]) -> list[tuple[Path, str]]:
    """The files of `paths` that fail their hash, each with why."""
    out = []
    for p in paths:
        why = problem(p)
        if why is not None:
            out.append((p, why))
    return out


def repair_hint(path: Path, window: str | None = None, store: Path | None = None) -> str:
    """The commands that set a damaged part aside and add its traces back from their source."""
    where = f" --store {store}" if store is not None else ""
    into = f" --window {window}" if window else ""
    return (
        f"set it aside with `mv {path} {path}.damaged` (it is then no longer read) and re-ingest the "
        f"window's source traces: `segos ingest SOURCE{into}{where}` adds back only the traces that are "
        "missing"
    )


def damage_error(
    bad: Sequence[tuple[Path, str]], window: str | None = None, store: Path | None = None
) -> str:
    first, why = bad[0]
    more = f" (and {len(bad) - 1} more: {', '.join(p.name for p, _ in bad[1:4])})" if len(bad) > 1 else ""
    what = f"window {window!r}: " if window else ""
    return f"{what}trace part {first} is damaged: {why}{more}; {repair_hint(first, window, store)}"


def check(paths: Sequence[Path], window: str | None = None, store: Path | None = None) -> None:
    """Raise `DamagedTraces` naming the files of `paths` that fail their hash."""
    bad = damaged(paths)
    if bad:
        raise DamagedTraces(damage_error(bad, window, store))


def check_digests(digests: Mapping[str, str], window: str | None = None) -> None:
    """`check` for files hashed elsewhere (a Spark job's executors): name → sha256 hex digest."""
    bad = [
        (Path(name), f"its bytes no longer match the hash in its name (sha256 {got[:HASH_DIGITS]}...)")
        for name, got in digests.items()
        if (want := recorded_hash(Path(name))) is not None and got[:HASH_DIGITS] != want
    ]
    if bad:
        raise DamagedTraces(damage_error(bad, window))


@contextlib.contextmanager
def reading(paths: Sequence[Path], window: str | None = None, store: Path | None = None) -> Iterator[None]:
    """Reads of stored trace files: a reader's failure on one of them (polars' panic included, which no
    `except Exception` catches) becomes `DamagedTraces` naming the files read."""
    try:
        yield
    except (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
        names = ", ".join(str(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
        what = f"window {window!r}: " if window else ""
        first = paths[0] if paths else Path("PART")
        raise DamagedTraces(
            f"{what}cannot read the stored traces ({names}): {explain(exc)}; `segos verify --all` names "
            f"the damaged part; {repair_hint(first, window, store)}"
        ) from None
