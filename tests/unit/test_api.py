"""`SegosService` switching versions: a new version is loaded in the background while requests go on being
answered from the old one, swapped in between requests once ready; a damaged one is never switched to."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.paths import DEFAULT_LIBRARY
from segos_pipeline.service.api import SegosService
from segos_pipeline.service.arguments import MAX_ECHO_CHARS
from segos_pipeline.service.errors import ServiceError
from segos_pipeline.store.snapshot import DamagedSnapshot, SnapshotError

from ..conftest import commit_copy, damage

QUERY = "load the sales csv, clean missing values and chart revenue by month"


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    st = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, st)
    return st


def _until_idle(svc: SegosService, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while svc.loading is not None:
        assert time.monotonic() < deadline, f"the background load of {svc.loading} did not end"
        time.sleep(0.02)


def test_requests_are_answered_from_the_old_version_while_the_new_one_loads(
    store: SnapshotStore, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="segos_pipeline.service.api")
    svc = SegosService(store, landing=tmp_path)
    v1 = svc.version
    gate = threading.Event()
    load = svc._load

    def slow_load(vid: str):  # holds the new version's load until the test opens the gate
        if vid != v1:
            assert gate.wait(60)
        return load(vid)

    svc._load = slow_load  # type: ignore[method-assign]
    v2 = commit_copy(store)

    started = time.monotonic()
    status = svc.status()  # notices v2 and starts loading it, without waiting for it
    bundle = svc.retrieve_bundle(QUERY)
    assert time.monotonic() - started < 30  # answered while the load is held
    assert status["version"] == v1 and status["loading"] == v2 and bundle["version"] == v1
    assert svc.switches == 0

    gate.set()
    _until_idle(svc)
    assert svc.retrieve_bundle(QUERY)["version"] == v2  # swapped in at the start of this request
    status = svc.status()
    assert status["version"] == v2 and status["loading"] is None and status["switches"] == 1
    assert status["in_memory"] == [v2]  # the replaced version is not kept
    said = [r.getMessage() for r in caplog.records]  # what `segos mcp` shows on stderr
    assert said[0] == f"version {v2} is served; loading it (serving {v1} meanwhile)"
    assert said[1].startswith(f"version {v2} loaded in ") and said[2] == f"now serving {v2} (was {v1})"


def test_sync_reload_switches_inside_the_request(store: SnapshotStore, tmp_path):
    svc = SegosService(store, landing=tmp_path, reload="sync")
    v2 = commit_copy(store)
    assert svc.status()["version"] == v2 and svc.switches == 1
    # refresh(wait=True) does the same for a background service
    bg = SegosService(store, landing=tmp_path)
    v3 = commit_copy(store)
    assert bg.refresh(wait=True) and bg.version == v3


def test_a_damaged_new_version_is_not_switched_to_nor_retried(store: SnapshotStore, tmp_path):
    svc = SegosService(store, landing=tmp_path)
    v1 = svc.version
    v2 = commit_copy(store)
    part = next(p for p in (store.root / "versions" / v2).glob("nodes*.parquet"))
    damage(part, 100, b"\x00" * 16)

    assert svc.status()["version"] == v1
    _until_idle(svc)
    status = svc.status()
    assert status["version"] == v1 and status["switches"] == 0
    assert v2 in (status["last_reload_error"] or "")
    assert svc.loading is None and svc._loader is None  # not retried


def test_a_damaged_newest_version_at_start_is_passed_over_for_the_one_before(
    store: SnapshotStore, tmp_path, caplog
):
    """An agent's client starts `segos mcp` by itself: with the newest version damaged it serves the newest
    intact one, says why, and (like a running server) does not retry the damaged one."""
    v1 = store.latest()
    v2 = commit_copy(store)
    damage(next((store.root / "versions" / v2).glob("nodes*.parquet")), 100, b"\x00" * 16)

    with caplog.at_level(logging.WARNING, logger="segos_pipeline.service.api"):
        svc = SegosService(store, landing=tmp_path)
    status = svc.status()
    assert status["version"] == v1 and status["latest"] == v2 and status["mode"] == "served"
    assert "damaged" in status["unservable"][v2]
    assert any(v2 in r.getMessage() and "cannot be served" in r.getMessage() for r in caplog.records)
    _until_idle(svc)
    assert svc.loading is None and svc._loader is None  # not retried

    with pytest.raises(DamagedSnapshot):  # a pinned version is what was asked for: no substitute
        SegosService(store, v2, landing=tmp_path)
    damage(next((store.root / "versions" / v1).glob("nodes*.parquet")), 100, b"\x00" * 16)
    with pytest.raises(SnapshotError, match=r"no version of .* can be served"):
        SegosService(store, landing=tmp_path)


def test_reload_mode_is_checked(store: SnapshotStore):
    with pytest.raises(ServiceError, match="reload"):
        SegosService(store, reload="sometimes")


def test_concurrent_callers_start_one_load(store: SnapshotStore, tmp_path):
    svc = SegosService(store, landing=tmp_path)
    loads: list[str] = []
    load = svc._load

    def counted(vid: str):
        loads.append(vid)
        time.sleep(0.2)  # long enough for the other callers to arrive while it runs
        return load(vid)

    svc._load = counted  # type: ignore[method-assign]
    v2 = commit_copy(store)
    threads = [threading.Thread(target=svc.status) for _ in range(8)]
    threads += [threading.Thread(target=svc.refresh, kwargs={"wait": True}) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert loads == [v2]  # one load for ten callers
    assert svc.version == v2 and svc.switches == 1  # the waiting callers swapped it in


def _commit_round(store: SnapshotStore, used: list[str]) -> str:
    """A child of the newest version with the same graph and one successful round trace that used `used`."""
    traces = pl.DataFrame({"trace_id": [f"t-{store.latest()}"], "used": [used], "reward": [1.0]})
    return commit_copy(store, extra_tables={"traces.parquet": traces})


def _precedence(store: SnapshotStore, landing: Path) -> dict:
    return SegosService(store, landing=landing).status()["ordering"]["precedence"]


def test_a_damaged_ancestor_s_round_traces_do_not_count_towards_order(store: SnapshotStore, tmp_path, caplog):
    """Loading a version verifies its own files only; its ancestors' round traces, which feed the order of
    every bundle, are checked one by one, and a damaged one is left out and reported."""
    skills = store.load().nodes["id"].to_list()[:3]
    older = _commit_round(store, skills)
    newer = _commit_round(store, skills[::-1])
    intact = _precedence(store, tmp_path)
    assert intact["versions"] == [newer, older] and intact["traces"] == 2 and intact["skipped"] == []

    damage(store.versions_dir / older / "traces.parquet", 0, b"XXXX")
    with caplog.at_level(logging.WARNING, logger="segos_pipeline.service.api"):
        precedence = _precedence(store, tmp_path)
    assert precedence["versions"] == [newer] and precedence["skipped"] == [older]
    assert precedence["traces"] == 1  # only the newer round's trace is mined
    assert any(older in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)


def test_a_replaced_but_readable_ancestor_traces_file_is_caught_by_its_hash(store: SnapshotStore, tmp_path):
    skills = store.load().nodes["id"].to_list()[:3]
    older = _commit_round(store, skills)
    newer = _commit_round(store, skills)
    path = store.versions_dir / older / "traces.parquet"
    path.chmod(0o644)
    pl.DataFrame({"trace_id": ["forged"], "used": [skills[::-1]], "reward": [1.0]}).write_parquet(path)
    precedence = _precedence(store, tmp_path)
    assert precedence["versions"] == [newer] and precedence["skipped"] == [older]


# ------------------------------------------------------------------------------ bounded work per request


def test_near_miss_suggestions_come_from_an_index_and_are_capped_per_request(store: SnapshotStore, tmp_path):
    import difflib

    from segos_pipeline.service.api import MAX_SUGGESTED

    service = SegosService(store, landing=tmp_path / "landing")
    lo = service._request(None)
    ids, names = lo.names.ids, lo.snapshot.nodes["name"].to_list()
    # the index agrees with an exhaustive comparison on the best near miss
    for miss in ("csv-lodaer", "data-wrangling/csv-loadr", "imag-resizer", "chart-plotterr"):
        exhaustive = difflib.get_close_matches(miss, ids + names, n=1, cutoff=0.6)
        assert lo.names.suggestions(miss)[:1] == exhaustive, miss
    assert lo.names.suggestions("qqqqzzzz") == []
    # one request with many unknown names: every one is reported, the first few with suggestions
    misses = [f"csv-lodaer-{k}" for k in range(40)]
    reply = service.hydrate(["data-wrangling/csv-loader", *misses], partial=True)
    assert [s["id"] for s in reply["skills"]] == ["data-wrangling/csv-loader"]
    errors = [e["error"] for e in reply["errors"]]
    assert len(errors) == 40
    assert sum("did you mean" in e for e in errors) == MAX_SUGGESTED
    assert all("did you mean" not in e for e in errors[MAX_SUGGESTED:])
    with pytest.raises(ServiceError, match="did you mean 'csv-loader'"):
        service.skill_detail("csv-lodaer")


def test_a_query_longer_than_a_trace_may_record_is_refused(store: SnapshotStore, tmp_path):
    from segos_pipeline.config import MAX_TEXT_CHARS

    service = SegosService(store, landing=tmp_path / "landing")
    longest = "csv " * (MAX_TEXT_CHARS // 4)
    # accepted, and repeated only as a bounded prefix: a reply never grows with what a client sends
    for call in (service.retrieve_bundle, service.search):
        echo = call(longest)["query"]
        assert echo == longest.strip()[:MAX_ECHO_CHARS] + "…"
    assert service.search("chart revenue")["query"] == "chart revenue"
    for call in (service.retrieve_bundle, service.search):
        with pytest.raises(ServiceError, match=f"at most {MAX_TEXT_CHARS:,} are accepted"):
            call("x" * (MAX_TEXT_CHARS + 1))
