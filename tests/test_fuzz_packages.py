"""Fuzz: 10,000 generated packages of every shape (tests/hostile_packages.py) in one library.

No crash, no package silently dropped (each is a node or a report row), every good package present and
unchanged. `benchmarks/fuzz_packages.py` runs the same check on larger counts.
"""

from __future__ import annotations

import collections

from segos_pipeline.graph.parsing import parse_library

from .hostile_packages import MAKERS, check, write_fuzz_library

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
