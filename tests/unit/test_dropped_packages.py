"""Every package the parse walk passes over has a build-report row.

A symlinked folder is not followed (a link can leave the library root or loop), and a folder whose path is
longer than PATH_MAX cannot be listed: both dropped their packages without a word. Each is now one report
row naming the folder, whichever process's walk met it.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

import segos_pipeline.graph.parsing as parsing
from segos_pipeline.graph.parsing import parse_library

from ..conftest import write_skill

SEGMENT = "d" * 200


def deep_package(lib: Path, over: int = 4096 + 100) -> int:
    """A package under a chain of folders whose absolute path passes `over` bytes, made relative to each
    folder's descriptor (no call takes the whole path); how many folders deep it is."""
    depth, fd = 0, os.open(lib, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while len(os.fsencode(lib)) + depth * (len(SEGMENT) + 1) < over:
            os.mkdir(SEGMENT, dir_fd=fd)
            below = os.open(SEGMENT, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, depth = below, depth + 1
        skill = os.open("SKILL.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(skill, b"---\nname: deep\ndescription: too deep to be reached\n---\nbody")
        os.close(skill)
    finally:
        os.close(fd)
    return depth


def rows(parsed: parsing.ParsedLibrary, contains: str) -> pl.DataFrame:
    return parsed.report.filter(pl.col("problem").str.contains(contains, literal=True))


def test_a_symlinked_package_folder_has_a_report_row_and_is_not_read(tmp_path):
    outside = write_skill(tmp_path / "outside", "secret", "name: secret\ndescription: private", "s")
    plain = tmp_path / "outside" / "plain"
    plain.mkdir()
    lib = tmp_path / "lib"
    write_skill(lib, "ok", "name: ok\ndescription: fine", "b")
    (lib / "tools").mkdir()
    (lib / "tools" / "linked").symlink_to(outside, target_is_directory=True)
    (lib / "folder-link").symlink_to(plain, target_is_directory=True)
    (lib / ".hidden-link").symlink_to(outside, target_is_directory=True)  # hidden: skipped as any hidden

    parsed = parse_library(lib)
    assert parsed.nodes["id"].to_list() == ["ok"]
    linked = rows(parsed, "symbolic link")
    assert linked.select("file", "severity").rows() == [("folder-link", "warning"), ("tools/linked", "error")]
    [package] = linked.filter(pl.col("file") == "tools/linked")["problem"]
    assert package.startswith("package folder is a symbolic link")
    assert all("skipped" in a for a in linked["action"])
    assert "private" not in str(parsed.report.to_dicts())


def test_a_package_deeper_than_path_max_has_a_report_row(tmp_path):
    lib = tmp_path / "lib"
    write_skill(lib, "ok", "name: ok\ndescription: fine", "b")
    depth = deep_package(lib)
    assert len(os.fsencode(lib)) + depth * (len(SEGMENT) + 1) > 4096

    parsed = parse_library(lib)
    assert parsed.nodes["id"].to_list() == ["ok"]  # the build goes on
    [row] = rows(parsed, "PATH_MAX").to_dicts()
    assert row["severity"] == "error" and "skipped" in row["action"]
    assert row["file"].startswith(SEGMENT[:100]) and row["file"].endswith("characters)")
    assert len(row["file"]) < 400  # a 4 KB path is cut in the middle, not copied whole into the report


def test_the_walk_rows_are_the_same_whoever_walks(tmp_path, monkeypatch):
    """Found by the main process's walk or by a chunk's (the workers' share of discovery), the rows are
    the same and in the same place of the report: its bytes must not depend on the workers."""
    outside = write_skill(tmp_path / "outside", "secret", "name: secret\ndescription: private", "s")
    lib = tmp_path / "lib"
    for i in range(6):
        write_skill(lib, f"g{i}/s", f"name: s{i}\ndescription: skill {i}", "b")
        (lib / f"g{i}" / "link").symlink_to(outside, target_is_directory=True)
    deep_package(lib / "g3")
    expected = parse_library(lib, workers=1).report

    monkeypatch.setattr(parsing, "_PARALLEL_MIN", 1)  # a pool is planned after the first package ...
    monkeypatch.setattr(parsing, "_parse_in_pool", lambda *a: None)  # ... and its chunks parsed here
    chunks, pooled = parsing._plan(lib, workers=2)
    assert pooled and any(listed is None for c in chunks for _, listed in c.items)  # chunks walk folders
    assert parse_library(lib, workers=2).report.equals(expected)
    assert rows(parse_library(lib, workers=2), "symbolic link").height == 6
