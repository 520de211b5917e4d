"""Writers of one store take turns: unique sequence numbers, no edit lost, a waiting or refused
writer says so, stale staging folders are swept, an ambiguous `vN` is an error. Real processes, real locks."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from segos_pipeline import build_cold_start
from segos_pipeline.graph.build import commit_derived
from segos_pipeline.store.layout import MANIFEST
from segos_pipeline.store.lock import stage_lock, sweep_stale_stages
from segos_pipeline.store.snapshot import SnapshotStore, StaleParent, StoreBusy, UnknownVersion

from ..conftest import simple_library
from ..helpers_writers import (
    WINDOWS,
    assert_sound,
    body_of,
    demo_store,
    edit_skill,
    finish,
    hold_lock,
    staging_left,
    start,
)


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, Path]:
    return demo_store(tmp_path)


def _versions(store: Path) -> list[dict]:
    return SnapshotStore(store).list_versions()


def _assert_chain(store: Path) -> None:
    """Every version after the first has the version just before it as parent, or none (a cold start):
    no two versions were built on one parent, so no version misses another's change."""
    ms = _versions(store)
    for prev, m in itertools.pairwise(ms):
        assert m["parent"] in (None, prev["version"]), f"{m['version']} is built on {m['parent']}, not {prev}"


# ------------------------------------------------------------------------------------------ the lock


def test_a_busy_store_refuses_naming_the_holder_and_a_rerun_succeeds(demo):
    lib, store = demo
    before = [m["version"] for m in _versions(store)]
    pkg = edit_skill(lib, "REFUSED-THEN-RERUN")
    holder = hold_lock(store, 120)
    try:
        code, out, err = finish(start("update", pkg, "--store", store, "--wait", "0.3"))
    finally:
        holder.kill()
        holder.wait()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: another writer is running on"), err
    assert all(line.startswith("segos: waiting for another writer") for line in lines[:-1]), err
    assert f"PID {holder.pid}" in err and "test-holder --marker" in err and " since " in err
    assert "--wait" in err and "Traceback" not in err
    assert [m["version"] for m in _versions(store)] == before  # nothing committed
    code, out, err = finish(start("update", pkg, "--store", store, "--wait", "0"))  # the kernel freed it
    assert code == 0, err
    assert "REFUSED-THEN-RERUN" in body_of(store)


def test_a_waiting_writer_says_so_on_stderr_then_commits(demo):
    lib, store = demo
    pkg = edit_skill(lib, "WAITED")
    holder = hold_lock(store, 120)
    proc = start("update", pkg, "--store", store, "--wait", "120")
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # blocks until the writer reports that it waits
    finally:
        holder.kill()  # the holder dies: the kernel releases its lock, the waiting writer goes on
        holder.wait()
    code, out, err = finish(proc)
    assert code == 0, first + err
    assert first.startswith("segos: waiting for another writer") and f"PID {holder.pid}" in first
    assert "test-holder --marker" in first and "up to 120 s" in first
    assert "got the writer lock" in err
    assert out.strip().splitlines()[-1] == _versions(store)[-1]["version"]
    assert "WAITED" in body_of(store)


def test_the_lock_is_reentrant_in_one_process_and_readers_never_wait(demo):
    _lib, store = demo
    st = SnapshotStore(store)
    holder = hold_lock(store, 120)
    try:
        t0 = time.monotonic()
        versions = st.list_versions()
        st.load()  # readers take no lock
        assert time.monotonic() - t0 < 30
        with pytest.raises(StoreBusy, match=f"PID {holder.pid}"), st.writer("second", timeout=0.2):
            pass
    finally:
        holder.kill()
        holder.wait()
    # a CLI command's lock, then its commit's
    with st.writer("outer", timeout=0), st.writer("inner", timeout=0):
        parent = st.load(versions[0]["version"])
        commit_derived(st, parent, parent.edges, kind="incremental")
    assert len(st.list_versions()) == len(versions) + 1


# ------------------------------------------------------------------------------------------ concurrency


def test_update_and_evolve_at_once_keep_the_edit(demo):
    lib, store = demo
    for trial, window in enumerate(WINDOWS):
        marker = f"UPDATE-WITH-EVOLVE-{trial}"
        pkg = edit_skill(lib, marker)
        before = len(_versions(store))
        procs = [
            start("update", pkg, "--store", store),
            start("evolve", "--store", store, "--window", window, "--quiet"),
        ]
        results = [finish(p) for p in procs]
        assert all(code == 0 for code, _, _ in results), results
        ms = _versions(store)
        assert len(ms) == before + 2
        assert marker in body_of(store), f"trial {trial}: the newest version lacks the skill edit"
        _assert_chain(store)
    assert_sound(store, [])


def test_build_and_evolve_at_once_take_turns(demo):
    lib, store = demo
    procs = [
        start("build", lib, "--store", store, "--quiet"),
        start("evolve", "--store", store, "--window", WINDOWS[0], "--quiet"),
    ]
    results = [finish(p) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    ms = _versions(store)
    assert len(ms) == 3 and [m["seq"] for m in ms] == [1, 2, 3]
    evolved = next(m for m in ms if m["kind"] == "evolved")
    # built on the version that was newest when it got its turn: v1, or the new cold start
    assert evolved["parent"] == ms[ms.index(evolved) - 1]["version"]
    assert_sound(store, [])


def test_two_evolves_at_once_chain(demo):
    _lib, store = demo
    procs = [start("evolve", "--store", store, "--window", w, "--quiet") for w in WINDOWS]
    results = [finish(p) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    ms = _versions(store)
    assert [m["kind"] for m in ms] == ["cold_start", "evolved", "evolved"]
    assert ms[2]["parent"] == ms[1]["version"] and ms[2]["round"] == 2
    assert_sound(store, [])


_COMMITTER = textwrap.dedent(
    """
    import json, sys, time
    from segos_pipeline.graph.build import commit_derived
    from segos_pipeline.store.snapshot import SnapshotError, SnapshotStore
    st = SnapshotStore(sys.argv[1], lock_timeout=120)
    parent = st.load(None if sys.argv[3] == "latest" else sys.argv[3])
    edges = parent.edges.head(parent.edges.height - int(sys.argv[4]))  # a distinct change per process
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all commit at the same moment
    try:
        m = commit_derived(st, parent, edges, kind="incremental")
        print(json.dumps({"ok": m["version"], "parent": m["parent"]}))
    except SnapshotError as exc:
        print(json.dumps({"refused": type(exc).__name__, "message": str(exc)}))
    """
)


def _simultaneous(store: Path, parent: str, n: int) -> list[dict]:
    at = time.time() + 6  # time for every process to import and load before the common moment
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _COMMITTER, str(store), str(at), parent, str(i + 1)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def test_simultaneous_commits_get_unique_sequence_numbers(demo):
    _lib, store = demo
    v1 = _versions(store)[0]["version"]
    results = _simultaneous(store, v1, 4)  # an explicit parent: each is meant to be a child of v1
    assert all("ok" in r for r in results), results
    seqs = [m["seq"] for m in _versions(store)]
    assert seqs == [1, 2, 3, 4, 5]
    assert_sound(store, [v1])


def test_simultaneous_commits_on_the_latest_never_lose_one(demo):
    _lib, store = demo
    results = _simultaneous(store, "latest", 3)
    ok = [r for r in results if "ok" in r]
    refused = [r for r in results if "refused" in r]
    assert ok and len(ok) + len(refused) == 3, results
    assert all(r["refused"] == "StaleParent" and "Rerun the command" in r["message"] for r in refused)
    _assert_chain(store)  # whoever committed built on the newest version: no sibling lost a change
    assert len({m["seq"] for m in _versions(store)}) == len(_versions(store))


def test_a_commit_on_a_parent_read_as_latest_refuses_once_another_landed(tmp_path):
    lib = simple_library(tmp_path / "lib", {"a": "Load csv files.", "b": "Plot csv charts."})
    root = tmp_path / "store"
    build_cold_start(lib, root)
    mine, other = SnapshotStore(root), SnapshotStore(root)
    parent = mine.load()  # read as the latest
    landed = commit_derived(other, other.load(), other.load().edges.head(1), kind="incremental")
    with pytest.raises(StaleParent, match=f"another writer committed {landed['version']}"):
        commit_derived(mine, parent, parent.edges, kind="incremental")
    assert [m["version"] for m in mine.list_versions()][-1] == landed["version"]
    again = mine.load()  # the rerun builds on the newest and commits
    assert commit_derived(mine, again, again.edges, kind="incremental")["parent"] == landed["version"]
    explicit = mine.load(parent.version)  # a parent asked for by id is the caller's choice
    assert commit_derived(mine, explicit, explicit.edges, kind="incremental")["parent"] == parent.version


# ------------------------------------------------------------------------------------------ staging


def test_dead_writers_staging_is_swept_and_a_live_writers_kept(tmp_path):
    lib = simple_library(tmp_path / "lib", {"a": "Load csv files.", "b": "Plot csv charts."})
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, st)
    dead = st.staging_dir / "0123456789abcdef0123456789abcdef"
    dead.mkdir()
    (dead / "nodes-00000.parquet").write_bytes(b"half")
    (st.staging_dir / "fedcba9876543210fedcba9876543210.lock").write_text("")  # its folder never made
    code = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from segos_pipeline.store.lock import stage_lock
        with stage_lock(Path(sys.argv[1]), "live0000live0000live0000live0000") as d:
            d.mkdir(); (d / "edges.parquet").write_bytes(b"being written")
            print("staged", flush=True); time.sleep(120)
        """
    )
    live = subprocess.Popen(
        [sys.executable, "-c", code, str(st.staging_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "staged"
        build_cold_start(lib, st)  # the next write sweeps
        left = staging_left(st.root)
        assert left == ["live0000live0000live0000live0000", "live0000live0000live0000live0000.lock"]
        assert (st.staging_dir / "live0000live0000live0000live0000" / "edges.parquet").is_file()
    finally:
        live.kill()
        live.wait()
    assert sweep_stale_stages(st.staging_dir) == ["live0000live0000live0000live0000"]  # its writer died
    assert staging_left(st.root) == []


def test_a_stage_lock_survives_a_sweep_between_open_and_lock(tmp_path):
    """A sweeper may lock a stage's lock file before its writer does (the folder does not exist yet),
    find nothing and unlink the file; the writer then locks a fresh file, so a later sweep never takes its
    folder for a dead writer's."""
    staging = tmp_path / ".staging"
    staging.mkdir()
    sweeper = (staging / "s1.lock").open("a+")
    fcntl.flock(sweeper.fileno(), fcntl.LOCK_EX)  # the sweeper got there first
    entered = threading.Event()
    release = threading.Event()

    def write_stage() -> None:
        with stage_lock(staging, "s1") as folder:
            folder.mkdir()
            entered.set()
            release.wait(30)

    writer = threading.Thread(target=write_stage)
    writer.start()
    time.sleep(0.2)
    assert not entered.is_set()  # the writer waits for the lock
    (staging / "s1.lock").unlink()  # the sweeper found no folder, removes the file and lets go
    sweeper.close()
    assert entered.wait(10)
    try:
        assert sweep_stale_stages(staging) == []  # the writer holds the file now at the path
        assert (staging / "s1").is_dir()
    finally:
        release.set()
        writer.join()
    shutil.rmtree(staging / "s1")
    assert staging_left(tmp_path) == []


# ------------------------------------------------------------------------------------------ old stores


def test_an_ambiguous_sequence_number_lists_both(tmp_path):
    lib = simple_library(tmp_path / "lib", {"a": "Load csv files.", "b": "Plot csv charts."})
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(lib, st)
    m2 = build_cold_start(lib, st)
    # a store written before writers were serialized: two versions with sequence number 2
    twin = st.versions_dir / "v0002-0badcafe"
    shutil.copytree(st.versions_dir / m2["version"], twin)
    os.chmod(twin / MANIFEST, 0o644)
    manifest = json.loads((twin / MANIFEST).read_text())
    (twin / MANIFEST).write_text(json.dumps({**manifest, "version": twin.name}))
    with pytest.raises(UnknownVersion, match=r"'v2' is ambiguous.*v0002-") as err:
        st.resolve("v2")
    assert m2["version"] in str(err.value) and "v0002-0badcafe" in str(err.value)
    assert st.resolve(m2["version"]) == m2["version"]  # the full id still works
    m3 = build_cold_start(lib, st)  # a new commit steps past both
    assert m3["seq"] == 3
    assert pl.Series([m["seq"] for m in st.list_versions()]).to_list() == [1, 2, 2, 3]


def test_a_store_passes_between_processes(tmp_path):
    """Dagster hands stores to other processes: the per-thread read record is not part of a store."""
    import pickle

    st = SnapshotStore(tmp_path / "store", lock_timeout=7)
    copy = pickle.loads(pickle.dumps(st))
    assert copy.root == st.root and copy.lock_timeout == 7
    with copy.writer("copied", timeout=0):
        pass
