import json
import os
import stat

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from segos_pipeline import build_cold_start
from segos_pipeline.graph.build import commit_derived
from segos_pipeline.graph.edges import EDGE_SCHEMA
from segos_pipeline.store import parts as parts_mod
from segos_pipeline.store import staging as staging_mod
from segos_pipeline.store.layout import MANIFEST
from segos_pipeline.store.snapshot import DamagedSnapshot, SnapshotStore, UnknownVersion
from segos_pipeline.text.lexicon import TOKEN_SCHEMA
from segos_pipeline.text.token_rows import token_table

from ..conftest import damage, simple_library, write_format1
from ..string_tokens import string_signature

SKILLS = {
    "csv-loader": "Load CSV files into a dataframe.",
    "csv-cleaner": "Clean a dataframe loaded from CSV files.",
    "chart-plotter": "Plot charts from a dataframe.",
}


@pytest.fixture
def store(tmp_path):
    lib = simple_library(tmp_path / "lib", SKILLS)
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, st)
    build_cold_start(lib, st)
    return st


def test_versions_listed_in_order_with_manifest(store):
    versions = store.list_versions()
    assert [m["seq"] for m in versions] == [1, 2]
    m = versions[0]
    assert m["kind"] == "cold_start" and m["parent"] is None and m["round"] == 0
    assert set(m["files"]) >= {
        "nodes-00000.parquet",
        "tokens-00000.parquet",
        "signature.npz",
        "vocab.parquet",
        "edges.parquet",
        "transition.npz",
        "report.parquet",
    }
    assert m["counts"]["skills"] == 3 and len(m["library"]["fingerprint"]) == 64
    assert versions[0]["library"]["fingerprint"] == versions[1]["library"]["fingerprint"]


def test_resolve_by_id_prefix_seq_and_latest(store):
    v1, v2 = (m["version"] for m in store.list_versions())
    assert store.resolve(None) == store.resolve("latest") == v2
    assert store.resolve(v1) == v1 and store.resolve("v0001") == v1 and store.resolve("1") == v1
    assert store.load(v1).version == v1


def test_unknown_version_is_a_clear_error(store, tmp_path):
    with pytest.raises(UnknownVersion, match=r"no such version.*segos versions") as unknown:
        store.load("v9999")
    assert f"`segos versions --store {store.address}`" in str(unknown.value)  # the store, not "..."
    with pytest.raises(UnknownVersion, match="has no versions yet"):
        SnapshotStore(tmp_path / "empty").load()


def test_files_are_read_only_and_damage_is_detected(store):
    vid = store.latest()
    path = store.versions_dir / vid / "edges.parquet"
    assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    damage(path, 10, b"\x00\x01")
    assert store.verify(vid) == ["edges.parquet"]
    with pytest.raises(DamagedSnapshot, match=r"damaged.*edges\.parquet"):
        store.load(vid)


def test_uncommitted_and_stray_folders_are_invisible(store):
    n = len(store.list_versions())
    (store.staging_dir / "half-written").mkdir(parents=True)
    (store.versions_dir / "v0099-deadbeef").mkdir()  # files but no manifest: never committed
    (store.versions_dir / "v0099-deadbeef" / "nodes.parquet").write_bytes(b"x")
    (store.versions_dir / "notes").mkdir()
    assert len(store.list_versions()) == n
    assert store.latest() != "v0099-deadbeef"


def test_manifest_is_written_last_and_ids_never_reused(store, tmp_path):
    before = {m["version"] for m in store.list_versions()}
    lib = simple_library(tmp_path / "lib2", {"other": "Other skill text."})
    m = build_cold_start(lib, store)
    assert m["version"] not in before and m["seq"] == 3
    on_disk = json.loads((store.versions_dir / m["version"] / MANIFEST).read_text())
    assert on_disk == m
    assert not any(store.staging_dir.iterdir())  # staging cleaned after commit


# ------------------------------------------------------------------------------------------ parts (format 2)


def _inode(store: SnapshotStore, version: str, name: str) -> int:
    return os.stat(store.versions_dir / version / name).st_ino


@pytest.fixture
def parted(tmp_path, monkeypatch):
    """A 7-skill cold start stored in parts of at most 2 skills."""
    monkeypatch.setattr(parts_mod, "PART_ROWS", 2)
    skills = {f"skill-{i}": f"Skill {i} loads csv tables of kind {i % 3}." for i in range(7)}
    st = SnapshotStore(tmp_path / "store")
    manifest = build_cold_start(simple_library(tmp_path / "lib", skills), st)
    return st, manifest


def test_parts_load_back_as_whole_tables(parted):
    st, m = parted
    assert m["format"] == 2 and len(m["parts"]) == 4
    assert [p["rows"] for p in m["parts"]] and max(p["rows"] for p in m["parts"]) <= 2
    assert sum(p["rows"] for p in m["parts"]) == 7
    snap = st.load()
    assert snap.nodes["id"].is_sorted() and m["parts"][0]["first"] == snap.nodes["id"][0]
    assert snap.tokens.equals(token_table(snap.nodes))  # node indices are global again after loading
    expected = string_signature(snap.tokens, snap.nodes.height)
    stored = snap.signature()
    assert stored.vocab.equals(expected.vocab) and (stored.matrix != expected.matrix).nnz == 0


def test_a_part_is_stored_as_the_bytes_of_its_rows_alone(tmp_path, monkeypatch):
    # A part is a slice of the whole table. Sliced from a table of 50k rows assembled from chunks (as the
    # parse assembles a node table), its list columns used to carry every row's items, and polars stored
    # them in other bytes (no dictionary pages) than the same rows on their own.
    monkeypatch.setattr(parts_mod, "PART_ROWS", 5_000)

    def chunk(a: int, b: int) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "id": [f"s{i:06d}" for i in range(a, b)],
                "tags": [[f"tag-{i % 50}", "common"] for i in range(a, b)],
                "own": [[f"word-{i}"] if i % 7 else ([] if i % 2 else None) for i in range(a, b)],
            }
        )

    n = 50_000
    nodes = pl.concat([chunk(a, a + 2_000) for a in range(0, n, 2_000)]).rechunk()
    tokens = pl.DataFrame({"node": [0], "field": ["name"], "token": ["s"], "tf": [1]}, schema=TOKEN_SCHEMA)
    st = SnapshotStore(tmp_path / "store")
    m = st.write(
        nodes=nodes,
        tokens=tokens,
        edges=pl.DataFrame(schema=EDGE_SCHEMA),
        transition=sp.csr_matrix((n, n), dtype=np.float32),
        manifest={"kind": "test"},
    )
    folder = st.versions_dir / m["version"]
    assert len(m["parts"]) == 10
    ends = np.cumsum([record["rows"] for record in m["parts"]])
    for i in range(0, len(m["parts"]), 3):
        record, start, end = m["parts"][i], int(ends[i] - m["parts"][i]["rows"]), int(ends[i])
        stored = folder / record["nodes"]
        alone = pl.read_parquet(stored)  # the part's rows, in a table of their own
        assert alone.equals(nodes[start:end])  # the same rows: empty and null lists kept apart
        again = tmp_path / "again.parquet"
        alone.write_parquet(again, **staging_mod.PART_PARQUET)
        assert again.read_bytes() == stored.read_bytes(), record["nodes"]


def test_unchanged_parts_are_linked_with_the_parents_hashes(parted):
    st, m1 = parted
    parent = st.load()
    m2 = commit_derived(st, parent, parent.edges, kind="evolved")
    shared = [p[table] for p in m1["parts"] for table in ("nodes", "tokens")]
    for name in [*shared, "signature.npz", "vocab.parquet"]:
        assert _inode(st, m1["version"], name) == _inode(st, m2["version"], name)
        assert m2["files"][name] == m1["files"][name]

    # one skill's description changes: only its part (and the signature) is written again
    target = parent.nodes["id"][3]
    nodes = parent.nodes.with_columns(
        description=pl.when(pl.col("id") == target)
        .then(pl.lit("Skill 3 renders pdf reports."))
        .otherwise(pl.col("description"))
    )
    m3 = commit_derived(st, parent, parent.edges, kind="evolved", nodes=nodes, tokens=token_table(nodes))
    rewritten = [
        name
        for name in m3["files"]
        if name.startswith(("nodes-", "tokens-"))
        and _inode(st, m3["version"], name) != _inode(st, m1["version"], name)
    ]
    assert rewritten == ["nodes-00001.parquet", "tokens-00001.parquet"]
    assert _inode(st, m3["version"], "signature.npz") != _inode(st, m1["version"], "signature.npz")
    child = st.load(m3["version"])
    assert child.nodes.equals(nodes) and child.tokens.equals(token_table(nodes))
    assert "pdf" in child.signature().vocab.to_list()


def test_damage_to_a_shared_part_fails_every_version_that_links_it(parted):
    st, m1 = parted
    parent = st.load()
    m2 = commit_derived(st, parent, parent.edges, kind="evolved")
    path = st.versions_dir / m1["version"] / "nodes-00000.parquet"
    damage(path, 10, b"\x00\x01")
    for vid in (m1["version"], m2["version"]):
        assert st.verify(vid) == ["nodes-00000.parquet"]
        with pytest.raises(DamagedSnapshot):
            st.load(vid)


def test_format_1_versions_still_load(parted):
    st, _m = parted
    snap = st.load()
    vid = write_format1(st, snap)
    old = st.load(vid)
    assert old.nodes.equals(snap.nodes) and old.tokens.equals(snap.tokens) and old.edges.equals(snap.edges)
    assert (old.signature().matrix != snap.signature().matrix).nnz == 0  # derived from the tokens
    assert old.content_key("tokens") == old.manifest["files"]["tokens.parquet"]["sha256"]
    # a child of a format-1 version is written in parts
    m = commit_derived(st, old, old.edges, kind="evolved")
    assert m["format"] == 2 and len(m["parts"]) == 4
    assert st.load(m["version"]).tokens.equals(snap.tokens)


def test_a_filesystem_without_hard_links_gets_copies(parted, monkeypatch):
    st, m1 = parted
    parent = st.load()

    def no_links(*_args, **_kwargs):
        raise OSError("hard links not supported here")

    monkeypatch.setattr(os, "link", no_links)  # durable.link_or_copy, which the stage calls
    m2 = commit_derived(st, parent, parent.edges, kind="evolved")
    name = m1["parts"][0]["nodes"]
    assert _inode(st, m1["version"], name) != _inode(st, m2["version"], name)  # a copy, not a link
    assert m2["files"][name] == m1["files"][name] and st.verify(m2["version"]) == []
    assert st.load(m2["version"]).nodes.equals(parent.nodes)
