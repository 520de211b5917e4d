"""Start-up of `segos mcp` over stdio, as a client sees it: seconds from spawning the server to the reply to
`initialize`, to the reply to `tools/list`, and to the reply to a first `search_skills`, plus the server's
CPU time. Raw JSON-RPC lines over the pipes (no client library in the way).

    .venv/bin/python benchmarks/bench_mcp_startup.py STORE [--runs 6] [--baseline DIR]

`--baseline DIR`: alternate each run with one of the `segos_pipeline` found in DIR (for example an older
commit's, from `benchmarks/harness.py baseline COMMIT`), put first on PYTHONPATH, so both see the same
machine load; medians are printed per side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
CALL = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "search_skills", "arguments": {"query": "load a csv and chart it", "top_k": 3}},
}


def _send(proc: subprocess.Popen[bytes], *messages: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    proc.stdin.flush()


def _reply(proc: subprocess.Popen[bytes], wanted: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed stdout")
        message = json.loads(line)
        if message.get("id") == wanted:
            return message


def one_run(store: Path, pythonpath: str | None) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "segos_pipeline.cli", "mcp", "--store", str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd="/",
    )
    _send(proc, INIT)
    _reply(proc, 1)
    t_init = time.perf_counter() - t0
    _send(proc, INITIALIZED, LIST)
    _reply(proc, 2)
    t_list = time.perf_counter() - t0
    _send(proc, CALL)
    answer = _reply(proc, 3)
    t_call = time.perf_counter() - t0
    assert not answer["result"].get("isError"), answer
    assert proc.stdin is not None
    proc.stdin.close()
    usage = harness.reap(proc, timeout=120)
    cpu = usage.ru_utime + usage.ru_stime
    return {"initialize_s": t_init, "tools_list_s": t_list, "first_call_s": t_call, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    sides: dict[str, str | None] = {"this": None}
    if args.baseline is not None:
        sides = {"baseline": str(args.baseline.resolve()), "this": None}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for _ in range(args.runs):
        for name, path in sides.items():
            run = one_run(args.store.resolve(), path)
            results[name].append(run)
            print(name, {k: round(v, 2) for k, v in run.items()}, flush=True)
    summary = {
        name: {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}
        for name, runs in results.items()
    }
    print(json.dumps({"runs": args.runs, "median": summary}, indent=2))


if __name__ == "__main__":
    main()
