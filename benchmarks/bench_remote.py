"""What a store on a URI costs next to a local store (docs/storage.md), on one synthetic library.

    python benchmarks/bench_remote.py --skills 10000 --work /tmp/segos-bench-remote

Builds the library's cold-start version in a local store once, then, for `file://` (a folder: the copy
cost without a network) and `memory://` (in-process: the bookkeeping alone), measures in the same run:
publishing that version to the URI (file by file, manifest last), listing and loading it from a fresh
cache (download + hash checks + the local load), loading it again from the now warm cache, and loading it
from the local store (the baseline). A network adds its own latency and bandwidth on top; none here.
Writes benchmarks/results/remote.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import built_synthetic, timed, write_results  # noqa: E402

from segos_pipeline.store.remote import RemoteStore  # noqa: E402
from segos_pipeline.store.snapshot import SnapshotStore  # noqa: E402


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def measure(uri: str, local: SnapshotStore, vid: str, work: Path) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    publisher = RemoteStore(uri, work / f"cache-pub-{tag}")
    _, publish_s, _ = timed(lambda: publisher.publish(local.versions_dir / vid))
    reader = RemoteStore(uri, work / f"cache-read-{tag}")
    _, list_s, _ = timed(reader.list_versions)
    snap, cold_s, _ = timed(lambda: reader.load(vid))
    _, warm_s, _ = timed(lambda: RemoteStore(uri, work / f"cache-read-{tag}").load(vid))
    assert snap.nodes.height > 0
    return {
        "uri": uri.split("://", 1)[0] + "://",
        "publish_s": round(publish_s, 3),
        "list_fresh_cache_s": round(list_s, 3),
        "load_fresh_cache_s": round(cold_s, 3),
        "load_warm_cache_s": round(warm_s, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skills", type=int, default=10_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/segos-bench-remote"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "remote")
    args = ap.parse_args(argv)
    work: Path = args.work
    local, manifest, build_s = built_synthetic(work, args.skills)
    vid = manifest["version"]
    _, local_load_s, _ = timed(lambda: local.load(vid))
    rows = [
        measure((work / "remote").as_uri(), local, vid, work),
        measure(f"memory://bench-{vid}", local, vid, work),
    ]
    result = {
        "skills": args.skills,
        "version_files": len(manifest["files"]) + 1,
        "version_bytes": folder_bytes(local.versions_dir / vid),
        "local_build_s": round(build_s, 3),
        "local_load_s": round(local_load_s, 3),
        "load_average": os.getloadavg()[0],
        "uris": rows,
        "command": f"python benchmarks/bench_remote.py --skills {args.skills}",
    }
    lines = [
        "# A store on a URI next to a local store",
        "",
        f"`{result['command']}`: one cold-start version of a synthetic library of {args.skills:,} skills "
        f"({result['version_files']} files, {result['version_bytes'] / 1e6:.1f} MB); 2 shared cores, load "
        f"average {result['load_average']:.1f} when it ended, so times are noisy: compare within a row.",
        "",
        f"Baseline: building the version in a local store {build_s:.2f} s; loading it from the local store "
        f"{local_load_s:.2f} s.",
        "",
        "| URI | publish (upload, manifest last) | list from a fresh cache | load from a fresh cache "
        "(download, hash checks, load) | load again (warm cache) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['uri']}` | {r['publish_s']:.2f} s | {r['list_fresh_cache_s']:.3f} s | "
            f"{r['load_fresh_cache_s']:.2f} s | {r['load_warm_cache_s']:.2f} s |"
        )
    write_results(args.out, result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
