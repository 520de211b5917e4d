"""Fuzz: 10,000 generated packages of every shape (tests/hostile_packages.py) in one library.

No crash, no package silently dropped (each is a node or a report row), every good package present and
unchanged. `benchmarks/fuzz_packages.py` runs the same check on larger counts.
"""

from __future__ import annotations

import collections

from segos_pipeline.graph.parsing import parse_library

from ..hostile_packages import MAKERS, check, write_fuzz_library

N_PACKAGES = 10_000


def test_ten_thousand_packages_of_every_shape(tmp_path):
    cases = write_fuzz_library(tmp_path / "lib", N_PACKAGES, seed=13)
    kinds = collections.Counter(case.kind for case in cases)
    assert set(kinds) == set(MAKERS)  # every shape is in the run
    parsed = parse_library(tmp_path / "lib", workers=2)
    violations = check(parsed, cases)
    assert violations == {key: [] for key in violations}
    expected_nodes = sum(case.expect != "skipped" for case in cases)
    assert parsed.nodes.height == expected_nodes


def test_what_the_walk_listed_spares_system_calls_and_changes_nothing(tmp_path, monkeypatch):
    """`parse_package` given its folder's listing (`Listed`, from the walk) gives the same row and report as
    asking the filesystem itself, for packages of every shape (FIFOs, symlinks in and out of the root,
    broken links, loops, sockets, scripts folders), and no longer lstats a regular SKILL.md or scripts/."""
    import os

    import segos_pipeline.graph.discovery as discovery
    import segos_pipeline.graph.parsing as parsing

    root = tmp_path / "lib"
    write_fuzz_library(root, 600, seed=5)
    (root / "scripted" / "scripts").mkdir(parents=True)
    (root / "scripted" / "scripts" / "run.py").write_text("print(1)")
    (root / "scripted" / "SKILL.md").write_text("---\nname: scripted\ndescription: d\n---\nbody")
    listed = list(discovery.listed_packages(str(root)))
    assert [p for p, _ in listed] == list(discovery.package_folders(str(root)))
    asked: list[str] = []
    lstat = os.lstat

    def counted(path, *args, **kwargs):
        asked.append(os.fsdecode(path))
        return lstat(path, *args, **kwargs)

    kinds = collections.Counter()
    for pkg, seen in listed:
        plain = parsing.parse_package(pkg, root)
        monkeypatch.setattr(parsing.os, "lstat", counted)
        asked.clear()
        hinted = parsing.parse_package(pkg, root, listed=seen)
        monkeypatch.setattr(parsing.os, "lstat", lstat)
        assert hinted == plain, pkg
        skill, scripts = os.path.join(pkg, "SKILL.md"), os.path.join(pkg, "scripts")
        assert (skill in asked) == (not seen.skill_is_file), pkg
        assert scripts not in asked, pkg
        kinds[(seen.skill_is_file, seen.scripts_is_dir, plain[0] is not None)] += 1
    assert kinds[(True, False, True)] and kinds[(True, True, True)]  # plain, and with a scripts folder
    assert kinds[(False, False, False)]  # symlinks, FIFOs and sockets: still lstat'd, still skipped
    node = parsing.parse_package(root / "scripted", root, listed=dict(listed)[str(root / "scripted")])[0]
    assert node is not None and node["entrypoints"] == ["scripts/run.py"]
