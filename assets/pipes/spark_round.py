"""The Spark part of an evolution round, run as a Dagster Pipes process.

`evolution_round` (with `EngineSettings(engine="spark", launch="pipes")`) launches this file with
`spark-submit` through `PipesSubprocessClient`. Here, in the Spark driver process and outside Dagster:

1. `open_dagster_pipes()` reads what the asset passed as Pipes extras (store, parent version, the window's
   Parquet, the round's evolution and retrieval settings, the engine settings, a result folder);
2. the Spark engine (`segos_pipeline.evolution.engines.spark.SparkEngine`, the same code as
   `segos evolve --engine spark`) computes the window's evidence on the session spark-submit configured;
3. the engine's result (selected traces, evidence tables, counts, timings, the job's metrics) is written
   to the result folder, which the asset reads back to run L1, L2, L3 and the commit as in every round;
4. the Spark job's metrics go back to Dagster as the `graph_snapshot` materialization's metadata, and
   progress as log lines (`context.log`), both over the Pipes message channel.

This module imports no Dagster orchestration code (only `dagster_pipes`, the small protocol package) and no
module of `assets/`: spark-submit runs it as a plain file, so it must stand on its own. The asset side
imports its result-folder functions (`read_result`), so writer and reader are one piece of code.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import polars as pl

from segos_pipeline.config import EngineConfig, EvolutionConfig, RetrievalConfig
from segos_pipeline.evolution.engines.base import EngineResult
from segos_pipeline.evolution.engines.round_parts import RoundParts
from segos_pipeline.evolution.evidence import WindowEvidence

APP_NAME = "segos-evolve-pipes"
# Every table of the window's evidence (all its fields but the counts, which go into the JSON).
EVIDENCE_TABLES = tuple(f.name for f in fields(WindowEvidence) if f.name != "counts")
RESULT_JSON = "result.json"  # written last: its presence means the folder is complete
# The job's measurements kept as numbers (Dagster plots numeric metadata across windows): time, worker
# memory and the bytes the repartition moved; the whole record goes in the `engine` JSON entry.
PLOTTED = {
    "job_s": "spark.job_s",
    "partition_s_max": "spark.partition_s_max",
    "worker_peak_rss_mb_max": "spark.worker_peak_rss_mb_max",
    "input_arrow_bytes": "spark.shuffle_input_bytes",
    "partitions": "spark.partitions",
    "traces": "spark.traces",
}


# ------------------------------------------------------------------------------ the result folder


def write_result(result: EngineResult, folder: Path) -> None:
    """The engine's result as Parquet tables plus one JSON (counts, timings, metrics), the JSON last."""
    folder.mkdir(parents=True, exist_ok=True)
    if result.selected is not None:  # a window read from files leaves no selected traces to carry
        result.selected.write_parquet(folder / "selected.parquet")
    for name in EVIDENCE_TABLES:
        getattr(result.evidence, name).write_parquet(folder / f"{name}.parquet")
    record = {
        "counts": dict(result.evidence.counts),
        "timings": result.timings,
        "metrics": result.metrics,
        "files": [str(f) for f in result.files] if result.files is not None else None,
        # the round's bucket files stay where the engine wrote them (on the store): the asset commits them
        "round_parts": result.round_parts.record() if result.round_parts is not None else None,
    }
    tmp = folder / f"{RESULT_JSON}.tmp"
    tmp.write_text(json.dumps(record, sort_keys=True))
    tmp.replace(folder / RESULT_JSON)


def read_result(folder: Path) -> EngineResult:
    """What `write_result` wrote; a folder without its JSON is an unfinished run, refused."""
    done = folder / RESULT_JSON
    if not done.is_file():
        raise FileNotFoundError(f"no {RESULT_JSON} in {folder}: the Spark process did not finish its result")
    record = json.loads(done.read_text())
    tables = {name: pl.read_parquet(folder / f"{name}.parquet") for name in EVIDENCE_TABLES}
    return EngineResult(
        selected=pl.read_parquet(selected) if (selected := folder / "selected.parquet").is_file() else None,
        evidence=WindowEvidence(counts=record["counts"], **tables),
        timings=record["timings"],
        metrics=record["metrics"],
        files=[Path(f) for f in record["files"]] if record.get("files") is not None else None,
        round_parts=RoundParts.from_record(parts) if (parts := record.get("round_parts")) else None,
    )


def spark_metadata(metrics: dict[str, Any]) -> dict[str, Any]:
    """The materialization metadata this process reports (Pipes metadata values: raw value and type)."""
    meta: dict[str, Any] = {
        "engine": {"raw_value": metrics, "type": "json"},
        "spark.launch": {"raw_value": str(metrics.get("launch", "pipes")), "type": "text"},
        "spark.master": {"raw_value": str(metrics.get("master", "")), "type": "text"},
    }
    if metrics.get("application_id"):
        meta["spark.application_id"] = {"raw_value": str(metrics["application_id"]), "type": "text"}
    for key, name in PLOTTED.items():
        value = metrics.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            meta[name] = {"raw_value": value, "type": "int" if isinstance(value, int) else "float"}
    return meta


# ------------------------------------------------------------------------------ the Spark process


def session_info(spark: Any) -> dict[str, Any]:
    """Which application ran the job (Spark Connect sessions have no SparkContext to ask)."""
    try:
        context = spark.sparkContext
        return {"application_id": context.applicationId, "master": context.master}
    except Exception:
        return {"application_id": None, "master": os.environ.get("SPARK_REMOTE", "connect")}


def run_evidence(extras: dict[str, Any], log: Any) -> EngineResult:
    """The window's evidence on the Spark session spark-submit configured (master, conf, Python)."""
    from pyspark.sql import SparkSession

    from segos_pipeline.evolution.engines.spark import SparkEngine
    from segos_pipeline.store.snapshot import SnapshotStore

    t0 = time.perf_counter()
    spark = SparkSession.builder.appName(APP_NAME).getOrCreate()
    session_s = time.perf_counter() - t0
    try:
        info = session_info(spark)
        log.info(f"Spark session {info['application_id']} on {info['master']} (Spark {spark.version})")
        # The parent is verified again here: this process may run on another machine than the asset's.
        parent = SnapshotStore(extras["store"]).load(extras["parent"])
        engine = SparkEngine(EngineConfig(**extras["engine"]), session=spark)
        config = EvolutionConfig().with_overrides(**extras["evolution"])
        retrieval = RetrievalConfig(**extras["retrieval"])
        result = engine.window_evidence(parent, extras["traces"], config, retrieval)
    finally:
        spark.stop()
    result.metrics.update(info, launch="pipes", session_s=round(session_s, 3))
    return result


def main() -> None:
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        extras = dict(pipes.extras)
        pipes.log.info(
            f"evidence of window {extras['window']} against parent {extras['parent']}: {extras['traces']}"
        )
        result = run_evidence(extras, pipes.log)
        write_result(result, Path(extras["out"]))
        metrics = result.metrics
        pipes.log.info(
            f"Spark job done: {metrics['traces']} traces in {metrics['partitions']} partitions, job "
            f"{metrics['job_s']} s, slowest partition {metrics['partition_s_max']} s, worker peak "
            f"{metrics['worker_peak_rss_mb_max']} MB"
        )
        pipes.report_asset_materialization(asset_key=extras["report_to"], metadata=spark_metadata(metrics))


def extras_for(
    *,
    store: str,
    parent: str,
    window: str,
    traces: list[str],
    engine: EngineConfig,
    evolution: EvolutionConfig,
    retrieval: RetrievalConfig,
    out: str,
    report_to: str,
) -> dict[str, Any]:
    """The Pipes extras `main` reads: every value JSON, the settings as their dataclass fields."""
    return {
        "store": store,
        "parent": parent,
        "window": window,
        "traces": traces,
        "engine": asdict(engine),
        "evolution": asdict(evolution),
        "retrieval": asdict(retrieval),
        "out": out,
        "report_to": report_to,
    }


if __name__ == "__main__":
    main()
