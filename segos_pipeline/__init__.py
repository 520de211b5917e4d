"""segos: a self-evolving Graph-of-Skills retrieval layer (the domain library; never imports Dagster)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# The public names load on first use (PEP 562), so a command or tool that needs one module does not import
# them all: `segos update` on a large library is bounded by start-up time.
_EXPORTS = {
    "build_cold_start": "graph.build",
    "BuildConfig": "config",
    "GraphConfig": "config",
    "ParseConfig": "config",
    "RetrievalConfig": "config",
    "TransitionConfig": "config",
    "Bundle": "retrieval.bundle",
    "Retriever": "retrieval.ranker",
    "Snapshot": "store.snapshot",
    "SnapshotError": "store.snapshot",
    "SnapshotStore": "store.snapshot",
    "RemoteStore": "store.remote",
    "open_store": "store.remote",
}

if TYPE_CHECKING:
    from .config import BuildConfig, GraphConfig, ParseConfig, RetrievalConfig, TransitionConfig
    from .graph.build import build_cold_start
    from .retrieval.bundle import Bundle
    from .retrieval.ranker import Retriever
    from .store.remote import RemoteStore, open_store
    from .store.snapshot import Snapshot, SnapshotError, SnapshotStore


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'segos_pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "BuildConfig",
    "Bundle",
    "GraphConfig",
    "ParseConfig",
    "RemoteStore",
    "RetrievalConfig",
    "Retriever",
    "Snapshot",
    "SnapshotError",
    "SnapshotStore",
    "TransitionConfig",
    "__version__",
    "build_cold_start",
    "open_store",
]
