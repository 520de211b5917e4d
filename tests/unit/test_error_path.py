"""One error path for the CLI: operating-system errors (disk full, read-only store, permissions),
polars' errors and adapter errors are one stderr line naming the file and what to do, exit 2, and leave
no half version behind (`segos verify --all` stays clean)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from segos_pipeline.cli.main import main
from segos_pipeline.store.snapshot import SnapshotStore

from ..helpers_writers import assert_sound, demo_store, edit_skill, staging_left


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, Path]:
    return demo_store(tmp_path)


def _run(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback would have reached the user
    return result.exit_code, result.stdout, result.stderr


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def _inside(path: object, root: Path) -> bool:
    return str(Path(os.fsdecode(path)).resolve()).startswith(str(root.resolve()))


def test_disk_full_at_fsync_is_one_line_and_commits_nothing(demo, monkeypatch):
    lib, store = demo
    before = [m["version"] for m in SnapshotStore(store).list_versions()]
    pkg = edit_skill(lib, "NO-SPACE")
    real_fsync = os.fsync

    def full(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if ".staging" in path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)  # the disk fills while the version's files are flushed
    code, _out, err = _run("update", pkg, "--store", store)
    monkeypatch.undo()
    line = _one_error_line(err)
    assert code == 2
    assert "No space left on device (ENOSPC)" in line and ".staging" in line and ".parquet" in line
    assert "free space" in line and "Nothing was committed" in line
    assert assert_sound(store, before) == before  # no half version listed
    assert staging_left(store) == []
    assert _run("update", pkg, "--store", store)[0] == 0  # with space again, the same command works


def test_disk_full_inside_polars_names_the_file(demo, monkeypatch):
    lib, store = demo
    before = [m["version"] for m in SnapshotStore(store).list_versions()]
    real_write = pl.DataFrame.write_parquet

    def full(self: pl.DataFrame, file: object, *args: object, **kwargs: object) -> None:
        if "edges.parquet" in str(file):  # polars reports the OS error inside its own exception
            raise pl.exceptions.ComputeError(
                "parquet: File out of specification: underlying IO error: "
                "No space left on device (os error 28)"
            )
        real_write(self, file, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    code, _out, err = _run("build", lib, "--store", store, "--quiet")
    monkeypatch.undo()
    line = _one_error_line(err)
    assert code == 2 and "No space left on device (ENOSPC)" in line and "edges.parquet" in line
    assert assert_sound(store, before) == before and staging_left(store) == []


def test_a_read_only_store_is_one_line(demo, monkeypatch):
    lib, store = demo
    before = [m["version"] for m in SnapshotStore(store).list_versions()]
    pkg = edit_skill(lib, "READ-ONLY")
    if os.geteuid() == 0:
        # root writes through chmod, and mounting a read-only filesystem needs privileges a test has
        # not: the filesystem's refusal is injected at the call that makes the version's folder
        real_mkdir = os.mkdir

        def read_only(path: object, *args: object, **kwargs: object) -> None:
            if _inside(path, store):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
            real_mkdir(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "mkdir", read_only)
        expect = "Read-only file system (EROFS)"
    else:
        for folder in (store, store / ".staging", store / "versions"):
            folder.chmod(0o555)
        expect = "Permission denied (EACCES)"
    try:
        code, _out, err = _run("update", pkg, "--store", store)
    finally:
        monkeypatch.undo()
        for folder in (store, store / ".staging", store / "versions"):
            folder.chmod(0o755)
    line = _one_error_line(err)
    assert code == 2 and expect in line and str(store) in line, line
    assert assert_sound(store, before) == before and staging_left(store) == []


def test_a_garbled_version_file_read_by_polars_is_named(demo):
    lib, store = demo
    st = SnapshotStore(store)
    part = st.versions_dir / st.latest() / "nodes-00000.parquet"
    part.chmod(0o644)
    part.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")  # a polars error when read unverified (ingest)
    code, _out, err = _run("ingest", lib.parent / "none.jsonl", "--store", store)
    assert code == 2 and "trace source not found" in _one_error_line(err)
    traces = lib.parent / "t.jsonl"
    traces.write_text('{"trace_id": "t1", "task_id": "x", "agent": "a", "queries": []}\n')
    code, _out, err = _run("ingest", traces, "--store", store, "--window", "w1")
    line = _one_error_line(err)
    assert code == 2 and "cannot read" in line and "nodes-00000.parquet" in line and "segos verify" in line


def test_a_missing_store_file_is_one_line(tmp_path):
    code, _out, err = _run("retrieve", "csv", "--store", tmp_path / "nowhere")
    line = _one_error_line(err)
    assert code == 2 and "no such folder" in line and str(tmp_path / "nowhere") in line
    # a mistyped store is an error for the listing commands too, not an empty store
    code, out, err = _run("versions", "--store", tmp_path / "nowhere")
    assert code == 2 and "no such folder" in _one_error_line(err) and not out
    # an existing empty folder is an empty store
    (tmp_path / "empty").mkdir()
    code, _out, err = _run("retrieve", "csv", "--store", tmp_path / "empty")
    assert code == 2 and "no versions yet" in _one_error_line(err)


def test_an_adapter_error_is_one_line(tmp_path):
    code, _out, err = _run(
        "generate-library", tmp_path / "no-such-dump", tmp_path / "out", "--format", "toolbench"
    )
    line = _one_error_line(err)
    assert code == 2 and "no-such-dump" in line, line
    assert not (tmp_path / "out").exists()  # nothing half-written
