"""Jobs, the nightly schedule and the trace-landing sensor. Schedule and sensor are off by default:
turn them on in the UI (Automation) or with `dagster schedule start` / `dagster sensor start`; they run
only while `dagster-daemon` (started by `dagster dev`) is running."""

# No `from __future__ import annotations`: Dagster inspects these signatures at runtime.

import json
import re
from pathlib import Path

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    build_schedule_from_partitioned_job,
    define_asset_job,
    sensor,
)

from .cold_start import GROUP as COLD_START
from .evolution import GROUP as EVOLUTION
from .evolution import windows
from .resources import SegosPaths

cold_start_job = define_asset_job(
    "cold_start_job",
    selection=AssetSelection.groups(COLD_START),
    description="Parse the library, build the semantic graph and operator, commit the cold-start version.",
)

evolution_job = define_asset_job(
    "evolution_job",
    selection=AssetSelection.groups(EVOLUTION),  # daily windows: inferred from the selected assets
    description="One evolution window: ingest its traces, run L1/L2/L3, commit, diff and replay. "
    "Needs a materialized cold_start_snapshot and the previous window's graph_snapshot.",
)

# Nightly at 03:00 (UTC unless the instance sets a timezone): the window of the day that just ended.
nightly_evolution = build_schedule_from_partitioned_job(
    evolution_job,
    name="nightly_evolution",
    hour_of_day=3,
    minute_of_hour=0,
    default_status=DefaultScheduleStatus.STOPPED,
    description="Evolve the graph on the previous day's traces, every night.",
)

LANDING_FILE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.jsonl$")


def landing_files(folder: Path) -> dict[str, float]:
    """{file name: mtime} of the `<YYYY-MM-DD>.jsonl` files in the landing folder (others ignored)."""
    if not folder.is_dir():
        return {}
    return {p.name: p.stat().st_mtime for p in folder.iterdir() if p.is_file() and LANDING_FILE.match(p.name)}


@sensor(
    job=evolution_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.STOPPED,
    description="Start the evolution window of every new or changed <YYYY-MM-DD>.jsonl in the trace "
    "landing folder (cursor: file mtimes). A file whose day has not ended yet waits for its partition.",
)
def trace_landing_sensor(context: SensorEvaluationContext, segos: SegosPaths) -> SensorResult | SkipReason:
    seen: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
    folder = segos.landing_path()
    current = landing_files(folder)
    valid = set(windows.get_partition_keys())
    requests, cursor, waiting = [], dict(seen), []
    for name, mtime in sorted(current.items()):
        if seen.get(name) == mtime:
            continue
        window = LANDING_FILE.match(name).group(1)  # type: ignore[union-attr]
        if window not in valid:
            waiting.append(window)  # not in the cursor: requested once its partition exists
            continue
        # the run key includes the mtime: a rewritten file is a new request, a re-evaluation is not
        requests.append(RunRequest(run_key=f"{window}:{mtime}", partition_key=window))
        cursor[name] = mtime
    if not requests:
        note = f"; waiting for the day to end: {', '.join(waiting)}" if waiting else ""
        return SkipReason(f"no new or changed trace files in {folder}{note}")
    return SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))
