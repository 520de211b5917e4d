"""The round's Spark part launched through Dagster Pipes: `spark-submit assets/pipes/spark_round.py`.

`PipesSparkEngine` is an engine (the `window_evidence` of `segos_pipeline.evolution.engines`) whose work
happens in another process: it starts the Spark driver with `spark-submit` through
`PipesSubprocessClient`, passes the round's inputs as Pipes extras, and reads the engine's result back
from the folder the driver wrote. `evolution_round` hands it to `prepare_round` like any engine, so L1, L2,
L3, the commit, the asset keys and their lineage are those of every other round. What the driver reported
over Pipes (the Spark job's metrics) is kept in `reported` for the `graph_snapshot` materialization.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from dagster import AssetExecutionContext, AssetKey, MaterializeResult, PipesSubprocessClient

from segos_pipeline.config import EngineConfig, EvolutionConfig, RetrievalConfig
from segos_pipeline.evolution.engines.base import EngineResult, TraceInput, parquet_files
from segos_pipeline.progress import Progress
from segos_pipeline.store.snapshot import Snapshot

from .pipes import spark_round

SCRIPT = Path(spark_round.__file__).resolve()
LAUNCHES = ("in_process", "pipes")
INSTALL_HINT = (
    "launch='pipes' runs spark-submit: pip install 'segos[spark]' (PySpark ships bin/spark-submit), or set "
    "EngineSettings.spark_submit to a Spark installation's bin/spark-submit; Java 17 on PATH or JAVA_HOME"
)
# The settings the in-process engine gives its sessions (engines/spark.py: no UI, 8 shuffle partitions),
# plus WARN logging so that the step's log shows the job, not Spark's start-up chatter.
SUBMIT_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.log.level": "WARN",
}


def spark_submit_path(configured: str | None) -> Path:
    """The configured spark-submit, else the one the PySpark package ships (`pyspark/bin/spark-submit`)."""
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"EngineSettings.spark_submit {configured!r} is not a file")
        return path
    spec = importlib.util.find_spec("pyspark")  # found, not imported: the Dagster process needs no Spark
    if spec is None or spec.origin is None:
        raise RuntimeError(INSTALL_HINT)
    path = Path(spec.origin).parent / "bin" / "spark-submit"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: {INSTALL_HINT}")
    return path


def require_java() -> None:
    """spark-submit without Java fails with a shell error; say what is missing instead."""
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise RuntimeError(f"no Java found (JAVA_HOME unset, no `java` on PATH): {INSTALL_HINT}")


def spark_submit_command(
    submit: Path, master: str | None, conf: dict[str, str], script: Path = SCRIPT
) -> list[str]:
    """`spark-submit --master M --conf k=v ... script`; with no master, $SPARK_REMOTE (Spark Connect) if
    set, else local[*], as `segos evolve --engine spark` chooses."""
    remote = os.environ.get("SPARK_REMOTE")
    target = ["--remote", remote] if master is None and remote else ["--master", master or "local[*]"]
    merged = {**SUBMIT_DEFAULTS, **conf}
    settings = [arg for key, value in merged.items() for arg in ("--conf", f"{key}={value}")]
    return [str(submit), *target, *settings, str(script)]


def submit_env() -> dict[str, str]:
    """The driver and the Python workers run this interpreter (the same segos) unless told otherwise."""
    return {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
    }


def reported_metadata(results: list[Any], asset_key: AssetKey) -> dict[str, Any]:
    """The metadata the external process reported for `asset_key` (empty when it reported none)."""
    for result in results:
        if isinstance(result, MaterializeResult) and result.asset_key == asset_key:
            return dict(result.metadata or {})
    return {}


@dataclass
class PipesSparkEngine:
    """The Spark engine run by a spark-submit process that Dagster Pipes launches and listens to."""

    context: AssetExecutionContext
    client: PipesSubprocessClient
    config: EngineConfig
    window: str
    spark_submit: str | None = None
    report_to: str = "graph_snapshot"  # the asset whose materialization carries the job's metrics
    name: str = "spark"
    reported: dict[str, Any] = field(default_factory=dict)  # filled by window_evidence

    def window_evidence(
        self,
        parent: Snapshot,
        traces: TraceInput,
        config: EvolutionConfig,
        retrieval: RetrievalConfig,
        progress: Progress | None = None,  # the Spark process reports to Dagster through Pipes instead
    ) -> EngineResult:
        if parent.path is None:
            raise ValueError("the Spark process reads the parent version from its store: commit it first")
        if isinstance(traces, pl.DataFrame):
            raise ValueError(
                "the Spark process reads the window's Parquet files: pass their paths, not a table"
            )
        submit = spark_submit_path(self.spark_submit)
        require_java()
        store_root = parent.path.parent.parent  # STORE/versions/<id> → STORE
        # On the store, as the engine's own scratch: the Spark driver must reach it wherever it runs.
        out = store_root / ".spark" / f"pipes-{uuid.uuid4().hex}"
        command = spark_submit_command(submit, self.config.spark_master, dict(self.config.spark_conf))
        extras = spark_round.extras_for(
            store=str(store_root),
            parent=parent.version,
            window=self.window,
            traces=[str(f) for f in parquet_files(traces)],
            engine=self.config,
            evolution=config,
            retrieval=retrieval,
            out=str(out),
            report_to=self.report_to,
        )
        self.context.log.info(f"launching through Dagster Pipes: {' '.join(command)}")
        t0 = time.perf_counter()
        try:
            invocation = self.client.run(
                context=self.context, command=command, extras=extras, env=submit_env()
            )
            result = spark_round.read_result(out)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        results = list(invocation.get_results(implicit_materializations=False))
        self.reported = reported_metadata(results, AssetKey.from_user_string(self.report_to))
        if not self.reported:
            self.context.log.warning("the Spark process reported no metrics; the round goes on without them")
        # The whole process (JVM and session start included), which the job's own timings leave out.
        result.metrics["process_s"] = round(time.perf_counter() - t0, 3)
        return result
