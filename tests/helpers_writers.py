"""Shared by the concurrent-writer and kill tests: a demo store with traces, `segos` as a real process,
edits to a skill, and the checks that a store is sound."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from segos_pipeline import build_cold_start
from segos_pipeline.cli.main import main
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_TRACES
from segos_pipeline.store.layout import MANIFEST
from segos_pipeline.store.snapshot import SnapshotStore

EDITED = "data-wrangling/csv-loader"  # the skill the tests edit
WINDOWS = ("2026-11-27", "2026-11-28")  # the demo traces' windows
SEGOS = [sys.executable, "-m", "segos_pipeline.cli"]


def demo_store(tmp: Path) -> tuple[Path, Path]:
    """A copy of the demo library (free to edit) and a store with its cold start and the demo traces."""
    lib = tmp / "lib"
    shutil.copytree(DEFAULT_LIBRARY, lib)
    store = tmp / "store"
    build_cold_start(lib, store)
    TraceStore(store).ingest(iter_records(DEMO_TRACES, "native"))
    return lib, store


def edit_skill(lib: Path, marker: str) -> Path:
    """Append `marker` to the edited skill's body; returns the package folder."""
    pkg = lib / EDITED
    with (pkg / "SKILL.md").open("a", encoding="utf-8") as fh:
        fh.write(f"\n\nEdited: {marker}.\n")
    return pkg


def body_of(store: Path, version: str | None = None) -> str:
    nodes = SnapshotStore(store).load(version).nodes
    return nodes.filter(nodes["id"] == EDITED)["body"][0]


def start(*args: object, **kw: object) -> subprocess.Popen[str]:
    """`segos ARGS` as its own process (stdout and stderr captured)."""
    return subprocess.Popen(
        [*SEGOS, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,  # type: ignore[call-overload]
    )


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def hold_lock(store: Path, seconds: float, command: str = "test-holder --marker") -> subprocess.Popen[str]:
    """Another process holding the store's writer lock for `seconds`; returns once it holds it."""
    code = textwrap.dedent(
        """
        import sys, time
        from segos_pipeline.store.snapshot import SnapshotStore
        with SnapshotStore(sys.argv[1]).writer(sys.argv[3]):
            print("held", flush=True)
            time.sleep(float(sys.argv[2]))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(store), str(seconds), command], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def assert_sound(store: Path, earlier: list[str]) -> list[str]:
    """`segos verify --all` clean, every version folder is a listed, loadable version (no half version),
    the earlier versions are all still there, and sequence numbers are unique. Returns the version ids."""
    st = SnapshotStore(store)
    result = CliRunner().invoke(main, ["verify", "--all", "--store", str(store)])
    assert result.exit_code == 0, result.output
    listed = [m["version"] for m in st.list_versions()]
    folders = sorted(p.name for p in st.versions_dir.iterdir())
    assert folders == sorted(listed), "a folder in versions/ that is not a committed version"
    assert all((st.versions_dir / v / MANIFEST).is_file() for v in listed)
    assert set(earlier) <= set(listed)
    seqs = [m["seq"] for m in st.list_versions()]
    assert len(seqs) == len(set(seqs)), f"duplicate sequence numbers: {listed}"
    for v in listed:
        st.load(v)  # verifies every file's hash and reads every table
    return listed


def staging_left(store: Path) -> list[str]:
    staging = Path(store) / ".staging"
    return sorted(p.name for p in staging.iterdir()) if staging.is_dir() else []
