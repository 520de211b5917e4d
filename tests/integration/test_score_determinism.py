"""Scores are the same to the last bit in every process: nothing in a ranking follows Python's string hash
seed (a set's iteration order), on a version with experience as on a cold start."""

import json
import os
import subprocess
import sys

from segos_pipeline import SnapshotStore, build_cold_start
from segos_pipeline.evolution.adapters import iter_records
from segos_pipeline.evolution.ingest import TraceStore
from segos_pipeline.evolution.round import evolve
from segos_pipeline.paths import DEFAULT_LIBRARY, DEMO_DIR

SCORES = """
import json, sys
from segos_pipeline import Retriever, SnapshotStore
store = SnapshotStore(sys.argv[1])
out = {}
for version in ("v1", "v3"):
    r = Retriever(store.load(version))
    for line in open(sys.argv[2]):
        q = json.loads(line)["query"]
        ranking = r.rank(q)
        out[version + " " + q] = [[int(i), float(ranking.score_of(int(i))).hex()] for i in ranking.order[:20]]
print(json.dumps(out))
"""


def test_scores_do_not_depend_on_the_hash_seed(tmp_path):
    store = SnapshotStore(tmp_path / "store")
    build_cold_start(DEFAULT_LIBRARY, store)
    TraceStore(store).ingest(iter_records(DEMO_DIR / "traces", "native"))
    evolve(store, "2026-11-27")
    evolve(store, "2026-11-28")
    queries = DEMO_DIR / "queries" / "holdout.jsonl"
    runs = []
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, OPENBLAS_NUM_THREADS="1")
        done = subprocess.run(
            [sys.executable, "-c", SCORES, str(store.root), str(queries)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(done.stdout))
    assert len(runs[0]) == 20 and all(runs[0].values())
    assert runs[0] == runs[1] == runs[2]
