"""Torn writes and hostile landing folders: every trace `record_trace`
acknowledges is on disk whole and ingested exactly once, under kill -9 and a full filesystem; a torn last
line is moved aside by the next append and skipped (reported, not quarantined) by ingest; links and other
non-regular files in a landing folder are reported by name and never read. The SKILL.md side of "read only
what is ours" is in tests/unit/test_hostile_skill_reads.py."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from segos_pipeline.cli import main
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.landing import LandingWriteError, append_line, torn_path
from segos_pipeline.service.api import SegosService
from segos_pipeline.service.errors import TraceNotWritten

ROOT = Path(__file__).resolve().parents[2]
WINDOW = "2026-11-29"
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAA do-not-copy"


def trace(i: int, **patch) -> dict:
    return {
        "trace_id": f"w-{i}",
        "task_id": "csv-report",
        "timestamp": f"{WINDOW}T02:00:00Z",
        "queries": ["load the sales csv"],
        "used": ["csv-loader"],
        "reward": 1.0,
        **patch,
    }


def line(i: int) -> bytes:
    return json.dumps(trace(i)).encode()


def run(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def store(demo_store_copy: Path) -> Path:
    return demo_store_copy


def stored_ids(store: Path) -> list[str]:
    ts = TraceStore(store)
    return ts.load(WINDOW)["trace_id"].to_list() if WINDOW in ts.windows() else []


# ------------------------------------------------------------------------------------- the appender


def test_append_moves_a_torn_tail_aside_before_writing(tmp_path: Path):
    path = tmp_path / f"{WINDOW}.jsonl"
    torn = line(2)[:37]
    path.write_bytes(line(1) + b"\n" + torn)  # a crash cut the append of trace 2
    done = append_line(path, line(3))
    assert path.read_bytes() == line(1) + b"\n" + line(3) + b"\n"  # never glued onto the torn bytes
    assert torn_path(path).read_bytes() == torn + b"\n"  # kept aside, not lost
    assert (done.torn_bytes, done.torn_file) == (len(torn), str(torn_path(path)))
    assert done.offset == len(line(1)) + 1


def test_append_ends_a_complete_last_line_instead_of_cutting_it(tmp_path: Path):
    path = tmp_path / f"{WINDOW}.jsonl"
    path.write_bytes(line(1))  # written by another tool without a final newline: a whole trace
    append_line(path, line(2))
    assert path.read_bytes() == line(1) + b"\n" + line(2) + b"\n"
    assert not torn_path(path).exists()


def test_append_refuses_a_linked_landing_file(tmp_path: Path):
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"keep me\n")
    (tmp_path / f"{WINDOW}.jsonl").symlink_to(target)
    with pytest.raises(LandingWriteError, match="symbolic link"):
        append_line(tmp_path / f"{WINDOW}.jsonl", line(1))
    assert target.read_bytes() == b"keep me\n"


def test_concurrent_appends_from_processes_never_interleave(tmp_path: Path):
    path = tmp_path / f"{WINDOW}.jsonl"
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from segos_pipeline.evolution.landing import append_line
        for i in range(40):
            row = {{"p": sys.argv[1], "i": i, "pad": "x" * 70000}}
            append_line(Path({str(path)!r}), json.dumps(row).encode())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(p)], env=env) for p in range(4)]
    assert all(p.wait(60) == 0 for p in procs)
    rows = [json.loads(x) for x in path.read_bytes().split(b"\n")[:-1]]
    assert sorted((r["p"], r["i"]) for r in rows) == sorted((str(p), i) for p in range(4) for i in range(40))


# ------------------------------------------------------------------------------- kill -9 and disk full

# A zygote: loads the service once, then forks one recorder per "go" line; each recorder calls
# record_trace in a loop with ~0.5 MB traces and prints the id of every acknowledged one. The test kills
# each recorder with SIGKILL at a random moment: real processes, a real kill, no restart cost per round.
ZYGOTE = """
import os, sys
from segos_pipeline.service.api import SegosService
svc = SegosService(sys.argv[1], landing=sys.argv[2], reload="sync")
big = ["q" * 30_000] * 16
for round_ in sys.stdin:
    pid = os.fork()
    if pid == 0:
        i = 0
        while True:
            tid = f"k{round_.strip()}-{i}"
            svc.record_trace("t", big, ["csv-loader"], 1.0, trace_id=tid, timestamp="%sT01:00:00Z")
            os.write(1, f"ACK {tid}\\n".encode())
            i += 1
    os.write(1, f"PID {pid}\\n".encode())
    os.waitpid(pid, 0)
    os.write(1, b"REAPED\\n")
"""


def test_kill_9_during_record_trace_loses_no_acknowledged_trace(store: Path, tmp_path: Path):
    landing = tmp_path / "landing"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    zygote = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE % WINDOW, str(store), str(landing)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    rng = random.Random(31)
    acked: list[str] = []
    try:
        for r in range(10):
            zygote.stdin.write(f"{r}\n".encode())
            zygote.stdin.flush()
            while not (out := zygote.stdout.readline()).startswith(b"PID "):
                acked += [out.split()[1].decode()] if out.startswith(b"ACK ") else []
            pid = int(out.split()[1])
            time.sleep(rng.uniform(0.02, 0.4))
            os.kill(pid, signal.SIGKILL)
            while (out := zygote.stdout.readline()) != b"REAPED\n":
                assert out, "the zygote died"
                acked += [out.split()[1].decode()] if out.startswith(b"ACK ") else []
    finally:
        zygote.stdin.close()
        zygote.wait(30)
    assert len(acked) >= 10, "too few traces acknowledged to test anything"
    path = landing / f"{WINDOW}.jsonl"
    body = path.read_bytes()
    lines = body.split(b"\n")
    for whole in lines[:-1]:  # every line but a torn last one parses
        json.loads(whole)
    report = TraceStore(store).ingest_path(landing)
    torn = [s for s in report.skipped if "torn" in s["reason"]]
    assert len(torn) == (1 if lines[-1] else 0), report.skipped
    assert report.rejected == 0, TraceStore(store).quarantine(WINDOW)[:1]
    ids = stored_ids(store)
    assert len(ids) == len(set(ids))
    missing = set(acked) - set(ids)
    assert not missing, f"{len(missing)} acknowledged traces lost"
    again = TraceStore(store).ingest_path(landing)  # idempotent
    assert (again.accepted, again.duplicates) == (0, len(lines) - 1)
    in_landing = [json.loads(x)["trace_id"] for x in lines[:-1]]
    assert len(in_landing) == len(set(in_landing))  # no acknowledged trace written twice either


@pytest.fixture
def small_fs(tmp_path: Path):
    """A real 64 KiB tmpfs (root only); skipped with the reason when it cannot be mounted."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full filesystem needs a tmpfs mount: not running as root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 64k tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_full_disk_acknowledges_nothing_and_leaves_the_file_unchanged(store: Path, small_fs: Path):
    svc = SegosService(store, landing=small_fs, reload="sync")
    ok = svc.record_trace("t", ["a small one"], ["csv-loader"], 1.0, timestamp=f"{WINDOW}T01:00:00Z")
    path = Path(ok["file"])
    (small_fs / "filler").write_bytes(b"x" * (40 << 10))  # about 20 KiB left
    before = path.read_bytes()
    with pytest.raises(TraceNotWritten, match="No space left"):
        svc.record_trace("t", ["q" * 30_000] * 4, ["csv-loader"], 1.0, timestamp=f"{WINDOW}T01:00:00Z")
    assert path.read_bytes() == before  # nothing of the refused trace stays behind
    (small_fs / "filler").unlink()
    again = svc.record_trace("t", ["after"], ["csv-loader"], 1.0, timestamp=f"{WINDOW}T01:00:00Z")
    assert [json.loads(x)["trace_id"] for x in path.read_bytes().splitlines()] == [
        ok["trace_id"],
        again["trace_id"],
    ]


def test_mcp_turns_a_failed_write_into_an_error_reply():
    from segos_pipeline.service.mcp_server import expected_failure

    assert expected_failure(TraceNotWritten("trace not recorded: ..."))


# ------------------------------------------------------------------------------- ingest: torn tails


def test_ingest_skips_a_torn_tail_and_reads_it_once_repaired(store: Path, tmp_path: Path):
    landing = tmp_path / "landing"
    landing.mkdir()
    path = landing / f"{WINDOW}.jsonl"
    path.write_bytes(line(1) + b"\n" + line(2)[:50])
    res = run("ingest", landing, "--store", store, "--json", "--quiet")
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert (report["accepted"], report["rejected"], report["quarantined"]) == (1, 0, 0)
    assert report["skipped"] == [
        {"source": f"{path}:2", "reason": report["skipped"][0]["reason"]}
    ] and report["skipped"][0]["reason"].startswith("torn last line (50 bytes")
    append_line(path, line(3))  # the next append moves the torn bytes aside
    report = TraceStore(store).ingest_path(landing)
    assert (report.accepted, report.duplicates, report.rejected, report.skipped) == (1, 1, 0, [])
    assert sorted(stored_ids(store)) == ["w-1", "w-3"]
    assert TraceStore(store).quarantine(WINDOW) == []


def test_ingest_reads_a_complete_last_line_without_newline(store: Path, tmp_path: Path):
    path = tmp_path / f"{WINDOW}.jsonl"
    path.write_bytes(line(1) + b"\n" + line(2))
    for report in (
        TraceStore(store).ingest_path(path),
        TraceStore(store).ingest(iter_records(path, "native")),  # the record adapters' way in
    ):
        assert report.skipped == [] and report.rejected == 0
    assert sorted(stored_ids(store)) == ["w-1", "w-2"]


def test_both_ingest_paths_skip_the_same_torn_tail(store: Path, tmp_path: Path):
    path = tmp_path / f"{WINDOW}.jsonl"
    path.write_bytes(line(1) + b"\n" + b'{"trace_id": "w-2", "task')
    fast = TraceStore(store).ingest_path(path)
    slow = TraceStore(store).ingest(iter_records(path, "native"))
    assert fast.skipped == slow.skipped and len(fast.skipped) == 1
    assert (fast.accepted, slow.duplicates, fast.rejected + slow.rejected) == (1, 1, 0)


# ------------------------------------------------------------------------- ingest: only what is ours


def test_linked_landing_files_are_reported_and_never_read(store: Path, tmp_path: Path):
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET + b"\n" + line(9) + b"\n")  # even a valid trace behind a link is not read
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / f"{WINDOW}.jsonl").write_bytes(line(1) + b"\n")
    (landing / "notes.jsonl").symlink_to("/etc/passwd")
    (landing / "keys.jsonl").symlink_to(secret)
    (landing / "sub.jsonl").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(landing / "pipe.jsonl")  # opening a FIFO must not block the run
    res = run("ingest", landing, "--store", store)
    assert res.exit_code == 0, res.output
    for name in ("notes.jsonl", "keys.jsonl", "sub.jsonl"):
        assert f"skipped {landing / name}: a symbolic link: not followed, never read" in res.output
    assert f"skipped {landing / 'pipe.jsonl'}: not a regular file: never read" in res.output
    assert stored_ids(store) == ["w-1"]
    passwd = [x for x in Path("/etc/passwd").read_bytes().splitlines() if len(x) > 8]
    for file in store.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            assert SECRET[:30] not in data and b"w-9" not in data, file
            assert not any(x in data for x in passwd), file


def test_a_linked_file_given_by_name_is_refused(store: Path, tmp_path: Path):
    target = tmp_path / "t.jsonl"
    target.write_bytes(line(1) + b"\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    report = TraceStore(store).ingest_path(link)
    assert report.read == 0 and report.skipped[0]["source"] == str(link)
    assert stored_ids(store) == []


# ------------------------------------------------------------------------------- small ones (item 8)


def test_ingest_sweeps_only_old_orphan_temporary_parts(store: Path, tmp_path: Path):
    parts = store / "traces" / WINDOW / "parts"
    parts.mkdir(parents=True)
    old, fresh = parts / "killed.parquet.tmp", parts / "live.parquet.tmp"
    old.write_bytes(b"PAR1 half a part")
    fresh.write_bytes(b"PAR1 being written")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    source = tmp_path / f"{WINDOW}.jsonl"
    source.write_bytes(line(1) + b"\n")
    res = run("ingest", source, "--store", store, "--quiet")
    assert res.exit_code == 0, res.output
    assert not old.exists() and fresh.exists()  # a live run's part is never taken
    assert stored_ids(store) == ["w-1"]


@pytest.mark.parametrize("inside", [".", "traces", "versions"])
def test_ingest_refuses_the_store_and_its_own_folders(store: Path, inside: str):
    (store / "landing").mkdir()
    (store / "landing" / f"{WINDOW}.jsonl").write_bytes(line(1) + b"\n")
    assert run("ingest", store / "landing", "--store", store, "--quiet").exit_code == 0
    log = store / "traces" / "ingest_log.jsonl"
    before = log.read_bytes()
    res = run("ingest", store / inside, "--store", store, "--quiet")
    assert res.exit_code == 2, res.output
    assert "not traces" in res.output and f"segos ingest {store / 'landing'}" in res.output
    assert log.read_bytes() == before  # nothing read, nothing logged
    assert stored_ids(store) == ["w-1"]
    assert TraceStore(store).quarantine(WINDOW) == []


def test_a_malformed_window_date_names_its_option(store: Path, tmp_path: Path):
    res = run("simulate", "--window", "w1", "--store", store, "--out", tmp_path / "sim.jsonl")
    assert res.exit_code == 2
    assert "'--window': expected YYYY-MM-DD, got 'w1'" in res.output
    assert "isoformat" not in res.output


def test_quarantine_keeps_a_bounded_prefix_and_the_length(store: Path, tmp_path: Path):
    path = tmp_path / f"{WINDOW}.jsonl"
    foreign = b"ssh-ed25519 " + b"A" * 200_000  # a whole foreign line: not a trace
    path.write_bytes(line(1) + b"\n" + foreign + b"\n")
    report = TraceStore(store).ingest_path(path)
    assert (report.accepted, report.rejected) == (1, 1)
    (q,) = TraceStore(store).quarantine("unplaced")
    assert len(q["raw"]) <= 2000 and q["raw_bytes"] >= len(foreign)
    assert q["raw"].startswith("ssh-ed25519 AAAA")
