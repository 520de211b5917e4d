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

from ..conftest import ROOT, copy_checkout, readme_bash_blocks, run_bash


def _snapshot(folder: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # build from a copy of the tracked files, so the checkout gets no build/ or egg-info folders
    src = copy_checkout(out / "src")
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
    assert on_disk and shipped == on_disk  # every file: scripts/, files without extensions
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


def _readme_block(marker: str) -> str:
    found = [b for b in readme_bash_blocks() if marker in b]
    assert len(found) == 1, f"the README has no single bash block with {marker!r}"
    return found[0]


@pytest.mark.slow
def test_core_install_runs_the_readme_install_block(tmp_path: Path):
    """The README's 'Installing the package alone' block, as written, in a fresh venv with no extras: the
    packaged demo builds and answers from another directory, Dagster and the eval extra are absent, and
    nothing is written into site-packages."""
    copy_checkout(tmp_path / "segos")  # the block installs `./segos`: a clone next to the working directory
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    script = _readme_block("pip install ./segos").replace("/some/work/folder", str(work))
    env = {k: v for k, v in os.environ.items() if k not in ("SEGOS_STORE", "SEGOS_LANDING", "PYTHONPATH")}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", VIRTUAL_ENV=str(venv), PYTHONDONTWRITEBYTECODE="1")
    proc = run_bash(script, tmp_path, env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "csv" in proc.stdout.lower()  # the bundle for "parse a csv file and plot a chart"
    assert (work / "data" / "store" / "versions").is_dir()
    py = str(venv / "bin" / "python")
    for module in ("dagster", "bm25s", "matplotlib", "pyspark"):
        probe = subprocess.run([py, "-c", f"import {module}"], capture_output=True, env=env)
        assert probe.returncode != 0, f"{module} is in the core install"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (record,) = site.glob("segos-*.dist-info/RECORD")
    installed = {line.split(",", 1)[0] for line in record.read_text().splitlines()}
    on_disk = {p.relative_to(site).as_posix() for p in (site / "segos_pipeline").rglob("*") if p.is_file()}
    assert on_disk <= installed, sorted(on_disk - installed)[:5]  # nothing written into site-packages
    assert not (site / "data").exists()
    # `segos eval` in the core install names the extra to install instead of failing on an import
    ev = subprocess.run(
        [str(venv / "bin" / "segos"), "eval", "--queries", "q.jsonl"], cwd=work, env=env, capture_output=True
    )
    assert ev.returncode == 2 and b"pip install 'segos[eval]'" in ev.stderr, ev.stderr[-500:]
