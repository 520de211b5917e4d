"""Fuzz: over 10,000 mutated inputs across every format the adapters read; nothing raises and every input
is stored, quarantined with a reason, or a counted duplicate (none silently dropped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.adapters import FORMATS
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.paths import DEFAULT_LIBRARY

from ..trace_fuzz import ingest_and_account, write_corpus


@pytest.mark.parametrize("seed", [0])
def test_fuzzed_traces_are_stored_or_quarantined(tmp_path: Path, seed: int):
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, store)
    corpus = write_corpus(tmp_path / "corpus", 10_400, seed=seed)
    assert set(corpus.items) == set(FORMATS) and sum(corpus.items.values()) >= 10_000
    figures = ingest_and_account(TraceStore(store), corpus)
    for fmt, f in figures.items():
        assert f["crashes"] == 0 and f["silently_dropped"] == 0, (fmt, f)
        assert f["stored"] > 0 and f["quarantined"] > 0, (fmt, f)  # both outcomes are exercised
    quarantine = TraceStore(store).quarantine("fuzz-native")
    assert all(q["reason"] and len(q["raw"]) <= 2000 for q in quarantine)
