"""The versions a service loads for `version=` are kept within a memory budget.

The bound was four versions whatever their size: a client cycling through five made every call a full
load, and four large versions held gigabytes. Now the sizes of the kept versions (`memory_bytes`) stay
within `cache_bytes` (`$SEGOS_VERSION_CACHE_MB`), least recently used out first, and the served version is
always kept.
"""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.service.api import SegosService
from segos_pipeline.service.version_cache import VERSION_CACHE_ENV, cache_budget, memory_bytes

from ..conftest import commit_copy

QUERY = "load the sales csv, clean missing values and chart revenue by month"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SnapshotStore:
    """Six versions of the demo library (more than the old count bound of four)."""
    st = SnapshotStore(tmp_path_factory.mktemp("cache") / "store")
    build_cold_start(DEFAULT_LIBRARY, st)
    for _ in range(5):
        commit_copy(st, serve=False)
    return st


def versions(store: SnapshotStore) -> list[str]:
    return [m["version"] for m in store.list_versions()]


def test_memory_bytes_counts_arrays_frames_and_matrices_once():
    a = np.zeros(1000, dtype=np.float64)  # 8,000 bytes
    frame = pl.DataFrame({"x": np.arange(1000, dtype=np.int64)})
    m = sp.random(100, 100, density=0.1, format="csr", random_state=0)
    matrix = m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
    assert memory_bytes(a) == 8000
    refs = [a, a, a[10:]]
    assert memory_bytes(refs) == 8000 + sys.getsizeof(refs)  # once, however referenced
    assert memory_bytes(frame) == frame.estimated_size()
    assert memory_bytes(m) == matrix
    assert memory_bytes({"a": a, "m": m}) >= 8000 + matrix


def test_the_budget_comes_from_the_argument_the_environment_or_the_default():
    assert cache_budget(123, {}) == 123
    assert cache_budget(None, {VERSION_CACHE_ENV: "1.5"}) == int(1.5 * (1 << 20))
    assert cache_budget(None, {}) == 2048 << 20
    with pytest.raises(ValueError, match=VERSION_CACHE_ENV):
        cache_budget(None, {VERSION_CACHE_ENV: "lots"})
    with pytest.raises(ValueError, match=VERSION_CACHE_ENV):
        cache_budget(None, {VERSION_CACHE_ENV: "-1"})


def test_the_default_budget_keeps_more_than_four_small_versions(store):
    svc = SegosService(store.root, "v1", reload="sync")
    loaded = {vid: svc._request(vid) for vid in versions(store)}
    assert len(loaded) == 6
    assert set(svc.status()["in_memory"]) == set(loaded)  # none evicted: six versions fit easily
    again = {vid: svc._request(vid) for vid in versions(store)}
    assert all(again[v] is loaded[v] for v in loaded)  # none loaded twice
    assert 0 < svc.status()["in_memory_bytes"] == sum(svc._cache.sizes().values())


def test_past_the_budget_the_least_recently_used_leave_and_the_served_one_stays(store):
    probe = SegosService(store.root, "v1", reload="sync")
    one = probe._cache.sizes()[probe.version]
    assert one > 100_000  # a loaded demo version: its tables, index and vectors
    svc = SegosService(store.root, "v1", reload="sync", cache_bytes=int(2.5 * one))
    served, *others = versions(store)
    first = {vid: svc._request(vid) for vid in others}
    kept = svc.status()["in_memory"]
    assert kept[0] == served and set(kept) == {served, others[-1]}  # two fit: the served and the newest used
    assert svc._cache.total() <= int(2.5 * one)
    assert svc._request(others[-1]) is first[others[-1]]  # kept: not loaded again
    assert svc._request(others[0]) is not first[others[0]]  # evicted: loaded again
    assert svc.search(QUERY)["version"] == served


def test_a_budget_of_nothing_still_keeps_the_served_version(store):
    svc = SegosService(store.root, "v1", reload="sync", cache_bytes=0)
    served = svc.version
    for vid in versions(store)[1:]:
        assert svc.search(QUERY, version=vid)["version"] == vid
    assert served in svc.status()["in_memory"] and len(svc._cache) <= 2  # the served and the one in use
    assert svc.search(QUERY)["version"] == served
