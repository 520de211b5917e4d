"""Trace parts, cache entries and repaired version files are flushed to disk before the
rename that publishes them.

A rename can reach the disk before the bytes of the file it names: after a power cut the name would then
hold an empty or partial file. Each test records, in order, every `os.fsync` (by the inode of the
descriptor) and every `os.replace` / `os.rename` (by the inode renamed) while real code writes real files,
and checks that each published file was flushed before its rename and its folder after. Removing either
flush from the writer makes the test fail.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR
from segos_pipeline.retrieval import semantic as semantic_mod
from segos_pipeline.retrieval.ranker import warm_caches

Inode = tuple[int, int]


class Calls:
    """`os.fsync`, `os.replace` and `os.rename` calls of this process, in order: ("fsync", inode) and
    ("rename", inode of the source, destination)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.events: list[tuple[Any, ...]] = []
        real_fsync = os.fsync

        def fsync(fd: Any) -> None:
            fd = fd if isinstance(fd, int) else fd.fileno()
            self.events.append(("fsync", _inode(os.fstat(fd))))
            real_fsync(fd)

        def recorded(real: Any) -> Any:
            def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
                st = os.stat(src, follow_symlinks=False)
                self.events.append(("rename", _inode(st), Path(os.fspath(dst))))
                real(src, dst, *args, **kwargs)

            return move

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", recorded(os.replace))
        monkeypatch.setattr(os, "rename", recorded(os.rename))

    def renames_into(self, folder_of: Any) -> list[tuple[int, Inode, Path]]:
        """(position, inode, destination) of each rename whose destination `folder_of` accepts."""
        return [(i, e[1], e[2]) for i, e in enumerate(self.events) if e[0] == "rename" and folder_of(e[2])]

    def flushed(self, inode: Inode, before: int | None = None, after: int | None = None) -> bool:
        lo, hi = (after + 1 if after is not None else 0), (before if before is not None else len(self.events))
        return any(e == ("fsync", inode) for e in self.events[lo:hi])


def _inode(st: os.stat_result) -> Inode:
    return st.st_dev, st.st_ino


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, st)
    return st


def test_a_trace_part_is_flushed_before_its_rename_and_its_folder_after(store, monkeypatch):
    calls = Calls(monkeypatch)
    report = TraceStore(store).ingest(iter_records(DEMO_DIR / "traces", "native"))
    assert report.accepted > 0
    parts = calls.renames_into(lambda dst: dst.parent.name == "parts" and dst.suffix == ".parquet")
    assert parts, "ingest renamed no part into place"
    for at, inode, dst in parts:
        assert _inode(dst.stat()) == inode  # the file renamed is the one in place
        assert calls.flushed(inode, before=at), (
            f"{dst.name} was renamed into place before its bytes were flushed"
        )
        assert calls.flushed(_inode(dst.parent.stat()), after=at), (
            f"{dst.parent} not flushed after the rename"
        )


def test_a_cache_entry_is_flushed_before_its_rename_and_its_folder_after(store, monkeypatch):
    semantic_mod._RECENT.clear()  # vectors another test of this process computed would not be written
    calls = Calls(monkeypatch)
    warm_caches(store.load())  # writes the lexical index and the skill vectors
    cache = store.root / "cache"
    entries = calls.renames_into(lambda dst: dst.parent.parent == cache and not dst.name.startswith("."))
    assert {dst.parent.name for _, _, dst in entries} >= {"lexical", "semantic"}
    for at, inode, dst in entries:
        assert _inode(dst.stat()) == inode
        files = [f for f in dst.iterdir() if f.is_file()]
        assert len(files) >= 2  # the data and its hashes.json
        for f in files:
            assert calls.flushed(_inode(f.stat()), before=at), (
                f"{f} was renamed into place before being flushed"
            )
        assert calls.flushed(inode, before=at), f"{dst}: the staged folder's entries were not flushed"
        assert calls.flushed(_inode(dst.parent.stat()), after=at), (
            f"{dst.parent} not flushed after the rename"
        )


def test_a_repaired_version_file_is_flushed_before_its_rename_and_its_folder_after(store, monkeypatch):
    from segos_pipeline.graph.repair import repair

    vid = store.latest()
    part = store.versions_dir / vid / "nodes-00000.parquet"
    part.chmod(0o644)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x10
    part.write_bytes(bytes(data))
    calls = Calls(monkeypatch)
    assert [o.repaired for o in repair(store, [vid]).outcomes] == [True]
    [(at, inode, _)] = calls.renames_into(lambda dst: dst == part)
    assert _inode(part.stat()) == inode and not store.verify(vid)
    assert calls.flushed(inode, before=at), "the repaired file was renamed into place before being flushed"
    assert calls.flushed(_inode(part.parent.stat()), after=at), "the version folder not flushed after"
