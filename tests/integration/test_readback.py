"""Everything read back from a store is checked, and nothing damaged is used.

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

from ..conftest import run_segos

PROJECT_ROOT = Path(__file__).resolve().parents[2]
QUERY = "load the sales csv, clean missing values and chart revenue by month"


segos = run_segos


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


# ------------------------------------------------------------------------------------------ trace parts

DEMO_TRACES = PROJECT_ROOT / "segos_pipeline" / "demo" / "traces"


def flip_bit(path: Path, offset: int, bit: int = 4) -> None:
    """A silent single-bit flip in place: same size, same name, same mtime (as disk rot leaves a file)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def ingested(store: Path) -> Path:
    segos("ingest", str(DEMO_TRACES), "--store", str(store), "--window", "w1")
    return store


def parts(store: Path) -> list[Path]:
    return sorted((store / "traces" / "w1" / "parts").glob("*.parquet"))


def test_parts_are_named_by_their_hash(ingested):
    from segos_pipeline.evolution.trace_parts import recorded_hash
    from segos_pipeline.store.layout import sha256_file

    found = parts(ingested)
    assert found and all(recorded_hash(p) == sha256_file(p)[:32] for p in found)


@pytest.mark.parametrize("where", [0.1, 0.5, 0.9])
def test_a_bit_flip_in_a_part_is_reported_by_verify_and_refused_by_evolve(ingested, where):
    part = parts(ingested)[0]
    flip_bit(part, int(part.stat().st_size * where))
    checked = segos("verify", "--all", "--store", str(ingested), ok=False)
    rel = str(part.relative_to(ingested))
    assert f"{rel}: DAMAGED" in checked.stdout
    assert f"mv {part} {part}.damaged" in checked.stderr and "1 damaged trace part(s)" in checked.stderr
    as_json = json.loads(segos("verify", "--all", "--store", str(ingested), "--json", ok=False).stdout)
    assert [(r["part"], r["ok"]) for r in as_json["traces"]] == [(rel, False)]
    assert as_json["damaged_parts"] == 1 and as_json["damaged"] == 0

    versions_before = sorted(p.name for p in (ingested / "versions").iterdir())
    refused = segos("evolve", "--window", "w1", "--store", str(ingested), "--quiet", ok=False)
    assert refused.returncode == 2 and f"trace part {part} is damaged" in refused.stderr
    assert "Traceback" not in refused.stderr and "segos ingest SOURCE --window w1" in refused.stderr
    assert sorted(p.name for p in (ingested / "versions").iterdir()) == versions_before  # nothing learned

    # The way out the message gives: set it aside, re-ingest the source, and the window is whole again.
    part.rename(part.with_name(part.name + ".damaged"))
    segos("ingest", str(DEMO_TRACES), "--store", str(ingested), "--window", "w1")
    assert "traces/w1: ok" in segos("verify", "--all", "--store", str(ingested)).stdout
    segos("evolve", "--window", "w1", "--store", str(ingested), "--quiet")


def test_ingest_into_a_window_with_a_damaged_part_names_it(ingested):
    part = parts(ingested)[-1]
    flip_bit(part, part.stat().st_size // 2)
    refused = segos("ingest", str(DEMO_TRACES), "--store", str(ingested), "--window", "w1", ok=False)
    assert f"trace part {part} is damaged" in refused.stderr and "Traceback" not in refused.stderr


def test_a_reader_panic_on_an_unhashed_file_becomes_the_named_error(tmp_path):
    """A file without a hash in its name (written before parts carried one) is read; whatever the reader
    raises, a polars panic (a BaseException) included, is one error naming the files."""
    import polars as pl

    from segos_pipeline.evolution.trace_parts import DamagedTraces, reading

    f = tmp_path / "old-part.parquet"

    def panic() -> None:
        raise pl.exceptions.PanicException("simulated reader panic")

    for fail in (panic, lambda: pl.read_parquet(f)):
        f.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
        with pytest.raises(DamagedTraces, match=r"old-part\.parquet"), reading([f], "w1"):
            fail()


def test_parts_hashed_elsewhere_are_checked_against_their_names():
    """The Spark engine hashes a window's files on its executors: a part whose digest there differs from
    the hash in its name is refused by name, a file without one is passed."""
    from segos_pipeline.evolution.trace_parts import DamagedTraces, check_digests

    good = "a" * 64
    named = f"traces/w1/parts/run-00001.{good[:32]}.parquet"
    check_digests({named: good, "traces/w1/traces.parquet": "b" * 64}, "w1")
    with pytest.raises(DamagedTraces, match=r"run-00001\.a{32}\.parquet is damaged"):
        check_digests({named: "c" * 64}, "w1")


# ------------------------------------------------------------------------------------------ manifests


def test_a_truncated_newest_manifest_is_reported_and_not_built_on_silently(ingested):
    segos("evolve", "--window", "w1", "--store", str(ingested), "--quiet")
    st = SnapshotStore(ingested)
    v1, v2 = (m["version"] for m in st.list_versions())
    manifest = ingested / "versions" / v2 / "manifest.json"
    manifest.chmod(0o644)
    manifest.write_bytes(manifest.read_bytes()[:200])

    listed = segos("versions", "--store", str(ingested))
    assert f"warning: {v2} is not listed: manifest.json unreadable" in listed.stderr
    one = segos("verify", "--store", str(ingested), ok=False)
    assert f"the newest version {v2}" in one.stderr and f"--from {v1}" in one.stderr
    every = segos("verify", "--all", "--store", str(ingested), ok=False)
    assert f"{v1}: ok" in every.stdout and f"{v2}: DAMAGED: manifest.json unreadable" in every.stdout
    named = segos("diff", v1, v2, "--store", str(ingested), ok=False)
    assert f"version {v2}" in named.stderr and "no such version" not in named.stderr

    refused = segos("evolve", "--window", "w1", "--store", str(ingested), "--quiet", ok=False)
    assert f"the newest version {v2}" in refused.stderr and "Traceback" not in refused.stderr
    assert len(st.list_versions()) == 1  # nothing built on v1 behind the user's back
    built = segos("evolve", "--window", "w1", "--from", v1, "--store", str(ingested), "--quiet")
    v3 = built.stdout.split()[-1]
    assert st.manifest(v3)["parent"] == v1

    # The server passes over it and serves a readable version.
    service = SegosService(ingested, reload="sync")
    assert service.version in (v1, v3) and service.search(QUERY)["results"]


@pytest.mark.parametrize(
    "shape",
    [
        lambda m: {**m, "files": ["edges.parquet"]},
        lambda m: {**m, "parts": {"nodes": 1}},
        lambda m: {**m, "seq": "seven"},
        lambda m: [m],
    ],
    ids=["files-list", "parts-dict", "seq-string", "not-an-object"],
)
def test_a_manifest_of_the_wrong_shape_is_a_damaged_version_not_a_traceback(store, shape):
    from ..conftest import commit_copy

    st = SnapshotStore(store)
    v1 = st.latest()
    v2 = commit_copy(st, serve=False)
    manifest = store / "versions" / v2 / "manifest.json"
    manifest.chmod(0o644)
    manifest.write_text(json.dumps(shape(json.loads(manifest.read_text()))))
    assert st.unreadable_versions().keys() == {v2}
    every = segos("verify", "--all", "--store", str(store), ok=False)
    assert f"{v2}: DAMAGED: manifest.json unreadable" in every.stdout and "Traceback" not in every.stderr
    assert SegosService(store, reload="sync").version == v1


def test_verify_checks_the_manifest_against_its_id_and_flags_unlisted_files(store):
    st = SnapshotStore(store)
    vid = st.latest()
    assert segos("verify", "--store", str(store)).stdout.strip() == f"{vid}: ok"
    folder = store / "versions" / vid
    stray = folder / "stray.parquet"
    stray.write_bytes(b"not listed")
    unlisted = segos("verify", "--store", str(store), ok=False)
    assert "stray.parquet not listed in it" in unlisted.stderr
    stray.unlink()

    # A manifest edited consistently (a file's hash and size changed with the file) still verifies
    # file by file, but no longer matches the id that was computed from its file table.
    manifest = folder / "manifest.json"
    m = json.loads(manifest.read_text())
    edges = folder / "edges.parquet"
    edges.chmod(0o644)
    edges.write_bytes(edges.read_bytes() + b"\0")
    from segos_pipeline.store.layout import sha256_file

    m["files"]["edges.parquet"] = {"sha256": sha256_file(edges), "bytes": edges.stat().st_size}
    manifest.chmod(0o644)
    manifest.write_text(json.dumps(m))
    assert st.verify(vid) == []
    edited = segos("verify", "--store", str(store), ok=False)
    assert f"its id {vid} does not match the hash of its file table" in edited.stderr


def test_segos_mcp_passes_over_a_newest_version_whose_manifest_is_truncated(store, caplog):
    from ..conftest import commit_copy

    st = SnapshotStore(store)
    v1 = st.latest()
    v2 = commit_copy(st)  # served
    manifest = store / "versions" / v2 / "manifest.json"
    manifest.chmod(0o644)
    manifest.write_bytes(manifest.read_bytes()[:150])
    with caplog.at_level("WARNING", logger="segos_pipeline.service.api"):
        assert SegosService(store, reload="sync").version == v1
    assert f"version {v2} is passed over" in caplog.text  # what `segos mcp` logs on stderr
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "segos_pipeline.cli", "mcp", "--store", str(store)],
        cwd=str(PROJECT_ROOT),
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(params) as client:
            status = await client.call_tool("get_status", {})
            found = await client.call_tool("search_skills", {"query": QUERY})
            assert not status.is_error and not found.is_error
            return json.loads(status.content[0].text), json.loads(found.content[0].text)  # type: ignore[union-attr]

    status, found = anyio.run(scenario)
    assert status["version"] == v1 and found["version"] == v1 and found["results"]
