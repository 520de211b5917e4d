"""The code location: `workspace.yaml` loads this module (`dagster dev` in the project root)."""

from __future__ import annotations

from dagster import Definitions

from .automation import cold_start_job, evolution_job, nightly_evolution, trace_landing_sensor
from .cold_start import cold_start
from .evolution import edge_diff, evolution_round, replay_report, traces
from .resources import build_resources

ASSETS = [
    cold_start,
    traces,
    evolution_round,
    edge_diff,
    replay_report,
]

defs = Definitions(
    assets=ASSETS,
    jobs=[cold_start_job, evolution_job],
    schedules=[nightly_evolution],
    sensors=[trace_landing_sensor],
    resources=build_resources(),
)
