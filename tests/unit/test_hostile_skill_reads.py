"""SKILL.md is read only from inside the library: the file the parse checks is the file
it reads. A SKILL.md or a package folder swapped for a link after the walk listed it fails to open or is
refused on the open descriptor, never read; links inside the root are still followed (documented)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import polars as pl

from segos_pipeline.graph.discovery import listed_packages
from segos_pipeline.graph.parsing import parse_library, parse_package

from ..conftest import write_skill

OUTSIDE_TEXT = "---\nname: stolen\ndescription: OUTSIDE-SECRET text from outside the library\n---\n"


def _outside_library(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text(OUTSIDE_TEXT)
    root = tmp_path / "lib"
    for name in ("alpha", "beta"):
        write_skill(root, name, f"name: {name}\ndescription: The {name} skill.", f"# {name}\n")
    return root, outside


def test_a_skill_md_swapped_for_an_outside_link_after_listing_is_never_read(tmp_path: Path):
    root, outside = _outside_library(tmp_path)
    listed = dict(listed_packages(str(root)))  # the walk saw a regular SKILL.md
    skill = root / "alpha" / "SKILL.md"
    skill.unlink()
    skill.symlink_to(outside / "SKILL.md")  # swapped between the listing and the read
    node, problems = parse_package(str(root / "alpha"), str(root), listed=listed[str(root / "alpha")])
    assert node is None and [p.code for p in problems] == ["not_regular_file"]
    assert "symlink" in problems[0].problem


def test_a_package_folder_swapped_for_an_outside_link_is_never_read(tmp_path: Path):
    root, outside = _outside_library(tmp_path)
    listed = dict(listed_packages(str(root)))
    os.rename(root / "beta", tmp_path / "beta-moved")
    (root / "beta").symlink_to(outside, target_is_directory=True)  # the folder on the way, not SKILL.md
    node, problems = parse_package(str(root / "beta"), str(root), listed=listed[str(root / "beta")])
    assert node is None and [p.code for p in problems] == ["symlink_outside_root"]


def test_a_skill_md_linked_inside_the_root_is_still_read(tmp_path: Path):
    root, _ = _outside_library(tmp_path)
    write_skill(root, "shared", "name: gamma\ndescription: The gamma skill.", "# gamma\n")
    (root / "gamma").mkdir()
    (root / "gamma" / "SKILL.md").symlink_to(root / "shared" / "SKILL.md")  # documented: followed
    parsed = parse_library(root, workers=1)
    assert "gamma" in parsed.nodes["id"].to_list()


def test_skill_md_swaps_during_builds_never_put_outside_text_in_the_nodes(tmp_path: Path):
    """The swap race: a thread flips a SKILL.md between a regular file and a link leaving the
    root (each flip one atomic rename) while the library is parsed again and again."""
    root, outside = _outside_library(tmp_path)
    for i in range(40):
        write_skill(root, f"pkg-{i:02d}", f"name: pkg-{i}\ndescription: Package {i}.", "# p\n")
    skill = root / "alpha" / "SKILL.md"
    regular, link = tmp_path / "regular.md", tmp_path / "link.md"
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            regular.write_text(OUTSIDE_TEXT.replace("stolen", "alpha").replace("OUTSIDE-SECRET", "inside"))
            os.replace(regular, skill)
            link.symlink_to(outside / "SKILL.md")
            os.replace(link, skill)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    try:
        for _ in range(30):
            parsed = parse_library(root, workers=1)
            assert not parsed.nodes.filter(pl.col("description").str.contains("OUTSIDE-SECRET")).height
    finally:
        stop.set()
        flipper.join()


def test_a_link_swapped_for_a_file_while_it_is_resolved_skips_the_package_not_the_build(
    tmp_path: Path, monkeypatch
):
    """What CI once hit in the flipping test above: realpath lstat-ed a link, the flip made it a file, and
    readlink raised EINVAL out of the whole parse. Made deterministic by raising what realpath raised."""
    root, outside = _outside_library(tmp_path)
    (root / "alpha" / "SKILL.md").unlink()
    (root / "alpha" / "SKILL.md").symlink_to(outside / "SKILL.md")
    real = os.path.realpath

    def racing(path, *args, **kwargs):
        if str(path).endswith(os.path.join("alpha", "SKILL.md")):
            raise OSError(22, "Invalid argument", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", racing)
    parsed = parse_library(root, workers=1)
    assert parsed.nodes["id"].to_list() == ["beta"]
    (problem,) = parsed.report["problem"].to_list()
    assert "leaves the library root" in problem
