#!/usr/bin/env python
"""What segos' own stdio transport (`service/mcp_stdio.py`) saves per MCP request against the SDK's.

    .venv/bin/python benchmarks/bench_mcp_transport.py [--rounds 20] [--clients python,line,ts]

Two `segos mcp` servers on one store of the real 344-skill library: one as shipped, one with the SDK's
`run_stdio_async` in place of `mcp_stdio.run_stdio` (patched in a launcher, the rest of the process
unchanged). Each client (the Python SDK's, a minimal line-per-request client, the official TypeScript
SDK's: `benchmarks/bench_service.py` has all three) sends every SkillsBench dev instruction to both servers
as `retrieve_skill_bundle`, back to back in alternating order, so both see the same load. Reported per
client: each side's p50 and the median of the per-query differences (SDK transport minus ours; positive:
ours is faster). Writes benchmarks/results/mcp_transport.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_service
import harness

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
RESULTS = ROOT / "benchmarks" / "results"
PY = sys.executable
# `segos mcp` with the SDK's own stdio transport: the launcher swaps the one function and runs the CLI.
SDK_TRANSPORT = (
    "import runpy, sys\n"
    "import segos_pipeline.service.mcp_server as m\n"
    "async def _sdk(app):\n"
    "    await app.run_stdio_async()\n"
    "m.run_stdio = _sdk\n"
    "sys.argv = ['segos', *sys.argv[1:]]\n"
    "runpy.run_module('segos_pipeline.cli', run_name='__main__')\n"
)


def _commands(store: Path) -> dict[str, list[str]]:
    args = ["mcp", "--store", str(store)]
    return {"ours": [PY, "-m", "segos_pipeline.cli", *args], "sdk": [PY, "-c", SDK_TRANSPORT, *args]}


def _paired(calls: dict[str, Callable[[str], float]], queries: list[str], rounds: int) -> dict[str, Any]:
    """Each query to both servers back to back, the first of the pair alternating; times in ms."""
    times: dict[str, list[float]] = {"ours": [], "sdk": []}
    for q in queries[:10]:  # warm-up
        for call in calls.values():
            call(q)
    for r in range(rounds):
        for i, q in enumerate(queries):
            for side in ("ours", "sdk") if (i + r) % 2 == 0 else ("sdk", "ours"):
                times[side].append(calls[side](q))
    return _summary(times)


def _summary(times: dict[str, list[float]]) -> dict[str, Any]:
    diffs = [sdk - ours for ours, sdk in zip(times["ours"], times["sdk"], strict=True)]
    return {
        "pairs": len(diffs),
        "ours_p50_ms": round(statistics.median(times["ours"]), 3),
        "sdk_p50_ms": round(statistics.median(times["sdk"]), 3),
        "saved_ms_median_of_pairs": round(statistics.median(diffs), 3),
        "load_after": round(os.getloadavg()[0], 1),
    }


def _timed(fn: Callable[[str], Any]) -> Callable[[str], float]:
    def call(q: str) -> float:
        t = time.perf_counter()
        fn(q)
        return (time.perf_counter() - t) * 1000

    return call


def bench_line(store: Path, queries: list[str], rounds: int) -> dict[str, Any]:
    clients = {side: bench_service._LineClient(cmd) for side, cmd in _commands(store).items()}
    try:
        calls = {
            side: _timed(lambda q, c=c: c.call_tool("retrieve_skill_bundle", {"query": q}))
            for side, c in clients.items()
        }
        return _paired(calls, queries, rounds)
    finally:
        for c in clients.values():
            c.close()


def bench_ts(store: Path, queries: list[str], rounds: int) -> dict[str, Any]:
    missing = bench_service._TsClient.available()
    if missing is not None:
        return {"skipped": missing}
    clients = {side: bench_service._TsClient(cmd) for side, cmd in _commands(store).items()}
    try:
        return _paired({side: c.call for side, c in clients.items()}, queries, rounds)
    finally:
        for c in clients.values():
            c.close()


def bench_python(store: Path, queries: list[str], rounds: int) -> dict[str, Any]:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = {
        side: StdioServerParameters(command=cmd[0], args=cmd[1:], cwd=str(ROOT))
        for side, cmd in _commands(store).items()
    }
    times: dict[str, list[float]] = {"ours": [], "sdk": []}

    async def scenario() -> None:
        async with Client(params["ours"]) as ours, Client(params["sdk"]) as sdk:
            clients = {"ours": ours, "sdk": sdk}

            async def call(side: str, q: str) -> float:
                t = time.perf_counter()
                res = await clients[side].call_tool("retrieve_skill_bundle", {"query": q})
                assert not res.is_error
                return (time.perf_counter() - t) * 1000

            for q in queries[:10]:
                for side in clients:
                    await call(side, q)
            for r in range(rounds):
                for i, q in enumerate(queries):
                    for side in ("ours", "sdk") if (i + r) % 2 == 0 else ("sdk", "ours"):
                        times[side].append(await call(side, q))

    anyio.run(scenario)
    return _summary(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", default="python,line,ts")
    args = ap.parse_args()
    from segos_pipeline import build_cold_start

    store = OUT / "stores" / "mcp-transport-real"
    if store.exists():
        shutil.rmtree(store)
    build_cold_start(bench_service.REAL_LIBRARY, store)
    time.sleep(2.5)  # the service re-lists a store whose versions/ folder is younger than 2 s
    queries = bench_service._queries()
    benches = {"python": bench_python, "line": bench_line, "ts": bench_ts}
    result: dict[str, Any] = {"library": str(bench_service.REAL_LIBRARY), "queries": len(queries)}
    for name in args.clients.split(","):
        harness.say(
            f"{name} client: {args.rounds} rounds of {len(queries)} queries", tag="bench-mcp-transport"
        )
        result[name] = benches[name](store, queries, args.rounds)
        print(json.dumps({name: result[name]}), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "mcp_transport.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
