"""segos: a self-evolving Graph-of-Skills retrieval layer (the domain library; never imports Dagster)."""

__version__ = "0.1.0"

from .build import build_cold_start
from .config import BuildConfig, GraphConfig, ParseConfig, RetrievalConfig, TransitionConfig
from .retrieval import Bundle, Retriever
from .snapshot import Snapshot, SnapshotError, SnapshotStore

__all__ = [
    "BuildConfig",
    "Bundle",
    "GraphConfig",
    "ParseConfig",
    "RetrievalConfig",
    "Retriever",
    "Snapshot",
    "SnapshotError",
    "SnapshotStore",
    "TransitionConfig",
    "__version__",
    "build_cold_start",
]
