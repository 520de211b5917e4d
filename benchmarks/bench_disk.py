"""What reading a skill library cold costs on this machine: the disk, and the parse of packages it must read.

    .venv/bin/python benchmarks/bench_disk.py --library LIB [--file BIG_FILE] [--folders 8] \
        [--drop-caches] [--json OUT]

A build reads every package: its folder's listing, its SKILL.md and its scripts/ listing. When the library
is not in the page cache, each of these is a read from the disk, and their cost, not the parse code, can
set the build's time (`benchmarks/results/speed-1m.md`). This script measures both sides on Linux:

* `--file`: 4 KB reads of a large file with O_DIRECT (never served by the page cache), sequential and at
  random offsets, and at random offsets from 1 to 32 threads: the disk's latency and its ceiling in reads
  a second.
* `--library`: parse_package over every package of `--folders` top-level folders taken from the middle of
  the library, in discovery order, one process, reporting wall and CPU (user and system) time a package
  and how many reads the disk served a package (from /sys/dev/block/<device>/stat; a hot cache shows 0).
  `--drop-caches` (root only) empties the page cache first, so the sample is read cold on purpose.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import harness

from segos_pipeline.config import ParseConfig
from segos_pipeline.graph import discovery, parsing


def device_reads(path: Path) -> tuple[int, int] | None:
    """Reads completed and sectors read so far by the block device holding `path` (None: not known)."""
    st = os.stat(path)
    stat_file = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat")
    try:
        fields = stat_file.read_text().split()
    except OSError:
        return None
    return int(fields[0]), int(fields[2])


def disk_reads(path: Path, reads: int = 2000) -> dict[str, Any]:
    """Microseconds a 4 KB O_DIRECT read, sequential and random, and random reads a second by threads."""
    blocks = os.path.getsize(path) // 4096
    if blocks < 4 * reads:
        raise SystemExit(f"{path} is too small: need at least {16 * reads} KB")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)  # EINVAL where the filesystem has no O_DIRECT

    def timed(offsets: list[int]) -> float:
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
        t = time.perf_counter()
        for block in offsets:
            os.preadv(fd, [buf], block * 4096)
        return (time.perf_counter() - t) / len(offsets) * 1e6

    rng = random.Random(0)
    start = rng.randrange(blocks - reads)
    out: dict[str, Any] = {
        "file": str(path),
        "sequential_us": round(timed(list(range(start, start + reads)))),
        "random_us": round(timed([rng.randrange(blocks) for _ in range(reads)])),
        "random_reads_per_s": {},
    }
    for threads in (1, 2, 4, 8, 16, 32):
        per = max(100, reads // threads)
        workers = [
            threading.Thread(target=timed, args=([rng.randrange(blocks) for _ in range(per)],))
            for _ in range(threads)
        ]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        out["random_reads_per_s"][threads] = round(threads * per / (time.perf_counter() - t))
    os.close(fd)
    return out


def library_reads(library: Path, folders: int, drop_caches: bool) -> dict[str, Any]:
    """Cost a package of parsing a sample of the library as the page cache holds it (or emptied)."""
    names = sorted(os.listdir(library))
    middle = max(0, len(names) // 2 - folders // 2)
    sample = [library / name for name in names[middle : middle + folders]]
    if drop_caches:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    config = ParseConfig()
    before, cpu, t = device_reads(library), os.times(), time.perf_counter()
    n = 0
    for folder in sample:
        for pkg, listed in discovery.listed_packages(str(folder)):
            parsing.parse_package(pkg, library, config, listed)
            n += 1
    wall, cpu_after, after = time.perf_counter() - t, os.times(), device_reads(library)
    per = 1e6 / max(1, n)
    out: dict[str, Any] = {
        "library": str(library),
        "folders": [f.name for f in sample],
        "packages": n,
        "dropped_caches": drop_caches,
        "wall_us": round(wall * per),
        "user_us": round((cpu_after.user - cpu.user) * per),
        "system_us": round((cpu_after.system - cpu.system) * per),
    }
    if before is not None and after is not None:
        out["disk_reads"] = round((after[0] - before[0]) / max(1, n), 2)
        out["disk_kib"] = round((after[1] - before[1]) * 512 / 1024 / max(1, n), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", type=Path, help="a skill library (read only)")
    ap.add_argument("--file", type=Path, help="a large file on the same disk (read only), for the disk side")
    ap.add_argument("--folders", type=int, default=8, help="top-level folders of the library to parse")
    ap.add_argument("--drop-caches", action="store_true", help="empty the page cache first (root)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.library is None and args.file is None:
        ap.error("give --library, --file or both")
    result: dict[str, Any] = {}
    if args.file is not None:
        result["disk"] = disk_reads(args.file)
        print(json.dumps(result["disk"]), flush=True)
    if args.library is not None:
        result["library"] = library_reads(args.library, args.folders, args.drop_caches)
        print(json.dumps(result["library"]), flush=True)
    if args.json is not None:
        harness.write_json(args.json, result)


if __name__ == "__main__":
    main()
