"""The evolution round's trace work at volume: local engine vs Spark engine (local mode), SIMULATED traces.

    .venv/bin/python benchmarks/bench_spark.py --traces 1000000 [--traces ...] [--master local[2]]
                                               [--partition-rows 250000] [--out benchmarks/results]
                                               [--uri]

Traces: the simulator (`segos_pipeline.evaluation.simulate`) writes a base of 5,000 labelled traces over the
demo library and its queries; copies of that base with fresh trace and task ids (vectorised, so every copy
is new tasks, not retries) make the window, written as Parquet parts of `--partition-rows` traces. Each
engine runs the round's partitioned work (attempt selection, retrieval reconstruction, evidence) and L1/L2
on it; L3 is off (its cost is per candidate skill, not per trace, and is measured in bench_evolution).
Measured: wall time per engine, the per-partition kernel time and peak Python-worker RSS Spark reports,
the JVM's peak RSS, the driver's peak RSS, and the bytes the executors ship back (`collect()`) and write
to the scratch folder instead. Under shared load the times are noisy: both engines run in the same
invocation, one after the other.

`--uri`: the store is a `RemoteStore` on a `file://` folder and the window lies in it as a window's parts
(`traces/bench/parts/`), handed to the engines as `segos evolve` does for a URI store (a `StoreWindow`):
Spark's executors hash and read the parts at the URI (fsspec + pyarrow), the local engine downloads them
into the cache first.

Writes spark.json and spark.md (the numbers the 100M–1B plan in docs/spark.md is derived from).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import polars as pl
import psutil

from segos_pipeline import Retriever, SnapshotStore, build_cold_start
from segos_pipeline.config import EngineConfig, EvolutionConfig
from segos_pipeline.evaluation.replay import load_queries
from segos_pipeline.evaluation.simulate import SimulationConfig, simulate
from segos_pipeline.evolution.engines import make_engine
from segos_pipeline.evolution.engines.spark import SparkEngine, spark_session
from segos_pipeline.evolution.engines.store_window import store_window
from segos_pipeline.evolution.round import l1_stage, l2_stage, prepare_round
from segos_pipeline.evolution.traces import trace_frame
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR
from segos_pipeline.store.remote import RemoteStore

ROOT = Path(__file__).resolve().parent.parent
BASE = 5_000


def rss_by_kind() -> dict[str, float]:
    """Resident MB of this process's children by kind (the JVM; Python workers), and of this process (the
    driver: what it holds of the round on top of its start): a `harness.PeakSampler` measure."""
    me = psutil.Process()
    jvm = workers = 0.0
    for child in me.children(recursive=True):
        try:
            mb = child.memory_info().rss / 2**20
            if "java" in child.name():
                jvm += mb
            else:
                workers += mb
        except psutil.Error:
            continue
    return {"jvm_mb": jvm, "python_workers_mb": workers, "driver_mb": me.memory_info().rss / 2**20}


def base_traces(store: SnapshotStore) -> pl.DataFrame:
    tasks = load_queries(DEMO_DIR / "queries" / "demo.jsonl").queries
    records = simulate(Retriever(store.load()), tasks, SimulationConfig(traces=BASE, seed=0))
    return trace_frame(records)


def write_window(base: pl.DataFrame, n: int, folder: Path, part_rows: int) -> int:
    """`n` traces as copies of `base` with fresh trace and task ids, in Parquet parts of `part_rows`."""
    folder.mkdir(parents=True, exist_ok=True)
    copies = -(-n // base.height)
    written = 0
    per_part = max(1, part_rows // base.height)
    for part, start in enumerate(range(0, copies, per_part)):
        ks = range(start, min(copies, start + per_part))
        chunk = pl.concat(
            [
                base.with_columns(
                    trace_id=pl.col("trace_id") + f"-c{k}",
                    task_id=pl.col("task_id") + f"-c{k}",
                )
                for k in ks
            ]
        ).head(n - written)
        chunk.write_parquet(folder / f"part-{part:05d}.parquet")
        written += chunk.height
    return written


def run_engine(store: SnapshotStore, folder: Path, engine_config: EngineConfig) -> dict[str, Any]:
    """One engine's round on the window in `folder` (for a `RemoteStore`: the window `bench` in it)."""
    parent = store.load()
    config = EvolutionConfig(l3_descriptions=False)
    engine = make_engine(engine_config)
    session_s = 0.0
    if isinstance(engine, SparkEngine):
        # A session is long-lived (a cluster's, or one per Dagster run): started before the clock, and
        # its start-up time reported apart.
        t = time.perf_counter()
        engine.session = spark_session(engine_config)
        session_s = time.perf_counter() - t
    driver_start_mb = psutil.Process().memory_info().rss / 2**20
    with harness.PeakSampler(rss_by_kind, interval=0.25) as rss:
        t = time.perf_counter()
        traces = store_window(store, "bench") if store.local_root is None else str(folder)
        state = prepare_round(parent, traces, config, parent_retrieval(parent), engine)
        prepared = time.perf_counter() - t
        l1_stage(state, config)
        l2_stage(state, config)
        total = time.perf_counter() - t
    return {
        "engine": engine_config.engine,
        "round_s": round(total, 2),
        "evidence_s": round(prepared, 2),
        "l1_s": round(state.timings["l1"], 3),
        "l2_s": round(state.timings["l2"], 3),
        "selected": state.counters["traces"]["selected"],
        "workflow_pairs": state.evidence.workflow.height,
        "couse_pairs": state.evidence.couse.height,
        "engine_metrics": state.engine,
        "session_start_s": round(session_s, 1),
        "children_peak_rss": {
            k: round(rss.peaks.get(k, 0.0), 1) for k in ("jvm_mb", "python_workers_mb", "driver_mb")
        },
        "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # sampled during this engine's round only: its peak, and its growth over the RSS at its start
        "driver_round_peak_rss_mb": round(rss.peaks["driver_mb"], 1),
        "driver_round_growth_mb": round(rss.peaks["driver_mb"] - driver_start_mb, 1),
        "_edges": state.edges,
        "_counters": state.counters,
    }


def parent_retrieval(parent: Any) -> Any:
    from segos_pipeline.config import retrieval_for

    return retrieval_for(parent.manifest)


def bench(n: int, master: str, part_rows: int, engines: list[str], uri: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        if uri:  # the window's parts written straight into the URI's folder, as an ingest leaves them
            remote = Path(tmp) / "remote"
            store: SnapshotStore = RemoteStore(remote.as_uri(), Path(tmp) / "cache")
            window = remote / "traces" / "bench" / "parts"
        else:
            store, window = SnapshotStore(Path(tmp) / "store"), Path(tmp) / "window"
        build_cold_start(DEFAULT_LIBRARY, store)
        t = time.perf_counter()
        written = write_window(base_traces(store), n, window, part_rows)
        gen_s = time.perf_counter() - t
        parquet_mb = sum(p.stat().st_size for p in window.iterdir()) / 2**20
        out: dict[str, Any] = {
            "label": "SIMULATED",
            "traces": written,
            "store": "file:// RemoteStore, window at the URI" if uri else "local store, window folder",
            "parquet_mb": round(parquet_mb, 1),
            "generate_s": round(gen_s, 1),
        }
        runs = {}
        for name in engines:
            cfg = EngineConfig(
                engine=name,
                spark_master=master,
                spark_partition_rows=part_rows,
                local_partition_rows=part_rows,
                spark_conf={"spark.driver.memory": os.environ.get("SEGOS_SPARK_DRIVER_MEMORY", "4g")},
            )
            runs[name] = run_engine(store, window, cfg)
            print(f"{n} traces, {name}: {runs[name]['round_s']} s", file=sys.stderr, flush=True)
        if {"local", "spark"} <= set(runs):
            out["same_edges_and_counters"] = bool(
                runs["local"]["_edges"].equals(runs["spark"]["_edges"])
                and runs["local"]["_counters"] == runs["spark"]["_counters"]
            )
        out["engines"] = {
            k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")} for k, v in runs.items()
        }
        return out


def per_partition(result: dict[str, Any]) -> dict[str, float]:
    """Per-trace costs measured on the Spark partitions (what the scale plan extrapolates)."""
    m = result["engines"]["spark"]["engine_metrics"]
    rows = max(1, m["partition_rows_max"])
    return {
        "kernel_us_per_trace": round(
            1e6 * m["partition_s_mean"] * m["partitions_nonempty"] / result["traces"], 2
        ),
        "worker_peak_rss_mb": m["worker_peak_rss_mb_max"],
        "rows_per_partition": rows,
        "shipped_bytes_per_trace": round(m["payload_bytes"] / result["traces"], 1),
        # everything collect() brought to the driver, and what the partitions wrote to the scratch instead
        "collected_bytes_per_trace": round(m.get("collected_bytes", 0) / result["traces"], 2),
        "written_parquet_bytes_per_trace": {
            k: round(v / result["traces"], 2) for k, v in m.get("written_parquet_bytes", {}).items()
        },
        "selected_parquet_bytes_per_trace": round(m["selected_parquet_bytes"] / result["traces"], 1),
        "shuffled_arrow_bytes_per_trace": round(m.get("input_arrow_bytes", 0) / result["traces"], 1),
        # Parquet the driver read back from the scratch folder: reported by the engine since the round's
        # bucket files (the witnesses and usage); before them, every written table was read back
        "driver_read_bytes_per_trace": round(
            m.get("driver_read_bytes", sum(m.get("written_parquet_bytes", {}).values())) / result["traces"], 2
        ),
        "round_buckets": m.get("round_buckets"),
        "driver_round_growth_mb": result["engines"]["spark"].get("driver_round_growth_mb"),
        "parquet_bytes_per_trace": round(result["parquet_mb"] * 2**20 / result["traces"], 1),
    }


def markdown(results: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Evolution round on Spark (SIMULATED traces)",
        "",
        f"Command: `{command}`",
        "",
        "Machine: 2 cores shared with other jobs (load average well above 2 during the run): times are "
        "noisy; both engines ran in the same invocation. L3 off; the evidence stage includes attempt "
        "selection and retrieval reconstruction.",
        "",
        "| traces | engine | round s | evidence s | partitions | partition s (mean / max) | "
        "worker peak RSS MB | JVM peak RSS MB | driver peak RSS MB | shipped MB | same version |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for name, e in r["engines"].items():
            m = e["engine_metrics"]
            part = f"{m['partition_s_mean']} / {m['partition_s_max']}" if name == "spark" else "in process"
            lines.append(
                f"| {r['traces']:,} | {name} | {e['round_s']} | {e['evidence_s']} | {m['partitions']} | "
                f"{part} | "
                f"{m.get('worker_peak_rss_mb_max', '-')} | {e['children_peak_rss']['jvm_mb'] or '-'} | "
                f"{e['driver_peak_rss_mb']} | "
                f"{round(m.get('payload_bytes', 0) / 2**20, 1) if name == 'spark' else '-'} | "
                f"{r.get('same_edges_and_counters', '-')} |"
            )
    starts = [f"{r['engines']['spark'].get('session_start_s')} s" for r in results if "spark" in r["engines"]]
    lines += ["", f"Spark session start-up, not in the round times: {', '.join(starts) or '-'}."]
    lines += ["", "Per-trace costs on the Spark partitions (input of docs/spark.md's plan):", ""]
    for r in results:
        if "spark" in r["engines"]:
            lines.append(f"- {r['traces']:,} traces: `{json.dumps(per_partition(r))}`")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=int, action="append", required=True)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partition-rows", type=int, default=250_000)
    ap.add_argument("--engines", default="local,spark")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--append", action="store_true", help="Keep the runs already in OUT/spark.json.")
    ap.add_argument("--uri", action="store_true", help="A file:// RemoteStore with the window at the URI.")
    args = ap.parse_args()
    engines = args.engines.split(",")
    results = [bench(n, args.master, args.partition_rows, engines, args.uri) for n in args.traces]
    for r in results:
        if "spark" in r["engines"]:
            r["per_partition"] = per_partition(r)
        r["command"] = "python benchmarks/bench_spark.py " + " ".join(sys.argv[1:])
    previous = args.out / "spark.json"
    if args.append and previous.is_file():
        results = json.loads(previous.read_text())["results"] + results
    command = "; ".join(dict.fromkeys(r["command"] for r in results))
    harness.write_results(
        args.out / "spark", {"command": command, "results": results}, markdown(results, command)
    )
    print(markdown(results, command))


if __name__ == "__main__":
    main()
