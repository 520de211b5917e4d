"""`segos repair` makes a damaged cold-start file again from the library.

A store holds a cold start and an evolved version (`--no-l3`: the round leaves the library alone) that
hard-links the cold start's node part. One flipped bit in that part damages both versions; `segos repair`
rebuilds the cold start into the store's staging folder and puts the rebuilt file back, in both versions,
only because its sha256 is the manifest's. A library changed since makes other bytes: repair refuses with
the hash mismatch and changes nothing. A file only an evolution round makes is named, never touched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY

from ..conftest import run_segos

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_TRACES = PROJECT_ROOT / "segos_pipeline" / "demo" / "traces"
QUERY = "load the sales csv, clean missing values and chart revenue by month"


segos = run_segos


def flip_bit(path: Path, offset: int, bit: int = 4) -> None:
    """A silent single-bit flip in place (the inode kept: every hard link of it sees the damage)."""
    path.chmod(0o644)
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ (1 << bit)]))
    path.chmod(0o444)


def snapshot_of(store: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of every version: bytes and inode (what repair must not change when it refuses)."""
    return {
        str(f.relative_to(store)): (f.read_bytes(), f.stat().st_ino)
        for f in sorted((store / "versions").rglob("*"))
        if f.is_file()
    }


@pytest.fixture
def library(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEFAULT_LIBRARY, tmp_path / "library"))


@pytest.fixture
def store(tmp_path: Path, library: Path) -> Path:
    """A cold start and an evolved version that shares its node part (same inode)."""
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(library, st)
    segos("ingest", str(DEMO_TRACES), "--store", str(st.root), "--window", "w1", "--quiet")
    segos("evolve", "--window", "w1", "--store", str(st.root), "--no-l3", "--quiet")
    return st.root


def versions(store: Path) -> list[Path]:
    return sorted((store / "versions").iterdir())


def bundle(store: Path) -> dict[str, Any]:
    return json.loads(segos("retrieve", QUERY, "--store", str(store), "--json").stdout)


def test_a_flipped_bit_in_a_shared_cold_start_part_is_repaired_in_every_version(store):
    cold, evolved = versions(store)
    part = cold / "nodes-00000.parquet"
    assert part.stat().st_ino == (evolved / part.name).stat().st_ino  # shared, as the issue found
    before = bundle(store)
    intact = part.read_bytes()
    others = {k: v for k, v in snapshot_of(store).items() if not k.endswith(part.name)}

    flip_bit(part, len(intact) // 2)
    verified = segos("verify", "--all", "--store", str(store), ok=False)
    assert f"{cold.name}: DAMAGED" in verified.stdout and f"{evolved.name}: DAMAGED" in verified.stdout
    assert "segos repair --all" in verified.stderr  # the way out is named

    repaired = segos("repair", "--all", "--store", str(store), "--quiet")
    assert f"{cold.name}: repaired {part.name}" in repaired.stdout
    assert f"{evolved.name}: repaired {part.name}" in repaired.stdout
    assert "every version checked verifies" in repaired.stdout

    assert "DAMAGED" not in segos("verify", "--all", "--store", str(store)).stdout
    assert part.read_bytes() == intact
    assert part.stat().st_ino == (evolved / part.name).stat().st_ino  # shared again: one file, not two
    assert not part.stat().st_mode & 0o222  # read-only, as every snapshot file
    # no file that verified was touched (same bytes, same inode), and nothing is left in staging
    assert {k: v for k, v in snapshot_of(store).items() if not k.endswith(part.name)} == others
    assert not [p for p in (store / ".staging").iterdir()]
    assert bundle(store) == before


def test_a_server_with_nothing_to_serve_serves_again_after_the_repair(store):
    """Both versions list the damaged part: no version loads, and a service cannot start; the repaired
    file is the one the manifests record, so both serve again, unchanged."""
    from segos_pipeline.service.api import SegosService
    from segos_pipeline.store.snapshot import SnapshotError

    before = SegosService(store, reload="sync").search(QUERY)
    cold, _evolved = versions(store)
    flip_bit(cold / "nodes-00000.parquet", 500)
    with pytest.raises(SnapshotError, match="no version"):
        SegosService(store, reload="sync")
    segos("repair", "--store", str(store), "--quiet")
    assert SegosService(store, reload="sync").search(QUERY) == before


def test_repair_of_one_version_also_repairs_the_other_names_of_its_file(store):
    cold, evolved = versions(store)
    part = cold / "tokens-00000.parquet"
    flip_bit(part, 100)
    out = json.loads(segos("repair", "--store", str(store), "--json", "--quiet").stdout)  # the newest
    assert out["repaired"] == 2 and out["left"] == 0
    assert {(v["version"], tuple(v["repaired"])) for v in out["versions"]} == {
        (evolved.name, (part.name,)),
        (cold.name, (part.name,)),
    }
    assert out["rebuilt"][0]["from"] == cold.name and out["rebuilt"][0]["library_unchanged"] is True
    segos("verify", "--all", "--store", str(store))


def test_a_library_changed_since_is_refused_with_the_hash_mismatch_and_nothing_changes(store, library):
    cold, _evolved = versions(store)
    part = cold / "nodes-00000.parquet"
    flip_bit(part, 200)
    skill = next(library.rglob("SKILL.md"))
    skill.write_text(skill.read_text() + "\nOne more line written after the cold start.\n")
    damaged = snapshot_of(store)

    refused = segos("repair", "--all", "--store", str(store), "--quiet", ok=False)
    assert f"NOT REPAIRED {part.name}: hash mismatch" in refused.stdout
    assert "changed since" in refused.stdout
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: ")
    assert snapshot_of(store) == damaged  # the damaged file left as it was, nothing else touched
    assert not [p for p in (store / ".staging").iterdir()]


def test_a_moved_library_is_named_and_found_with_library(store, library, tmp_path):
    cold, _ = versions(store)
    flip_bit(cold / "signature.npz", 300)
    moved = library.rename(tmp_path / "moved")
    refused = segos("repair", "--all", "--store", str(store), "--quiet", ok=False)
    assert "not found" in refused.stdout and "--library" in refused.stdout
    segos("repair", "--all", "--store", str(store), "--library", str(moved), "--quiet")
    segos("verify", "--all", "--store", str(store))


def test_a_file_only_an_evolution_round_makes_is_named_and_left_alone(store):
    _cold, evolved = versions(store)
    edges = evolved / "edges.parquet"  # the round's own edges: no cold start makes them
    flip_bit(edges, 50)
    damaged = snapshot_of(store)
    refused = segos("repair", "--all", "--store", str(store), "--quiet", ok=False)
    named = f"{evolved.name}: NOT REPAIRED edges.parquet: no cold-start build makes this file"
    assert named in refused.stdout
    assert "restore" in refused.stdout
    assert snapshot_of(store) == damaged


def test_an_intact_store_is_not_touched(store):
    intact = snapshot_of(store)
    out = segos("repair", "--all", "--store", str(store), "--quiet")
    assert "nothing to repair" in out.stdout
    assert snapshot_of(store) == intact
