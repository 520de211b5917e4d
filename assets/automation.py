"""Jobs, the nightly schedule and the trace-landing sensor. Schedule and sensor are off by default:
turn them on in the UI (Automation) or with `dagster schedule start` / `dagster sensor start`; they run
only while `dagster-daemon` (started by `dagster dev`) is running."""

# No `from __future__ import annotations`: Dagster inspects these signatures at runtime.

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dagster import (
    AssetKey,
    AssetRecordsFilter,
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


@dataclass(frozen=True)
class Due:
    """A window the sensor starts, and the run key that keeps it from starting twice."""

    window: str
    run_key: str


def due_windows(
    keys: list[str],
    files: dict[str, float],
    seen: dict[str, float],
    done: set[str],
    ingested_at: Callable[[str], float | None],
) -> tuple[list[Due], dict[str, float], list[str]]:
    """The windows to start this tick, the new cursor, and the windows that wait (and for what).

    `keys`: the windows whose day ended, oldest first; `files`: landing {file name: mtime}; `seen`: the
    cursor; `done`: windows whose graph_snapshot is materialized; `ingested_at(w)`: when traces[w] was
    last materialized. A window runs when its file is new or changed, and once its previous window is
    materialized (a window builds on it; runs started in one tick run side by side). A file already
    ingested after it was written (the quick start's windows, when the sensor is turned on later) is only
    recorded. A day without a file before the newest landed window runs as a no-op window, so the chain is
    never stuck on a missing partition."""
    cursor, due, waiting = dict(seen), [], []
    landed = [w for w in keys if f"{w}.jsonl" in files]
    for i, window in enumerate(keys):
        name = f"{window}.jsonl"
        mtime = files.get(name)
        ready = i == 0 or (keys[i - 1] in done and all(d.window != keys[i - 1] for d in due))
        if mtime is not None:
            if seen.get(name) == mtime:
                continue
            stamp = ingested_at(window) if name not in seen and window in done else None
            if stamp is not None and stamp >= mtime:
                cursor[name] = mtime  # ingested since it was written: nothing new
            elif ready:
                due.append(Due(window, f"{window}:{mtime}"))
                cursor[name] = mtime
            else:
                waiting.append(f"{window} (after {keys[i - 1]})")
        elif window not in done and landed and window < landed[-1]:
            if ready:
                due.append(Due(window, f"{window}:no-traces"))
            else:
                waiting.append(f"{window} (after {keys[i - 1]})")
    return due, cursor, waiting


@sensor(
    job=evolution_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.STOPPED,
    description="Start the evolution window of every new or changed <YYYY-MM-DD>.jsonl in the trace "
    "landing folder (cursor: file mtimes), each once its previous window is committed; windows already "
    "ingested since their file was written are skipped, and days without a file before the newest one "
    "run as no-op windows. A file whose day has not ended yet waits for its partition.",
)
def trace_landing_sensor(context: SensorEvaluationContext, segos: SegosPaths) -> SensorResult | SkipReason:
    seen: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
    folder = segos.landing_path()
    current = landing_files(folder)
    keys = windows.get_partition_keys()
    instance = context.instance
    done = instance.get_materialized_partitions(AssetKey("graph_snapshot"))

    def ingested_at(window: str) -> float | None:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("traces"), asset_partitions=[window]), limit=1
        ).records
        return records[0].timestamp if records else None

    due, cursor, waiting = due_windows(keys, current, seen, done, ingested_at)
    future = sorted(LANDING_FILE.match(n).group(1) for n in current if n not in cursor)  # type: ignore[union-attr]
    waiting += [f"{w} (the day has not ended)" for w in future if w not in keys]
    if not due:
        note = f"; waiting: {', '.join(waiting)}" if waiting else ""
        reason = f"no new or changed trace files in {folder}{note}"
        if cursor != seen:
            return SensorResult(skip_reason=reason, cursor=json.dumps(cursor, sort_keys=True))
        return SkipReason(reason)
    # the run key includes the mtime: a rewritten file is a new request, a re-evaluation is not
    requests = [RunRequest(run_key=d.run_key, partition_key=d.window) for d in due]
    return SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))
