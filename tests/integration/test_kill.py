"""`kill -9` at random points of `segos build`, `segos update` and `segos evolve`: afterwards
`segos verify --all` is clean, every earlier version loads, no half version is listed, and the next write
succeeds and sweeps the dead writer's staging folder."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest

from segos_pipeline.store.snapshot import SnapshotStore

from ..helpers_writers import WINDOWS, assert_sound, demo_store, edit_skill, finish, staging_left, start

KILLS = 3  # per command: one at a random time, two while the version's files are being staged


def _args(command: str, lib: Path, store: Path, trial: int) -> list[object]:
    if command == "build":
        return ["build", lib, "--store", store, "--quiet"]
    if command == "update":
        return ["update", edit_skill(lib, f"KILLED-{trial}"), "--store", store]
    return ["evolve", "--store", store, "--window", WINDOWS[trial % 2], "--quiet"]


def _kill_while_staging(proc: subprocess.Popen[str], store: Path, rng: random.Random, limit: float) -> str:
    """SIGKILL shortly after a staging folder appears (the window where a version is half-written)."""
    staging = store / ".staging"
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if staging.is_dir() and any(p.is_dir() for p in staging.iterdir()):
            time.sleep(rng.uniform(0, 0.015))
            proc.kill()
            return "while staging"
        time.sleep(0.002)
    proc.kill()
    return "at the time limit"


@pytest.mark.parametrize("command", ["build", "update", "evolve"])
def test_kill_9_at_random_points_leaves_the_store_sound(tmp_path, command):
    rng = random.Random(f"kill-{command}")
    lib, store = demo_store(tmp_path)
    earlier = assert_sound(store, [])
    outcomes = []
    for trial in range(KILLS):
        proc = start(*_args(command, lib, store, trial))
        if trial == 0:
            time.sleep(rng.uniform(0.5, 4.0))  # anywhere: start-up, parsing, computing, writing
            proc.kill()
            how = "at a random time"
        else:
            how = _kill_while_staging(proc, store, rng, limit=60)
        proc.wait()
        outcomes.append((how, proc.returncode, len(staging_left(store))))
        earlier = assert_sound(store, earlier)  # verify --all clean, all earlier versions load
    assert any(left for _how, _code, left in outcomes), f"no kill left a half-written stage: {outcomes}"
    n = len(earlier)
    code, out, err = finish(start(*_args(command, lib, store, KILLS)))
    assert code == 0, (outcomes, err)
    listed = assert_sound(store, earlier)
    assert len(listed) == n + 1 and out.strip().splitlines()[-1] == listed[-1]
    assert staging_left(store) == [], f"the next write left staging behind ({outcomes})"
    assert SnapshotStore(store).load().version == listed[-1]
