"""Long commands show progress and a time-by-stage summary on stderr; --quiet silences it; --json's stdout
stays clean."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from segos_pipeline import SnapshotStore
from segos_pipeline.cli.progress import Reporter
from segos_pipeline.paths import DEMO_TRACES
from segos_pipeline.progress import StageDone, Tick, stage

from ..conftest import run_segos


def segos(*args: str) -> subprocess.CompletedProcess[str]:
    return run_segos(*args, timeout=600)


def test_build_ingest_and_evolve_report_their_stages(tmp_path: Path):
    store = str(tmp_path / "store")
    built = segos("build", "--store", store, "--json")
    json.loads(built.stdout)  # stdout is the JSON document alone
    assert "[segos] build: time by stage" in built.stderr
    for name in ("parse", "graph", "retrieval caches", "total"):
        assert f"[segos]   {name}" in built.stderr, built.stderr
    ingested = segos("ingest", str(DEMO_TRACES), "--store", store)
    assert "validate and store" in ingested.stderr and "lines" in ingested.stderr
    # the demo's 3 broken lines: the quarantine file is named and each reason ends on a whole word
    assert f"{Path(store, 'traces', 'unplaced', 'quarantine.jsonl')}" in ingested.stdout
    assert "quarantined x1: line is not valid JSON…" in ingested.stdout
    evolved = segos("evolve", "--window", "2026-11-27", "--store", store)
    assert "[segos] evolve: time by stage" in evolved.stderr and "l1" in evolved.stderr
    quiet = segos("evolve", "--window", "2026-11-28", "--store", store, "--quiet")
    assert quiet.stderr == ""
    assert quiet.stdout.splitlines() == [SnapshotStore(store).latest()]  # the version id, no counters


def test_reporter_counts_stages_and_is_silent_when_quiet(capsys):
    rep = Reporter("demo")
    with stage(rep, "load", lambda: "3 files"):
        for i in range(1, 4):
            rep(Tick("files", i, 3))
    rep(Tick("lines", 10))  # no total known: a counter, not a bar
    rep(StageDone("write", 0.5))
    rep.add_timings({"parse": 1.25, "total": 9.0})  # a manifest's own total is not a stage
    rep.summary()
    err = capsys.readouterr().err
    assert [s.stage for s in rep.stages] == ["load", "write", "parse"]
    assert "load" in err and "3 files" in err and "parse" in err and "1.25s" in err
    quiet = Reporter("demo", quiet=True)
    quiet("a message")
    quiet(Tick("files", 1, 2))
    quiet.summary()
    assert capsys.readouterr().err == ""
