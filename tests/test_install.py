"""Packaging: the wheel carries the demo data and no `assets` package, and the unpacked wheel builds and
retrieves from any directory with its defaults, writing only under the working directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(folder: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # build from a copy of the tracked files, so the checkout gets no build/ or egg-info folders
    src = out / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("segos-*.whl")
    return whl


def test_wheel_ships_the_demo_data_and_no_assets_package(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    demo = ROOT / "segos_pipeline" / "demo"
    shipped = {n.removeprefix("segos_pipeline/demo/") for n in names if n.startswith("segos_pipeline/demo/")}
    on_disk = {p.relative_to(demo).as_posix() for p in demo.rglob("*") if p.is_file()}
    assert on_disk and shipped == on_disk  # every file: `_malformed/`, scripts/, files without extensions
    skills = [n for n in names if n.startswith("segos_pipeline/demo/library/") and n.endswith("/SKILL.md")]
    assert len(skills) == sum(1 for _ in (demo / "library").rglob("SKILL.md"))
    tops = {n.split("/", 1)[0] for n in names}
    assert "assets" not in tops
    assert {x for x in tops if not x.endswith(".dist-info")} == {"segos_pipeline"}


def test_unpacked_wheel_builds_and_retrieves_from_any_directory(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    package = site / "segos_pipeline"
    before = _snapshot(package)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SEGOS_STORE", "SEGOS_LANDING", "PYTHONPATH")}
    # the unpacked wheel only: the checkout (not the cwd, not on PYTHONPATH) cannot shadow it
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")

    def segos(*args: str) -> str:
        code = (
            "import sys, segos_pipeline; from segos_pipeline.cli import main; "
            "print('FILE', segos_pipeline.__file__, file=sys.stderr); main()"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        loaded = Path(proc.stderr.split("FILE ", 1)[1].split("\n", 1)[0])
        assert loaded.resolve().is_relative_to(package.resolve()), loaded
        return proc.stdout

    segos("build", "--quiet")
    bundle = json.loads(segos("retrieve", "parse a csv file and plot a chart", "--json"))
    assert bundle["skills"]
    assert (cwd / "data" / "store" / "versions").is_dir()  # the default store: ./data/store
    assert _snapshot(package) == before  # nothing written inside the installed package
