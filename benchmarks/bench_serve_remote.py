"""What following a store at a URI costs `SegosService` (`segos mcp --store URI`), next to a local store.

    python benchmarks/bench_serve_remote.py --skills 5000 --work /tmp/segos-bench-serve-remote

One synthetic library's cold-start version, built in a local store and published to a `file://` URI.
Measured in the same run, requests alternating between the two services so that load on the machine hits
both alike:

* requests inside the polling interval: p50 / p95 of `search` on a service following the URI store and on
  one following the local store, and how many listings of the URI those requests made (expected: none);
* the request that polls: p50 of a `search` whose interval has just run out (it lists `URI/versions/`);
* the switch: a second version (the edges reweighted, so its edge table and operator are new files while
  the node parts are linked from the cache) published by another `RemoteStore`, then a request every
  20 ms: the time from the end of the publish to the first answer from the new version, with `poll_s` 0
  (download and load alone) and with the default `poll_s`.

Writes benchmarks/results/serve-remote.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import built_synthetic, percentile, write_results  # noqa: E402

from segos_pipeline.config import REMOTE_POLL_S  # noqa: E402
from segos_pipeline.service.api import SegosService  # noqa: E402
from segos_pipeline.store.remote import RemoteStore  # noqa: E402

QUERIES = [
    "parse csv files and plot a chart",
    "convert a pdf document to text",
    "train a classifier on tabular data",
    "resize images in a folder",
    "query a sql database and export results",
]


def ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 50) * 1000, 3),
        "p95_ms": round(percentile(values, 95) * 1000, 3),
    }


def timed_search(svc: SegosService, query: str) -> float:
    t = time.perf_counter()
    svc.search(query)
    return time.perf_counter() - t


def count_listings(store: RemoteStore) -> list[str]:
    """Record every `ls` the service's store makes (a listing of the URI)."""
    seen: list[str] = []
    fs, ls = store.location.fs, store.location.fs.ls

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(path))
        return ls(path, *args, **kwargs)

    fs.ls = counting  # type: ignore[method-assign]
    return seen


def reweighted(writer: RemoteStore) -> str:
    """A new version at the URI whose edge weights differ (an evolution round's typical change)."""
    import polars as pl

    parent = writer.latest()
    snap = writer.load(parent)
    edges = snap.edges.with_columns(pl.col("weight") * 0.99)
    return writer.write(
        nodes=snap.nodes,
        tokens=snap.tokens,
        edges=edges,
        transition=snap.transition * 0.99,
        manifest={"kind": "bench", "parent": parent},
    )["version"]


def until_switched(svc: SegosService, target: str, timeout: float = 600) -> float:
    """Seconds until a request (one every 20 ms) is answered from `target`."""
    t0 = time.perf_counter()
    while svc.search(QUERIES[0])["version"] != target:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"not switched to {target} in {timeout} s")
        time.sleep(0.02)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skills", type=int, default=5000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--work", type=Path, default=Path("/tmp/segos-bench-serve-remote"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serve-remote")
    args = ap.parse_args(argv)
    work: Path = args.work
    local, manifest, _ = built_synthetic(work, args.skills)
    vid = manifest["version"]
    uri = (work / "remote").as_uri()
    writer = RemoteStore(uri, work / "cache-writer")
    writer.publish(local.versions_dir / vid)

    on_local = SegosService(local, landing=work / "landing")
    on_uri = SegosService(RemoteStore(uri, work / "cache-server"), landing=work / "landing", poll_s=3600)
    listings = count_listings(on_uri.store)
    for q in QUERIES:  # warm both (first-query caches)
        on_local.search(q)
        on_uri.search(q)
    listings.clear()
    times: dict[str, list[float]] = {"local": [], "uri": []}
    for i in range(args.requests):
        q = QUERIES[i % len(QUERIES)]
        pair = [("local", on_local), ("uri", on_uri)]
        for name, svc in pair if i % 2 else reversed(pair):
            times[name].append(timed_search(svc, q))
    inside = {"local": ms(times["local"]), "uri": ms(times["uri"]), "uri_listings": len(listings)}

    polling = []
    for i in range(30):
        on_uri.store._listed = None  # the interval has just run out
        polling.append(timed_search(on_uri, QUERIES[i % len(QUERIES)]))

    switch = {}
    for poll_s in (0.0, REMOTE_POLL_S):
        svc = SegosService(
            RemoteStore(uri, work / f"cache-switch-{poll_s:g}"), landing=work / "l", poll_s=poll_s
        )
        new = reweighted(writer)
        switch[f"poll_s={poll_s:g}"] = round(until_switched(svc, new), 3)

    result = {
        "skills": args.skills,
        "requests_per_service": args.requests,
        "inside_interval": inside,
        "polling_request": ms(polling),
        "publish_to_switch_s": switch,
        "load_average": os.getloadavg()[0],
        "command": "python benchmarks/bench_serve_remote.py "
        f"--skills {args.skills} --requests {args.requests}",
    }
    lines = [
        "# `SegosService` following a store at a URI",
        "",
        f"`{result['command']}`: a synthetic library of {args.skills:,} skills, its version published to a "
        f"`file://` folder (no network: what remains is segos' own work); 2 shared cores, load average "
        f"{result['load_average']:.1f} when it ended, so times are noisy: compare within a row.",
        "",
        "| requests | following the local store | following the URI store |",
        "|---|---|---|",
        f"| `search` inside the polling interval, p50 / p95 ({args.requests} each, alternating) | "
        f"{inside['local']['p50_ms']:.2f} / {inside['local']['p95_ms']:.2f} ms | "
        f"{inside['uri']['p50_ms']:.2f} / {inside['uri']['p95_ms']:.2f} ms, "
        f"{inside['uri_listings']} listings of the URI |",
        f"| the `search` that polls (lists the URI), p50 / p95 of 30 | – | "
        f"{result['polling_request']['p50_ms']:.2f} / {result['polling_request']['p95_ms']:.2f} ms |",
        "",
        "From the end of a publish by another cache to the first answer from the new version (a request "
        "every 20 ms; download of the new edge table and operator, hash checks, load, swap): "
        + ", ".join(f"{k}: {v:.2f} s" for k, v in switch.items())
        + ".",
    ]
    write_results(args.out, result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
