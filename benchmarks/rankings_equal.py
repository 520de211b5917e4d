#!/usr/bin/env python
"""Every ranked list of the learning and latency suites, written down to compare two code trees bit for bit.

    .venv/bin/python benchmarks/rankings_equal.py dump before.json [--work DIR]
    (change the code)
    .venv/bin/python benchmarks/rankings_equal.py dump after.json [--work DIR]
    .venv/bin/python benchmarks/rankings_equal.py compare before.json after.json

Suites, each cold and after one round: `transfer` (MetaTool's 199 tools, the even dev requests as traces, the
odd ones queried, as benchmarks/bench_learning.py does), `multi` (the two-tool split: 47 tools, even
requests as traces, odd ones queried) and `witnessed` (bench_latency.py's full-experience case, every dev
request queried). Per query: `ranked_ids` at 5, the cut ranking's top 5 and the full ranking's head 20 with
their scores (as hex floats), the candidates' count, the members' relevance, words and cosines, and each
bundle member's `why`, reasons, experience and co-use. The stores are kept in `--work` and reused.

Scores do not depend on PYTHONHASHSEED (the experience sums a query's tokens in their order of first
use; until 2026-12-04 in set order, and 823 of the 3,250 lists differed in the last bits between seeds 1
and 2). `compare` exits 1 when any list differs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import bench_latency
from bench_learning import read_jsonl

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
METATOOL = SHARED / "eval" / "metatool-dev"


def _evolved(root: Path, library: Path, traces: list[dict[str, Any]]) -> tuple[Any, str, str]:
    from segos_pipeline import SnapshotStore, build_cold_start
    from segos_pipeline.evolution.ingest import TraceStore
    from segos_pipeline.evolution.round import evolve

    store = SnapshotStore(root)
    if len(store.list_versions()) < 2:
        shutil.rmtree(root, ignore_errors=True)
        store = SnapshotStore(root)
        build_cold_start(library, store)
        path = root / "w1.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in traces))
        TraceStore(store).ingest_path(path, window="w1")
        evolve(store, "w1")
    versions = store.list_versions()
    return store, versions[0]["version"], versions[-1]["version"]


def suites(work: Path) -> dict[str, tuple[Any, str, str, list[str]]]:
    """name → (store, cold version, evolved version, query texts)."""
    out = {}
    for name, library, traces, queries in (
        ("transfer", "library", "single.jsonl", "dev.jsonl"),
        ("multi", "library-47", "multi.jsonl", "multi-dev.jsonl"),
    ):
        window = read_jsonl(SHARED / "traces" / "metatool-dev" / traces)[0::2]
        store, cold, evolved = _evolved(work / name, METATOOL / library, window)
        out[name] = (store, cold, evolved, [q["query"] for q in read_jsonl(METATOOL / queries)[1::2]])
    info = bench_latency.prepare_witnessed(work)
    if info is not None:
        from segos_pipeline import SnapshotStore

        texts = [q["query"] for q in read_jsonl(Path(info["queries"]))]
        out["witnessed"] = (SnapshotStore(info["store"]), info["cold"], info["evolved"], texts)
    return out


def _hex(values: Any) -> list[str]:
    return [float(x).hex() for x in values]


def dump(work: Path) -> dict[str, list[dict[str, Any]]]:
    from segos_pipeline import Retriever

    out: dict[str, list[dict[str, Any]]] = {}
    for name, (store, cold, evolved, texts) in suites(work).items():
        for tag, version in (("cold", cold), ("evolved", evolved)):
            r = Retriever(store.load(version))
            rows = []
            for q in texts:
                cut, full = r.rank(q, depth=5), r.rank(q)
                members = r.members(cut, 5)
                cosine = members.relevance.cosine
                bundle = r.retrieve(q, hydrate=False)
                rows.append(
                    {
                        "ids": r.ranked_ids(q, 5),
                        "top5": [[int(i), float(cut.score_of(int(i))).hex()] for i in cut.top(5)],
                        "head20": [[int(i), float(full.score_of(int(i))).hex()] for i in full.order[:20]],
                        "candidates": len(full.candidates),
                        "relevance": _hex(members.relevance.value),
                        "words": _hex(members.relevance.words),
                        "cosine": None if cosine is None else _hex(cosine),
                        "why": [
                            [s.id, s.why, s.reasons, float(s.experience).hex(), float(s.co_use).hex()]
                            for s in bundle.skills
                        ],
                    }
                )
            out[f"{name}/{tag}"] = rows
            print(f"{name} {tag} ({version}): {len(rows)} queries", flush=True)
    return out


def compare(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> int:
    bad = 0
    for key in sorted(a.keys() | b.keys()):
        x, y = a.get(key, []), b.get(key, [])
        differ = [i for i in range(max(len(x), len(y))) if i >= len(x) or i >= len(y) or x[i] != y[i]]
        ids = [i for i in differ if i >= len(x) or i >= len(y) or x[i]["ids"] != y[i]["ids"]]
        print(f"{key}: {len(x)} / {len(y)} queries, {len(differ)} differ ({len(ids)} in their ranked ids)")
        bad += len(differ)
    print("identical" if not bad else f"{bad} differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--work", type=Path, default=Path(__file__).resolve().parent / "out" / "rankings")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        args.work.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dump(args.work)))
        return 0
    return compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()))


if __name__ == "__main__":
    sys.exit(main())
