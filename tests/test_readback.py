"""Issue 31 item 5: everything read back from a store is checked, and nothing damaged is used.

Derived caches (the lexical index, skill vectors) carry their files' hashes: an emptied file or a vector
cache whose rows were reversed is a miss, dropped and rebuilt, and `segos retrieve` returns the bundle it
returned before the damage. Trace parts carry their hash in their name: a silent bit flip is reported by
`segos verify --all` and refused by `segos evolve`, by name. A newest version whose manifest is truncated
is reported by `segos versions` and `segos verify`, and `segos evolve` does not build on an older one
unless told `--from`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.retrieval import semantic as semantic_mod
from segos_pipeline.service.api import SegosService
from segos_pipeline.store.cache import HASHES

PROJECT_ROOT = Path(__file__).resolve().parents[1]
QUERY = "load the sales csv, clean missing values and chart revenue by month"


def segos(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """A real `segos` process running this checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "segos_pipeline.cli", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (proc.returncode == 0) is ok, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def bundle(store: Path) -> dict[str, Any]:
    return json.loads(segos("retrieve", QUERY, "--store", str(store), "--json").stdout)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, st)
    return st.root


def entry(store: Path, kind: str) -> Path:
    [folder] = [p for p in (store / "cache" / kind).iterdir() if not p.name.startswith(".")]
    return folder


def replace_file(path: Path, data: bytes) -> None:
    """Damage by replacing the file (a mapped file truncated in place is a bus error, not a cache miss)."""
    path.unlink()
    path.write_bytes(data)


def reverse_rows(path: Path) -> None:
    """Rewrite `vectors.npy` with its rows reversed: it still parses, with every skill's vector wrong."""
    import io

    rows = np.load(path)
    assert len(rows) > 1 and not np.array_equal(rows, rows[::-1])
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(rows[::-1]))
    replace_file(path, buf.getvalue())


# ------------------------------------------------------------------------------------------ caches


@pytest.mark.parametrize(
    ("kind", "name"),
    [("lexical", "matrix.npz"), ("semantic", "vectors.npy")],
)
def test_an_emptied_cache_file_is_rebuilt_and_retrieve_returns_the_same_bundle(store, kind, name):
    before = bundle(store)  # builds and caches the index and the vectors
    folder = entry(store, kind)
    intact = (folder / name).read_bytes()
    replace_file(folder / name, b"")
    assert bundle(store) == before
    assert (entry(store, kind) / name).read_bytes() == intact  # dropped and written again, whole


def test_reversed_rows_of_the_vector_cache_are_not_used(store):
    before = bundle(store)
    folder = entry(store, "semantic")
    intact = (folder / "vectors.npy").read_bytes()
    reverse_rows(folder / "vectors.npy")
    assert bundle(store) == before
    assert (entry(store, "semantic") / "vectors.npy").read_bytes() == intact


def test_every_cache_file_emptied_in_turn_is_a_miss_never_a_crash(store):
    """In one process, as the service runs: each file of each entry (its hashes included) emptied in turn;
    the service starts and answers as it did with the intact cache."""
    expected = SegosService(store, reload="sync").search(QUERY)
    files = [(kind, f.name) for kind in ("lexical", "semantic") for f in sorted(entry(store, kind).iterdir())]
    assert {"complete", HASHES, "vectors.npy", "matrix.npz"} <= {name for _, name in files}
    for kind, name in files:
        replace_file(entry(store, kind) / name, b"")
        semantic_mod._RECENT.clear()  # what an earlier service of this process computed is not the disk
        assert SegosService(store, reload="sync").search(QUERY) == expected, (kind, name)
        assert (entry(store, kind) / name).stat().st_size > 0, (kind, name)  # rebuilt


def test_an_entry_written_without_hashes_is_rebuilt(store):
    """Entries from before the hashes (or with `hashes.json` gone) cannot be checked: they are misses."""
    bundle(store)
    folder = entry(store, "lexical")
    (folder / HASHES).unlink()
    bundle(store)
    assert (entry(store, "lexical") / HASHES).is_file()  # dropped and written again, with its hashes


def test_segos_mcp_starts_and_searches_over_a_damaged_cache(store):
    bundle(store)
    replace_file(entry(store, "lexical") / "vocab.parquet", b"")
    reverse_rows(entry(store, "semantic") / "vectors.npy")
    expected = SegosService(store, reload="sync").search(QUERY)
    semantic_mod._RECENT.clear()
    reverse_rows(entry(store, "semantic") / "vectors.npy")
    replace_file(entry(store, "lexical") / "matrix.npz", b"\0" * 10)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "segos_pipeline.cli", "mcp", "--store", str(store)],
        cwd=str(PROJECT_ROOT),
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )

    async def scenario() -> dict[str, Any]:
        async with Client(params) as client:
            result = await client.call_tool("search_skills", {"query": QUERY})
            assert not result.is_error, result.content
            return json.loads(result.content[0].text)  # type: ignore[union-attr]

    assert anyio.run(scenario) == expected
