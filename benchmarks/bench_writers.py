"""Concurrent writers on one store (issue 13): `segos update` and `segos evolve` started together.

Each trial appends a unique marker to one skill of a copy of the demo library, starts `segos update` of
that skill and `segos evolve` of a demo window at the same moment, waits for both, and checks that
sequence numbers are unique, that the newest version contains the marker (no edit lost), and that
`segos verify --all` is clean. A second set of trials starts the update only once the evolve holds the
store's writer lock, so that the update has to wait and build on the evolved version (started together,
the lighter update often commits before the evolve reaches its commit, and neither waits). Writes
`benchmarks/results/writers.{json,md}`.

    python benchmarks/bench_writers.py [--trials 3] [--out benchmarks/results]

Run it with PYTHONPATH pointing at another checkout to measure that code instead (the `segos_pipeline`
it imports is recorded in the result).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness

import segos_pipeline
from segos_pipeline import build_cold_start
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_TRACES
from segos_pipeline.store.snapshot import SnapshotStore

EDITED = "data-wrangling/csv-loader"
WINDOWS = ("2026-11-27", "2026-11-28")
SEGOS = [sys.executable, "-m", "segos_pipeline.cli"]


def _segos(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*SEGOS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_holder(store: Path, word: str, limit: float = 300) -> None:
    lock = store / ".writer.lock"
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if lock.is_file() and word in lock.read_text(errors="replace"):
            return
        time.sleep(0.01)
    raise RuntimeError(f"no writer '{word}' took the lock of {store} within {limit} s")


def _run_pair(lib: Path, store: Path, marker: str, window: str, overlap: bool) -> dict[str, Any]:
    with (lib / EDITED / "SKILL.md").open("a", encoding="utf-8") as fh:
        fh.write(f"\n\nEdited: {marker}.\n")
    t0 = time.perf_counter()
    evolve = _segos("evolve", "--store", str(store), "--window", window, "--quiet")
    if overlap:
        _wait_for_holder(store, "evolve")
    procs = {"update": _segos("update", str(lib / EDITED), "--store", str(store)), "evolve": evolve}
    outcome = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        outcome[name] = {
            "exit": proc.returncode,
            "version": out.strip().splitlines()[-1] if out.strip() else None,
            "stderr": err.strip().splitlines()[-3:],
        }
    seconds = time.perf_counter() - t0
    st = SnapshotStore(store)
    versions = st.list_versions()
    seqs = [m["seq"] for m in versions]
    newest = st.load(versions[-1]["version"])
    body = newest.nodes.filter(newest.nodes["id"] == EDITED)["body"][0]
    verify = subprocess.run(
        [*SEGOS, "verify", "--all", "--store", str(store)], capture_output=True, text=True
    )
    return {
        **outcome,
        "mode": "update once evolve holds the lock" if overlap else "together",
        "a_writer_waited": any(
            "waiting for another writer" in " ".join(o["stderr"]) for o in outcome.values()
        ),
        "seconds": round(seconds, 2),
        "versions": [(m["version"], m["kind"], m["parent"]) for m in versions[-2:]],
        "seqs_unique": len(seqs) == len(set(seqs)),
        "newest_has_edit": marker in body,
        "verify_all_clean": verify.returncode == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="Folder for writers.json / writers.md.")
    parser.add_argument(
        "--together-only", action="store_true", help="Only the trials started together (code without a lock)."
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="segos-writers-"))
    try:
        lib, store = work / "lib", work / "store"
        shutil.copytree(DEFAULT_LIBRARY, lib)
        build_cold_start(lib, store)
        TraceStore(store).ingest(iter_records(DEMO_TRACES, "native"))
        trials = [
            _run_pair(lib, store, f"BENCH-EDIT-{i}-{time.time_ns()}", WINDOWS[i % 2], overlap)
            for overlap in ((False,) if args.together_only else (False, True))
            for i in range(args.trials)
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "code": str(Path(segos_pipeline.__file__).parent),
        "trials": trials,
        "all_seqs_unique": all(t["seqs_unique"] for t in trials),
        "all_edits_kept": all(t["newest_has_edit"] for t in trials),
        "all_exit_0": all(t["update"]["exit"] == 0 and t["evolve"]["exit"] == 0 for t in trials),
    }
    print(json.dumps(result, indent=2))
    if args.out is not None:
        rows = [
            "| trial | started | update | evolve | a writer waited | newest two versions (kind, parent) "
            "| seq unique | edit in newest | verify --all | s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i, t in enumerate(trials):
            newest = "; ".join(f"{v} ({k}, parent {p})" for v, k, p in t["versions"])
            rows.append(
                f"| {i + 1} | {t['mode']} | exit {t['update']['exit']} | exit {t['evolve']['exit']} | "
                f"{t['a_writer_waited']} | {newest} | "
                f"{t['seqs_unique']} | {t['newest_has_edit']} | {t['verify_all_clean']} | {t['seconds']} |"
            )
        harness.write_results(
            args.out / "writers",
            result,
            "# `segos update` and `segos evolve` started together on one store\n\n"
            "Made by `python benchmarks/bench_writers.py --out benchmarks/results`.\n\n"
            + "\n".join(rows)
            + "\n",
        )


if __name__ == "__main__":
    main()
