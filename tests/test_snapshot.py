import json
import os
import stat

import pytest

from segos_pipeline import build_cold_start
from segos_pipeline.snapshot import MANIFEST, DamagedSnapshot, SnapshotStore, UnknownVersion

from .conftest import simple_library

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
        "nodes.parquet",
        "tokens.parquet",
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
    with pytest.raises(UnknownVersion, match=r"no such version.*segos versions"):
        store.load("v9999")
    with pytest.raises(UnknownVersion, match="has no versions yet"):
        SnapshotStore(tmp_path / "empty").load()


def test_files_are_read_only_and_damage_is_detected(store):
    vid = store.latest()
    path = store.versions_dir / vid / "edges.parquet"
    assert not os.stat(path).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    path.chmod(0o644)
    with path.open("r+b") as fh:
        fh.seek(10)
        fh.write(b"\x00\x01")
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
