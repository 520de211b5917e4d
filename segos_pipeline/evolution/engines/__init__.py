"""Engines that run a round's per-partition trace work: the same kernels (`evolution/evidence.py`) on
polars in this process (`local`) or on Apache Spark executors (`spark`).

An engine turns the parent version and a window of traces into the round's selected traces and the
window's evidence; L1/L2/L3 and the commit run after it, the same for every engine.
"""

from __future__ import annotations

from ...config import EngineConfig
from .base import Engine, EngineResult, TraceInput

__all__ = ["Engine", "EngineResult", "TraceInput", "make_engine"]


def make_engine(config: EngineConfig | None = None) -> Engine:
    """The engine `config.engine` names; Spark is imported only when asked for (an optional extra)."""
    config = config or EngineConfig()
    if config.engine == "local":
        from .local import LocalEngine

        return LocalEngine(config)
    if config.engine == "spark":
        from .spark import SparkEngine

        return SparkEngine(config)
    raise ValueError(f"unknown engine {config.engine!r}: use 'local' or 'spark'")
